"""``checkworthy evaluate``: every predictor on every held-out event, through ``predict``'s own path.

Events are claims that no predictor trained on and no default was tuned on: each ClaimBuster
2016 debate on its own, CLEF 2024 dev and CLEF 2024 dev-test. Each event is calibrated against
its dataset's labelled set L (the paper's balanced calibration sample, params.yaml ``sampling:``),
written as the files a team would give ``checkworthy predict`` (L: ``id,text,label``; the event:
``id,text,label``) and run through :func:`checkworthy.runs.predict.predict_files`: same store,
same runs, reused when run again. An event claim whose normalised text is in L is dropped (its
nearest neighbour would be its own label) and counted.

Per predictor, the methods are the recommended one (params.yaml ``predict:``), the same deciding
for the batch's estimated prior, and the paper's NN-PPI (z interval, k = 10); the raw score at 0.5
comes with every run. What the predictor is chosen by is its raw score's ROC AUC on the labelled
sets, which no predictor trained on: the events only measure.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Engine

from checkworthy.config import DATA_DIR, VAR_DIR
from checkworthy.data.datasets import CLAIMBUSTER, CLEF, load_clef, load_dataset
from checkworthy.data.outputs import atomic_text
from checkworthy.data.records import Claim
from checkworthy.data.splits import build_splits
from checkworthy.data.text import normalise_text
from checkworthy.method import metrics
from checkworthy.method.prevalence import stored_share
from checkworthy.method.sampling import balanced_sample
from checkworthy.method.selective import realised
from checkworthy.runs.own_scores import Row, UserFile
from checkworthy.runs.predict import Recommended, check_score_kind, predict_files, read_files
from checkworthy.runs.train_classifier import DEV_FILE, DEV_SHA256
from checkworthy.scorers.base import Scorer
from checkworthy.scorers.registry import PromptInfo, configured_scorer
from checkworthy.settings import Settings, load_settings
from checkworthy.store.calibration_runs import load_results, load_run
from checkworthy.store.knn import pool_of
from checkworthy.store.languages import drift_status_of
from checkworthy.store.run_spec import DEFAULT_CORRECTION, RunRecord

#: predictors compared by default: (model spec, score kind)
DEFAULT_PREDICTORS = (
    ("ensemble:minilm-lora+gemma-lora", "p_positive"),
    ("classifier:minilm-student", "p_positive"),
    ("classifier:minilm-lora", "p_positive"),
    ("classifier:gemma-lora", "p_positive"),
    ("classifier:minilm-setfit", "p_positive"),
    ("classifier:minilm-lr", "p_positive"),
    ("embedded:gemma3-270m", "token_prob"),
    ("embedded:gemma3-270m-fewshot", "p_yes"),
)
PAPER: dict[str, Any] = {"correction": DEFAULT_CORRECTION, "interval": "z", "k": 10, "prior": "labelled"}
#: model kinds whose ``mode`` option selects the score kinds they compute
LANGUAGE_MODELS = ("embedded", "ollama")


@dataclass(frozen=True)
class Event:
    """A held-out set of labelled claims, calibrated against its dataset's L."""

    name: str
    dataset: str
    #: the ``dataset:split`` group a trained predictor must have excluded from its training
    group: str
    claims: list[Claim]
    n_dropped_in_labelled: int = 0


@dataclass
class Measured:
    """One predictor x method x event: the figures and the run that made them."""

    predictor: str
    method: str
    event: str
    run_id: int
    figures: dict[str, float] = field(default_factory=dict)
    #: what the ``auto`` correction chose on L, with each candidate's figure (None for other methods)
    auto_choice: dict[str, Any] | None = None
    #: the reliability diagram's points of theta: (mean probability, share of label 1, count) per bin
    reliability: list[tuple[float, float, int]] = field(default_factory=list)


