"""The multilingual Gemma 3 270M LoRA on every language, from its scores made on the GPU.

``scripts/train_on_device.py train --multilingual`` fine-tunes Gemma 3 270M (LoRA) on every
language's shared tweets and 4,000 English debate sentences, then scores each group of
:func:`checkworthy.runs.multilingual_set.language_groups` (a team's labels L, 1,000 claims, and the
held-out batch U, 300) on the GPU into ``scores.json``. Two runs are kept under ``bench/scores/``
(xz): ``gemma-lora-ml`` (the versioned model: its training holds every L, so its scores of L are
in-sample) and ``gemma-lora-ml-without-team-labels`` (``--without-team-labels``: no L was trained
on, as a team's own labels would not be). Only the second may be calibrated on L: figures that fit
anything on L read it. ``gemma-lora-ml-l2-without-team-labels``: the same recipe on Gemma's first 2
layers (``--layers 2``; trained on 2 CPU cores, ``.train.log``), a student 9 times cheaper.

Per group, on U's labels: the model's positive-class F1 at 0.5 and ROC AUC; the reference, char
n-gram TF-IDF (2-5) + class-balanced logistic regression fitted on L; and the **stack**: a
class-balanced logistic regression fitted on L over three logits, the model's, TF-IDF's and a
logistic head's on Universal Sentence Encoder multilingual v3 vectors (the last two cross-fitted on
L, 5 folds), deciding at 0.5. The **cascade**: the cheap stack (the same, over
``multilingual-tweets``' logit instead of the model's: ``--fast``) decides every claim, and the
share of U it is least sure of (nearest 0.5; a batch's own ranking, no label read) takes the
stack over all four logits instead; its claims/s follow from :data:`FAST_RATE` and the model's
(``--slow-rate``, :data:`SLOW_RATE`). The **band** (what ``adapt --slow-model`` builds): the same,
but the claims sent are those whose cheap probability lies in a band around 0.5 fixed on L (holding
the share of L's out-of-fold probabilities, :mod:`checkworthy.method.cascade`), so the share of U
sent is measured, not chosen. Mean and spread over Arabic, Spanish, Dutch, Bulgarian and Turkish.
Nothing here runs the model: the scores are the GPU's (the model scores these tweets at about 6
claims/s on 2 CPU cores). Prints the table and a JSON line. Run from the repository root:
``.venv/bin/python -m bench.bench_gemma_multilingual [SCORES.json.xz]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_predict

from checkworthy.method.cascade import band_half_width, in_band
from checkworthy.method.metrics import per_class, roc_auc
from checkworthy.runs.multilingual_set import Group, language_groups
from checkworthy.scorers.embedders import USE_MULTILINGUAL, embed

SCORES = Path(__file__).parent / "scores" / "gemma-lora-ml-without-team-labels.json.xz"
FAST = Path(__file__).parent / "scores" / "multilingual-tweets.json.xz"
#: the shares of U the cascade sends to the larger model
CASCADE_SHARES = (0.05, 0.1, 0.2)
#: claims/s on 2 cores: the cheap path (multilingual-tweets, 304-354 on 2 threads, docs/method.md)
#: and the Gemma LoRA on these tweets (6.4 on 2 idle cores, 16.2 GFLOP a claim with its template:
#: twice a debate sentence's; docs/method.md, "The cheapest model")
FAST_RATE, SLOW_RATE = 300.0, 6.4
LANGUAGES = ("ar-tweets", "es-tweets", "nl-tweets", "bg-tweets", "tr-tweets")


def logit(p: NDArray[np.float64]) -> NDArray[np.float64]:
    """log(p / (1 - p)), p held within [1e-5, 1 - 1e-5]."""
    q = np.clip(p, 1e-5, 1 - 1e-5)
    return np.log(q / (1 - q))


def f1(y: NDArray[np.int64], p: NDArray[np.float64]) -> float:
    """Positive-class F1 of ``p >= 0.5``."""
    return float(per_class(y, (p >= 0.5).astype(int))[1]["f1"])


def balanced() -> LogisticRegression:
    """A class-balanced logistic regression (the reference's and the stack's)."""
    return LogisticRegression(max_iter=3000, class_weight="balanced")


def read(scores: dict[str, list[list[object]]], part: str, claims: list) -> NDArray[np.float64]:
    """The logits of ``claims`` in ``scores``' ``part`` (``labelled`` or ``held_out``), by text hash."""
    by_hash = {h: p for h, _, p in scores[part]}
    p = [by_hash[hashlib.sha256(c.text.encode()).hexdigest()] for c in claims]
    return logit(np.array(p, dtype=float))


def cascade(cheap: NDArray[np.float64], better: NDArray[np.float64], share: float) -> NDArray[np.float64]:
    """``cheap``'s probabilities, but ``better``'s for the ``share`` of claims whose cheap probability
    lies nearest 0.5 (ties: the earlier claim)."""
    out = cheap.copy()
    sent = np.argsort(np.abs(cheap - 0.5), kind="stable")[: round(share * len(cheap))]
    out[sent] = better[sent]
    return out


def figures(group: Group, scores: dict[str, list[list[object]]], fast: dict[str, list[list[object]]]
            ) -> dict[str, float]:
    """The model, TF-IDF on L, the stack and the cascade on one group's U."""
    lab, held = group.labelled, group.held_out
    y_l, y_u = np.array([c.label for c in lab]), np.array([c.label for c in held])
    m_l, m_u = read(scores, "labelled", lab), read(scores, "held_out", held)
    f_l, f_u = read(fast, "labelled", lab), read(fast, "held_out", held)
    tfidf = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), min_df=2, sublinear_tf=True)
    x_l, x_u = tfidf.fit_transform([c.text for c in lab]), tfidf.transform([c.text for c in held])
    t_u_p = balanced().fit(x_l, y_l).predict_proba(x_u)[:, 1]
    t_l = logit(cross_val_predict(balanced(), x_l, y_l, cv=5, method="predict_proba")[:, 1])
    e_l = embed(USE_MULTILINGUAL, [c.text for c in lab])
    e_u = embed(USE_MULTILINGUAL, [c.text for c in held])
    u_l = logit(cross_val_predict(balanced(), e_l, y_l, cv=5, method="predict_proba")[:, 1])
    u_u = logit(balanced().fit(e_l, y_l).predict_proba(e_u)[:, 1])
    stack = balanced().fit(np.c_[m_l, t_l, u_l], y_l).predict_proba(np.c_[m_u, logit(t_u_p), u_u])[:, 1]
    cheap = balanced().fit(np.c_[f_l, t_l, u_l], y_l).predict_proba(np.c_[f_u, logit(t_u_p), u_u])[:, 1]
    both = balanced().fit(np.c_[m_l, f_l, t_l, u_l], y_l)
    both_u = both.predict_proba(np.c_[m_u, f_u, logit(t_u_p), u_u])[:, 1]
    sent = {f"cascade_{share:g}_f1": f1(y_u, cascade(cheap, both_u, share)) for share in CASCADE_SHARES}
    cheap_l = cross_val_predict(balanced(), np.c_[f_l, t_l, u_l], y_l, cv=5, method="predict_proba")[:, 1]
    for share in (*CASCADE_SHARES, 1.0):  # the band fixed on L, as adapt's slower model reads it
        band = in_band(cheap, band_half_width(cheap_l, share))
        sent |= {f"band_{share:g}_f1": f1(y_u, np.where(band, both_u, cheap)),
                 f"band_{share:g}_sent": float(band.mean())}
    model_u = 1 / (1 + np.exp(-m_u))
    return {"model_f1": f1(y_u, model_u), "model_auc": roc_auc(y_u, model_u),
            "tfidf_f1": f1(y_u, t_u_p), "tfidf_auc": roc_auc(y_u, t_u_p),
            "stack_f1": f1(y_u, stack), "stack_auc": roc_auc(y_u, stack),
            "cheap_stack_f1": f1(y_u, cheap), **sent,
            "n_labelled": len(lab), "n_held_out": len(held)}