def held_out_events(seed: int, n_per_class: Mapping[str, int | None], limit: int | None = None
                    ) -> tuple[dict[str, list[Claim]], list[Event]]:
    """Each dataset's L, and the events: the ClaimBuster 2016 debates one by one, CLEF dev, CLEF
    dev-test. ``limit`` keeps a seeded class-balanced sample of that many per class of each L and
    that many claims of each event (for a quick look and the tests)."""
    labelled: dict[str, list[Claim]] = {}
    raw_events: list[tuple[str, str, str, list[Claim]]] = []
    for name in (CLAIMBUSTER, CLEF):
        claims, _ = load_dataset(name)
        splits = build_splits(name, claims, seed, n_per_class=n_per_class.get(name))
        labelled[name] = splits["calibration"]
        if name == CLAIMBUSTER:
            by_debate: dict[str, list[Claim]] = defaultdict(list)
            for c in splits["test"]:
                by_debate[str(c.extra["File_id"])].append(c)
            raw_events += [(f"ClaimBuster {d.removesuffix('.txt')}", name, f"{name}:2016", part)
                           for d, part in sorted(by_debate.items())]
        else:
            dev, _ = load_clef(DATA_DIR / "raw" / "clef2024" / DEV_FILE, "dev", expected_sha256=DEV_SHA256)
            raw_events += [("CLEF 2024 dev", name, f"{name}:dev", dev),
                           ("CLEF 2024 dev-test", name, f"{name}:dev-test", splits["test"])]
    if limit is not None:
        labelled = {k: [v[i] for i in balanced_sample([c.label for c in v], limit, seed=seed)]
                    for k, v in labelled.items()}
    events = []
    for name, dataset, group, claims in raw_events:
        known = {normalise_text(c.text) for c in labelled[dataset]}
        kept = [c for c in claims if normalise_text(c.text) not in known]
        if limit is not None:
            rng = np.random.default_rng(seed)
            kept = [kept[i] for i in sorted(rng.choice(len(kept), min(limit, len(kept)), replace=False))]
        events.append(Event(name, dataset, group, kept, len(claims) - len(kept)))
    return labelled, events


def write_claims(path: Path, claims: Sequence[Claim]) -> Path:
    """``id,text,label`` as ``predict`` reads it (ids made unique by the file line); same claims,
    same bytes, so the store recognises the file when it is written again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_text(path) as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "label"])
        for c in claims:
            w.writerow([f"{c.dataset}:{c.split}:{c.extra.get('line', c.source_id)}", c.text, c.label])
    return path


def figures(y: np.ndarray, score: np.ndarray, decision: np.ndarray, lo: np.ndarray | None = None,
            hi: np.ndarray | None = None) -> dict[str, float]:
    """Positive-class F1 (the shared task's metric), weighted F1, ROC AUC and average precision of
    ``score``, its expected calibration error and Brier score, the share decided check-worthy and,
    with an interval, its coverage per class."""
    from sklearn.metrics import average_precision_score

    per = metrics.per_class(y, decision)
    out = {"n": float(len(y)), "share_positive": float(y.mean()), "f1_1": per[1]["f1"],
           "weighted_f1": metrics.weighted_f1(y, decision), "roc_auc": metrics.roc_auc(y, score),
           "average_precision": float(average_precision_score(y, score)) if y.any() else float("nan"),
           "share_decided_positive": float(np.mean(decision)),
           "ece": metrics.expected_calibration_error(y, score), "brier": metrics.brier(y, score)}
    if lo is not None and hi is not None:
        out |= {f"coverage_{c}": v for c, v in metrics.interval_coverage(y, lo, hi).items() if c != "all"}
    return out


def review_figures(rule: Mapping[str, Any] | None, y: np.ndarray, theta: np.ndarray,
                   status: np.ndarray | None = None) -> dict[str, float]:
    """The run's decide-or-review rule on the event: the share decided automatically and the risk it
    bounds, realised (wrong decisions among the automatic ones, or check-worthy claims among the
    automatic dismissals), beside the bound; claims drift holds back (``status``) never automatic."""
    if not rule:
        return {}
    share, risk = realised(theta, y, rule["threshold"], rule["risk"], rule["margin"], status)
    return {"automated_share": share, "max_risk": float(rule["max_risk"]),
            "realised_risk": 0.0 if risk is None else risk}


def prevalence_figures(stored: Mapping[str, Any] | None, true_share: float) -> dict[str, float]:
    """The run's estimate of the batch's share of check-worthy claims (label-shift PPI) against the
    true share: estimate, interval, whether it holds the truth, and the naive share called positive;
    where the run found it not estimable, the naive share and ``share_not_estimable`` (1.0)."""
    p = stored_share(stored)
    if p is None or (p.estimate is None and p.not_estimable is None):
        return {}
    if p.estimate is None:
        return {"share_not_estimable": 1.0, "share_naive": p.naive}
    out = {"share_estimate": p.estimate, "share_naive": p.naive}
    if p.low is not None and p.high is not None:
        covered = float(p.low <= true_share <= p.high)
        out |= {"share_low": p.low, "share_high": p.high, "share_covered": covered}
    return out


def methods(rec: Recommended) -> dict[str, Recommended]:
    """The calibrations each predictor gets, by the name the report uses."""
    return {"recommended": rec, "recommended, batch prior": rec.but(prior="batch"),
            "paper NN-PPI": rec.but(**PAPER)}


def evaluate_held_out(
    engine: Engine,
    predictors: Sequence[tuple[str, str]] = DEFAULT_PREDICTORS,
    *,
    settings: Settings | None = None,
    limit: int | None = None,
    work_dir: Path | None = None,
    echo: Callable[[str], None] = lambda _: None,
    only: Sequence[str] | None = None,
) -> tuple[list[Measured], dict[str, dict[str, float]], list[Event]]:
    """Measure every predictor and method (``only`` these of :func:`methods`, by name: a quicker
    look at many predictors) on every event; also each predictor's raw-score ROC AUC on each L
    (``{predictor: {dataset: auc}}``), the figure predictors are chosen by."""
    settings = load_settings() if settings is None else settings
    labelled, events = held_out_events(settings.seed, settings.labelled_sizes(), limit)
    work = work_dir or VAR_DIR / "held-out" / (f"limit-{limit}" if limit else "full")
    l_files = {ds: UserFile.of(write_claims(work / f"{ds}-labelled.csv", claims))
               for ds, claims in labelled.items()}
    u_files = {e.name: UserFile.of(write_claims(work / f"{e.name.replace(' ', '_')}.csv", e.claims))
               for e in events}
    (work / "out").mkdir(exist_ok=True)
    out: list[Measured] = []
    chosen_by: dict[str, dict[str, float]] = {}
    for spec, kind in predictors:
        label = f"{spec} {kind}"
        base, scored_by = _predictor(settings, spec, kind, events)
        for event in events:
            files = (l_files[event.dataset], u_files[event.name])
            lab, unl = read_files(files[0].path, files[1].path, base.k)
            y = np.array([r.label for r in unl])
            for name, rec in methods(base).items():
                if only is not None and name not in only:
                    continue
                target = work / "out" / f"{label}-{event.name}-{name}".replace(" ", "_").replace(":", "_")
                outcome = predict_files(engine, files, (lab, unl), target.with_suffix(".csv"), rec, scored_by)
                out += _measure(engine, outcome.run_id, (label, name, event), rec, unl, y, chosen_by)
                echo(f"{label} | {name} | {event.name}: F1 c1 {out[-1].figures['f1_1']:.3f}, "
                     f"AUC {out[-1].figures['roc_auc']:.3f} (run {outcome.run_id})")
    return out, chosen_by, events


def _predictor(settings: Settings, spec: str, kind: str, events: Sequence[Event]
               ) -> tuple[Recommended, tuple[Scorer, PromptInfo]]:
    """The predictor's recommended calibration and its scorer; refused when it was trained on an
    event (its ``excluded`` groups miss the event's)."""
    # a language model computes only the score kind measured (its fastest mode)
    mode = {"mode": kind} if spec.partition(":")[0] in LANGUAGE_MODELS else {}
    scorer, prompt = configured_scorer(settings.params, spec, **mode)
    base = Recommended.of(settings.predict, model=spec, score_kind=kind)
    check_score_kind(base, scorer)
    excluded = scorer.params().get("excluded")
    seen = [e.name for e in events if excluded is not None and e.group not in excluded]
    if seen:
        raise ValueError(f"{spec} was trained on {', '.join(seen)}: retrain it with the default "
                         "--exclude")
    return base, (scorer, prompt)


def _measure(engine: Engine, run_id: int, what: tuple[str, str, Event], rec: Recommended,
             unl: list[Row], y: np.ndarray, chosen_by: dict[str, dict[str, float]]) -> list[Measured]:
    """The figures of one predictor (``label``) x method (``name``) x event from its stored run (the
    raw score at 0.5 too, beside the recommended method); records the predictor's ROC AUC on the
    event's L in ``chosen_by`` the first time it meets that L."""
    label, name, event = what
    with engine.connect() as conn:
        rows = {r["source_id"]: r for r in load_results(conn, run_id)}
        stored = RunRecord.of(load_run(conn, run_id))
        share = prevalence_figures(stored.prevalence, float(y.mean()))
        if event.dataset not in chosen_by.setdefault(label, {}):
            chosen_by[label][event.dataset] = labelled_auc(conn, run_id)
        res = [rows[r.id] for r in unl]
        status = drift_status_of(conn, [r["claim_id"] for r in res],
                                 [r["neighbour_distances"][0] for r in res], stored.drift)
    col = {k: np.array([r[k] for r in res], dtype=float)
           for k in ("score", "theta", "ci_low", "ci_high", "decision")}
    measured = []
    if name == "recommended":
        raw = (col["score"] >= rec.threshold).astype(int)
        measured.append(Measured(label, "raw score at 0.5", event.name, run_id,
                                 figures(y, col["score"], raw)))
    measured.append(Measured(label, name, event.name, run_id,
                             figures(y, col["theta"], col["decision"].astype(int), col["ci_low"],
                                     col["ci_high"]) | share
                             | review_figures(stored.review, y, col["theta"], status),
                             stored.auto_choice,
                             metrics.reliability(y, col["theta"])))
    return measured


def labelled_auc(conn: Any, run_id: int) -> float:
    """ROC AUC of the raw score on the run's L (the labelled claims it could use as neighbours)."""
    pool = pool_of(conn, load_run(conn, run_id))
    return metrics.roc_auc(pool.labels, pool.scores)