def load(path: Path) -> dict[str, dict[str, list[list[object]]]]:
    """A scores.json, xz-compressed where its name says so."""
    raw = path.read_bytes()
    return json.loads(lzma.decompress(raw) if path.suffix == ".xz" else raw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scores", nargs="?", type=Path, default=SCORES,
                    help="scores.json(.xz) of train --multilingual")
    ap.add_argument("--fast", type=Path, default=FAST,
                    help="the cheap model's scores.json(.xz) (the cascade's)")
    ap.add_argument("--slow-rate", type=float, default=SLOW_RATE,
                    help=f"claims/s of SCORES' model on 2 cores (default: the Gemma LoRA's, {SLOW_RATE:g})")
    args = ap.parse_args()
    if not args.slow_rate > 0:
        ap.error(f"--slow-rate must be positive, got {args.slow_rate}")
    scores, fast = load(args.scores), load(args.fast)
    rows = {g.name: figures(g, scores[g.name], fast[g.name]) for g in language_groups()}
    cascades = [f"cascade_{share:g}_f1" for share in CASCADE_SHARES]
    bands = [f"band_{share:g}_{what}" for share in (*CASCADE_SHARES, 1.0) for what in ("f1", "sent")]
    print(f"scores: {args.scores.name}; cheap model: {args.fast.name}")
    print("| group | L | U | model F1 | model AUC | TF-IDF on L F1 | AUC | stack F1 | stack AUC | "
          "cheap stack F1 | " + " | ".join(f"cascade {share:.0%} F1" for share in CASCADE_SHARES) + " |")
    print("|---|" + "---:|" * (10 + len(CASCADE_SHARES)))
    for name, r in rows.items():
        print(f"| {name} | {r['n_labelled']} | {r['n_held_out']} | {r['model_f1']:.3f} | "
              f"{r['model_auc']:.3f} | {r['tfidf_f1']:.3f} | {r['tfidf_auc']:.3f} | {r['stack_f1']:.3f} | "
              f"{r['stack_auc']:.3f} | {r['cheap_stack_f1']:.3f} | "
              + " | ".join(f"{r[c]:.3f}" for c in cascades) + " |")
    summary = {}
    for key in ("model_f1", "tfidf_f1", "stack_f1", "cheap_stack_f1", *cascades, *bands, "model_auc",
                "tfidf_auc", "stack_auc"):
        v = [rows[n][key] for n in LANGUAGES]
        summary[key] = {"mean": round(float(np.mean(v)), 3), "min": round(min(v), 3), "max": round(max(v), 3)}
    for name, r in rows.items():
        print(f"{name}, band fixed on L: " + ", ".join(
            f"{share:.0%} of L: F1 {r[f'band_{share:g}_f1']:.3f} ({r[f'band_{share:g}_sent']:.0%} of U sent)"
            for share in (*CASCADE_SHARES, 1.0)))
    for key, s in summary.items():
        print(f"{key} over ar, es, nl, bg, tr: mean {s['mean']:.3f} ({s['min']:.3f}-{s['max']:.3f})")
    rates = {"cheap": FAST_RATE, "model": args.slow_rate,
             **{f"cascade_{share:g}": round(1 / (1 / FAST_RATE + share / args.slow_rate), 1)
                for share in CASCADE_SHARES}}
    print("claims/s on 2 cores, from the rates measured alone: "
          + ", ".join(f"{k} {v:g}" for k, v in rates.items()))
    print(json.dumps({"bench": "gemma_multilingual", "scores": args.scores.name, "fast": args.fast.name,
                      "groups": rows, "over_languages": summary, "claims_per_s": rates}))

if __name__ == "__main__":
    main()
