"""Every interval, correction and calibrator on one calibration run's inputs.

The paper leaves open whether NN-PPI beats the standard recipes and whether any interval keeps
its nominal coverage. This module answers both on the same arrays a stored run used: the run's
target claims (scores, gold labels), its label set L (labels, scores, leave-one-out neighbour
lists) and the targets' neighbour lists from the same SQL kNN. Nothing is fitted on the
targets: every parameter, and the cross-validated choice, comes from L alone.

Families of rows (``family``, ``method``, ``k``, ``metric``, ``class``, ``value``):

``interval``     every method of :data:`checkworthy.method.intervals.INTERVAL_METHODS` around the paper's
                 NN-PPI at the run's k: coverage of the gold label (overall and per class),
                 mean width (raw, and within [0, 1]), mean label-set size, singleton and empty rates.
``interval-cv``  the same intervals centred on the correction chosen by cross-validation.
``sets``         conformal prediction sets from crepes on the raw score (identity) and on Platt
                 scaling, marginal and class-conditional (Mondrian): coverage and set sizes.
``correction``   every point correction of :data:`checkworthy.method.corrections.CORRECTIONS` at the run's k
                 (raw score and KNN are the paper's baselines): weighted F1, class precision,
                 recall, F1, accuracy, predicted positive rate, Brier score and the ROC AUC
                 of the value before it is thresholded (so has every decision family).
``cv``           the correction picked by :func:`checkworthy.method.corrections.select_by_cv` on L
                 (leave-one-out weighted F1), applied to the targets; ``cv_weighted_f1`` is its
                 score on L. ``cv-candidates`` keeps the best L score of each (method, k).
``cv-prior``     the same selection with the decision threshold chosen too, and L's claims
                 reweighted to the class mix of the pool L was drawn from (the paper's L is
                 class-balanced, its test splits 27-34% check-worthy). The pool's prevalence is
                 read from the pool's own labels (e.g. all 2012 debates), never the targets'.
``calibrator``   Platt scaling (on the logit and on the score), isotonic regression, and
                 temperature scaling (token-probability scores only, where the logit is the
                 model's own), fitted on L's scores: the same classification figures.
                 ``calibrator-prior``: their probabilities moved from L's class mix to the
                 pool's by Bayes' rule (:func:`checkworthy.method.calibrators.adjust_prevalence`).
``head``         a logistic head on [embedding, score] fitted on L (:mod:`checkworthy.method.embedding_head`):
                 its probability alone (``minilm-head``) and corrected by NN-PPI at the run's k
                 with L's cross-fitted residuals (``minilm-head+nnppi``). ``head-cv``: the
                 correction and k chosen by cross-validation on L over the head's probabilities
                 (neighbours' scores cross-fitted pairwise, :meth:`HeadFit.labelled_set`);
                 ``interval-head``: every interval centred on that choice.
``auto``         the correction ``auto`` picks on L (Platt scaling, ``head-cv`` or ``cv``, by
                 cross-validated positive-class F1, :mod:`checkworthy.method.predictor_choice`);
                 ``auto-candidates`` keeps each candidate's L figure, ``interval-auto`` every
                 interval centred on the choice.

:func:`compare` is pure (arrays in, rows out); what a run fits it fits through the calibration
service (:func:`checkworthy.runs.calibration.fit_labelled`), each fit once per (run, k) of a pass
(:class:`ComparisonFits`), and it tells its progress step by step. :func:`load_inputs` fetches the
arrays of a stored run (SQL kNN); :func:`ensure_comparison` computes and stores them once per run
and options (:mod:`checkworthy.store.comparisons` reads them back for the report and the CLI).

Limits: coverage and F1 here are measured on the run's target claims, which are the test split
in the main job; they describe this split, not a guarantee (see :mod:`checkworthy.method.intervals`
for what each interval promises). Labels are taken as of the run's finish, as the report does.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar, cast

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection

from checkworthy.data.versioning import git_rev
from checkworthy.method import metrics, nnppi
from checkworthy.method.calibrators import ConformalSets, adjust_prevalence, prediction_sets
from checkworthy.method.corrections import (
    CORRECTIONS,
    Choice,
    CVResult,
    LabelledSet,
    Neighbourhood,
    select_by_cv,
)
from checkworthy.method.intervals import INTERVAL_METHODS, IntervalSummary, summarise
from checkworthy.method.predictor_choice import FittedCorrection
from checkworthy.runs.calibration import fit_labelled, labelled_pool, neighbour_columns
from checkworthy.runs.scoring import Progress, rate_progress
from checkworthy.store.comparisons import (
    comparison_run,
    find_comparison,
    label_set_splits,
    lock_comparison,
    run_targets,
    split_claim_ids,
    store_comparison,
)
from checkworthy.store.comparisons import latest_comparisons as stored_latest_comparisons
from checkworthy.store.embeddings import claim_embeddings
from checkworthy.store.knn import nearest_labelled
from checkworthy.store.label_updates import labels_as_of
from checkworthy.store.rows import ScoreKey, sha256_text

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int_]
T = TypeVar("T")

#: bump when a computation changes: stored comparisons of older versions are not reused
COMPARISON_VERSION = 5  # 2: the embedding head; 3: its L figures cross-fitted pairwise, its intervals;
#: 4: ROC AUC of every decision row; 5: the auto choice and its intervals, ECE of every decision row,
#: Venn-Abers
#: conformal interval methods (the ones whose coverage targets apply)
CONFORMAL = tuple(m for m in INTERVAL_METHODS if m.startswith(("conformal", "mondrian")))
#: conformal prediction sets: name -> (calibrator, class-conditional)
SET_METHODS: dict[str, tuple[str | None, bool]] = {
    "conformal-sets": (None, False),
    "mondrian-sets": (None, True),
    "platt-conformal-sets": ("platt", False),
    "platt-mondrian-sets": ("platt", True),
}
INTERVAL_METRICS = ("coverage", "mean_width", "mean_width_01", "mean_set_size", "singleton_rate",
                    "empty_rate")
#: row families holding intervals and sets, and those holding decisions, in display order
INTERVAL_FAMILIES = ("interval", "interval-cv", "interval-head", "interval-auto", "sets")
DECISION_FAMILIES = ("correction", "cv", "cv-prior", "calibrator", "calibrator-prior", "head", "head-cv",
                     "auto")


@dataclass(frozen=True)
class CompareOptions:
    """What a comparison computes; its :meth:`params` identify a stored comparison."""

    cv_ks: tuple[int, ...] = (3, 5, 10)
    intervals: tuple[str, ...] = tuple(INTERVAL_METHODS)
    corrections: tuple[str, ...] = tuple(CORRECTIONS)
    calibrators: tuple[str, ...] = ("platt", "platt-score", "isotonic", "temperature", "venn-abers")
    sets: tuple[str, ...] = tuple(SET_METHODS)
    #: score kinds temperature scaling is fitted for (a verbalised score's logit means nothing)
    temperature_kinds: tuple[str, ...] = ("token_prob",)
    #: thresholds the prior-aware CV (``cv-prior``) may choose
    prior_thresholds: tuple[float, ...] = tuple(round(0.3 + 0.05 * i, 2) for i in range(11))
    #: fit the embedding head (needs the claims' embeddings in the inputs)
    head: bool = True
    seed: int = 0

    def params(self) -> dict[str, Any]:
        """JSON-ready options, with the computation's version."""
        return {"version": COMPARISON_VERSION} | {k: list(v) if isinstance(v, tuple) else v
                                                  for k, v in asdict(self).items()}


@dataclass(frozen=True)
class CompareInputs:
    """The arrays of one run: L, the targets' scores, neighbour lists and gold labels.

    ``nbr`` (n, K) indexes ``cal`` (nearest first); K must cover the run's k, every CV k and
    the split-conformal columns (:func:`checkworthy.runs.calibration_run.neighbour_columns`).
    """

    cal: LabelledSet
    c: FloatArray
    nbr: IntArray
    y: IntArray
    k: int
    dist: FloatArray | None = None
    alpha: float = 0.05
    threshold: float = nnppi.THRESHOLD
    score_kind: str = ""
    #: share of check-worthy claims in the pool L was sampled from (known without test labels)
    pool_prevalence: float | None = None
    #: embeddings of L's claims (rows as ``cal``) and of the targets, for the embedding head
    emb_cal: FloatArray | None = None
    emb: FloatArray | None = None

    def neighbourhood(self, k: int | None = None) -> Neighbourhood:
        """The targets with their first ``k`` (default the run's) neighbours."""
        return Neighbourhood(c=self.c, nbr=self.nbr, cal=self.cal, dist=self.dist, k=k or self.k)


@dataclass(frozen=True)
class MetricRow:
    """One figure (the columns of ``method_comparison``)."""

    family: str
    method: str
    k: int | None
    metric: str
    value: float
    cls: str = "all"


@dataclass
class Comparison:
    """The rows and what was fitted or chosen on L (``info``, JSON-ready)."""

    rows: list[MetricRow] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------------ pure part


def _interval_rows(family: str, method: str, k: int | None, s: IntervalSummary) -> list[MetricRow]:
    rows = [MetricRow(family, method, k, "coverage", s.coverage),
            MetricRow(family, method, k, "coverage", s.coverage_0, "0"),
            MetricRow(family, method, k, "coverage", s.coverage_1, "1")]
    rows += [MetricRow(family, method, k, m, getattr(s, m)) for m in INTERVAL_METRICS[1:]]
    return rows


def _add_interval(out: Comparison, family: str, method: str, nb: Neighbourhood, centre: Any,
                  inp: CompareInputs) -> None:
    """Coverage rows of one interval method around ``centre``; a method that cannot run on these
    neighbourhoods (k = 1 has no residual sd; too few columns for a split) is listed in
    ``info["skipped"]`` instead."""
    try:
        lo, hi = INTERVAL_METHODS[method](nb, inp.alpha, correction=centre)
    except ValueError as exc:
        out.info.setdefault("skipped", []).append(f"{family}/{method}: {exc}")
        return
    out.rows += _interval_rows(family, method, nb.k, summarise(lo, hi, inp.y))


def _decision_rows(family: str, method: str, k: int | None, y: IntArray, p: FloatArray,
                   threshold: float) -> list[MetricRow]:
    """Classification figures of ``p >= threshold``, the Brier score of ``clip(p, 0, 1)`` and the
    ROC AUC of ``p`` (how well it ranks, whatever the threshold)."""
    rep = metrics.classification_report(y, nnppi.decide(p, threshold))
    rows = []
    for name, value in rep.items():
        if name == "gold_positive_rate":
            continue
        base, _, cls = name.rpartition("_")
        rows.append(MetricRow(family, method, k, base, value, cls) if cls in ("0", "1")
                    else MetricRow(family, method, k, name, value))
    rows.append(MetricRow(family, method, k, "brier", metrics.brier(y, p)))
    rows.append(MetricRow(family, method, k, "ece", metrics.expected_calibration_error(y, p)))
    rows.append(MetricRow(family, method, k, "roc_auc", metrics.roc_auc(y, p)))
    return rows


def _label(choice: Choice) -> str:
    if not choice.params:
        return choice.method
    inner = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in sorted(choice.params.items()))
    return f"{choice.method}({inner})"


@dataclass
class ComparisonFits:
    """What a comparison pass fits on L, each fit once: keyed explicitly by (L's digest, what is
    fitted, its name and options, k where it reads k), so the runs of one model at several k share
    the fits that do not read k (the CV choices, the conformal sets) and nothing is fitted twice
    for one (run, k). Oldest entries go first beyond ``limit``."""

    limit: int = 128
    entries: dict[tuple[Any, ...], Any] = field(default_factory=dict)

    def get(self, key: tuple[Any, ...], fit: Callable[[], T]) -> T:
        """The value stored under ``key``, fitted by ``fit()`` the first time."""
        if key not in self.entries:
            if len(self.entries) >= self.limit:
                self.entries.pop(next(iter(self.entries)))
            self.entries[key] = fit()
        return cast(T, self.entries[key])


#: the fits of this process's comparison pass (the main job compares all its runs in one process)
PASS_FITS = ComparisonFits()


def labelled_digest(inp: CompareInputs) -> str:
    """sha256 of what every fit on L reads: L's labels, scores, neighbour lists and distances, and
    its embeddings."""
    h = hashlib.sha256()
    for a in (inp.cal.y, inp.cal.c, inp.cal.nbr, inp.cal.dist, inp.emb_cal):
        arr = np.ascontiguousarray(a) if a is not None else np.empty(0)
        h.update(repr((arr.shape, arr.dtype.str)).encode())
        h.update(arr.tobytes())
    return h.hexdigest()


@dataclass
class _Pass:
    """One run's comparison under way: its inputs and options, the pass's fits, L's digest (the
    fits' key), and the CV choice and its ks once chosen (the intervals and the head read them)."""

    inp: CompareInputs
    o: CompareOptions
    fits: ComparisonFits
    key: str
    best: Choice | None = None
    ks: tuple[int, ...] = ()

    def fitted(self, correction: str, emb: FloatArray | None = None
               ) -> tuple[FittedCorrection, dict[str, Any]]:
        """``correction`` fitted on L at the run's k by the calibration service, once per pass."""
        inp, seed = self.inp, self.o.seed
        return self.fits.get((self.key, "fit", correction, inp.k, inp.threshold, seed),
                             lambda: fit_labelled(inp.cal, correction, inp.k, inp.threshold, emb, seed=seed))

    def cv(self, on: str, cal: LabelledSet, thresholds: tuple[float, ...],
           prevalence: float | None = None) -> CVResult:
        """:func:`select_by_cv` on ``cal`` (L as the scores ``on`` see it), once per pass."""
        return self.fits.get((self.key, "cv", on, self.ks, thresholds, prevalence, self.o.seed),
                             lambda: select_by_cv(cal, ks=self.ks, thresholds=thresholds,
                                                  target_prevalence=prevalence, seed=self.o.seed))


def compare(inp: CompareInputs, options: CompareOptions | None = None, fits: ComparisonFits | None = None,
            progress: Progress | None = None) -> Comparison:
    """Every interval, correction, CV choice, calibrator and conformal set on one run's arrays;
    ``fits``: the pass's (default: this call's own), ``progress``: told (steps done, steps)."""
    o = options or CompareOptions()
    out = Comparison(info={"n_targets": len(inp.y), "n_labelled": inp.cal.m,
                           "labelled_positive_rate": float(inp.cal.y.mean()),
                           "target_positive_rate": float(inp.y.mean()) if len(inp.y) else None,
                           "neighbour_columns": int(inp.nbr.shape[1]), "k": inp.k,
                           "alpha": inp.alpha, "threshold": inp.threshold})
    state = _Pass(inp, o, ComparisonFits() if fits is None else fits, labelled_digest(inp))
    steps = [_correction_rows, _cv_rows, _intervals, _calibrator_rows]
    if o.head and inp.emb_cal is not None and inp.emb is not None:
        steps += [_head_rows, _auto_rows]
    steps.append(_set_rows)
    for done, step in enumerate(steps, 1):
        step(out, state)
        if progress is not None:
            progress(done, len(steps))
    return out


def _correction_rows(out: Comparison, s: _Pass) -> None:
    """Point corrections at the run's k, their parameters fitted on L."""
    inp, fitted = s.inp, {}
    nb = inp.neighbourhood()
    for method in s.o.corrections:
        choice = s.fitted(method)[0].choice
        if choice.params:
            fitted[method] = dict(choice.params)
        out.rows += _decision_rows("correction", method, inp.k, inp.y, choice.theta(nb), inp.threshold)
    out.info["correction_params"] = fitted


def _cv_rows(out: Comparison, s: _Pass) -> None:
    """The cross-validated choice (L only) applied to the targets, every candidate's CV score, and
    with the pool's prevalence the choice for L reweighted to the pool's class mix (its threshold
    chosen too); keeps the choice and the ks it chose among for the intervals and the head."""
    inp = s.inp
    y, thr = inp.y, inp.threshold
    s.ks = tuple(k for k in s.o.cv_ks if k <= inp.cal.max_k and k <= inp.nbr.shape[1])
    cv = s.cv("score", inp.cal, (thr,))
    best = s.best = cv.best
    out.rows += _decision_rows("cv", best.method, best.k, y, best.theta(inp.neighbourhood(best.k)), thr)
    out.rows.append(MetricRow("cv", best.method, best.k, "cv_weighted_f1", best.cv_score))
    per_candidate: dict[tuple[str, int], Choice] = {}
    for ch in cv.table:
        key = (ch.method, ch.k)
        if key not in per_candidate or ch.cv_score > per_candidate[key].cv_score:
            per_candidate[key] = ch
    out.rows += [MetricRow("cv-candidates", m, k, "cv_weighted_f1", ch.cv_score)
                 for (m, k), ch in sorted(per_candidate.items())]
    out.info["cv_choice"] = {"method": best.method, "k": best.k, "params": dict(best.params),
                             "threshold": best.threshold, "cv_weighted_f1": best.cv_score,
                             "label": _label(best), "ks": list(s.ks)}
    if inp.pool_prevalence is not None:  # L reweighted to the pool's class mix, threshold chosen too
        bp = s.cv("score", inp.cal, s.o.prior_thresholds, inp.pool_prevalence).best
        out.rows += _decision_rows("cv-prior", bp.method, bp.k, y, bp.theta(inp.neighbourhood(bp.k)),
                                   bp.threshold)
        out.rows += [MetricRow("cv-prior", bp.method, bp.k, "cv_weighted_f1", bp.cv_score),
                     MetricRow("cv-prior", bp.method, bp.k, "threshold", bp.threshold)]
        out.info["cv_prior_choice"] = {"method": bp.method, "k": bp.k, "params": dict(bp.params),
                                       "threshold": bp.threshold, "cv_weighted_f1": bp.cv_score,
                                       "label": _label(bp), "pool_prevalence": inp.pool_prevalence}


def _intervals(out: Comparison, s: _Pass) -> None:
    """Every interval around the paper's NN-PPI at the run's k, and around the CV choice."""
    assert s.best is not None
    inp, best = s.inp, s.best
    nb, nb_cv = inp.neighbourhood(), inp.neighbourhood(best.k)
    for method in s.o.intervals:
        _add_interval(out, "interval", method, nb, "paper", inp)
        _add_interval(out, "interval-cv", method, nb_cv, best.theta, inp)


def _calibrator_rows(out: Comparison, s: _Pass) -> None:
    """Standard calibrators on the score alone (and, with the pool's prevalence, Bayes' rule from
    L's class mix to the pool's): the calibration service's predictor runs, their raw probability."""
    inp, cal_params = s.inp, {}
    for name in s.o.calibrators:
        if name == "temperature" and inp.score_kind not in s.o.temperature_kinds:
            continue
        fc = s.fitted(name)[0]
        assert fc.predictor is not None
        p, cal_params[name] = fc.scores(inp.c), fc.predictor.params
        out.rows += _decision_rows("calibrator", name, None, inp.y, p, inp.threshold)
        if inp.pool_prevalence is not None:
            q = adjust_prevalence(p, float(inp.cal.y.mean()), inp.pool_prevalence)
            out.rows += _decision_rows("calibrator-prior", name, None, inp.y, q, inp.threshold)
    out.info["calibrator_params"] = cal_params


def _auto_rows(out: Comparison, s: _Pass) -> None:
    """The ``auto`` correction as a run fits it (:func:`checkworthy.runs.calibration.fit_labelled`:
    the candidate chosen on L by cross-validated positive-class F1), its decisions and intervals."""
    inp = s.inp
    fc, fitted = s.fitted("auto", inp.emb_cal)
    name, figures = fitted["auto_choice"]["chosen"], fitted["auto_choice"]["cv_f1_positive"]
    choice = fc.choice
    nb = Neighbourhood(c=fc.scores(inp.c, inp.emb), nbr=inp.nbr, cal=fc.cal, dist=inp.dist,
                       k=inp.k).with_k(choice.k)
    out.rows += _decision_rows("auto", name, choice.k, inp.y, choice.theta(nb), inp.threshold)
    out.rows += [MetricRow("auto-candidates", m, None, "cv_f1_positive", f) for m, f in figures.items()]
    for method in s.o.intervals:
        _add_interval(out, "interval-auto", method, nb, choice.theta, inp)
    out.info["auto"] = {"chosen": name, "k": choice.k, "cv_f1_positive": figures}


def _head_rows(out: Comparison, s: _Pass) -> None:
    """The embedding head as a predictor: alone, under NN-PPI at the run's k (the service's
    ``head+nnppi``), and under the CV choice.

    L's scores become the head's out-of-fold probabilities, so each residual Y_j - c_j is
    cross-fitted; the targets' scores are the head (fitted on all of L) applied to them.
    """
    inp = s.inp
    fc = s.fitted("head+nnppi", inp.emb_cal)[0]
    assert fc.predictor is not None
    p = fc.scores(inp.c, inp.emb)
    nb = Neighbourhood(c=p, nbr=inp.nbr, cal=fc.cal, dist=inp.dist, k=inp.k)
    y, thr = inp.y, inp.threshold
    out.rows += _decision_rows("head", "minilm-head", None, y, p, thr)
    out.rows += _decision_rows("head", "minilm-head+nnppi", inp.k, y, fc.choice.theta(nb), thr)
    best = s.cv("head", fc.cal, (thr,)).best
    out.rows += _decision_rows("head-cv", best.method, best.k, y, best.theta(nb), thr)
    out.rows.append(MetricRow("head-cv", best.method, best.k, "cv_weighted_f1", best.cv_score))
    for method in s.o.intervals:  # the head-cv choice's intervals (L's scores cross-fitted pairwise)
        _add_interval(out, "interval-head", method, nb.with_k(best.k), best.theta, inp)
    out.info["head"] = {"C": fc.predictor.params["C"],
                        "cv_choice": {"method": best.method, "k": best.k, "params": dict(best.params),
                                      "cv_weighted_f1": best.cv_score, "label": _label(best)}}


def _set_rows(out: Comparison, s: _Pass) -> None:
    """Conformal prediction sets (crepes) on the raw score and on Platt scaling."""
    inp = s.inp
    for name in s.o.sets:
        calibrator, class_cond = SET_METHODS[name]
        conformal = ConformalSets(calibrator, class_cond=class_cond, seed=s.o.seed)
        _, summary = prediction_sets(inp.cal.c, inp.cal.y, inp.c, alpha=inp.alpha, y=inp.y,
                                     conformal=conformal)
        assert summary is not None
        out.rows += [r for r in _interval_rows("sets", name, None, summary)
                     if not r.metric.startswith("mean_width")]


def targets_met(rows: Sequence[MetricRow] | Sequence[Mapping[str, Any]], nominal: float = 0.95,
                overall: float = 0.94, per_class: float = 0.92) -> dict[tuple[str, str, int | None], bool]:
    """Per (family, conformal method, k): coverage >= ``overall`` and each class >= ``per_class``.

    The targets are stated for a nominal 95% interval (alpha = 0.05); ``nominal`` is recorded
    for the caller, the thresholds are absolute.
    """
    cov: dict[tuple[str, str, int | None], dict[str, float]] = {}
    for r in rows:
        d = r if isinstance(r, Mapping) else asdict(r) | {"class": r.cls}
        if d["family"] in INTERVAL_FAMILIES and d["metric"] == "coverage" and (
                d["method"] in CONFORMAL or d["family"] == "sets"):
            cov.setdefault((d["family"], d["method"], d["k"]), {})[d["class"]] = d["value"]
    return {key: (_ok(c.get("all"), overall) and _ok(c.get("0"), per_class) and _ok(c.get("1"), per_class))
            for key, c in cov.items()}


def _ok(v: float | None, bound: float) -> bool:
    return v is not None and not math.isnan(v) and v >= bound


def method_keys(idx: Mapping[tuple, Any], families: Sequence[str]) -> list[tuple[str, str, int | None]]:
    """(family, method, k) present in ``idx`` (keyed by tuples starting with those three),
    families in the given order, then method and k."""
    return sorted({(f, m, k) for f, m, k, *_ in idx if f in families},
                  key=lambda x: (list(families).index(x[0]), x[1], x[2] or 0))


# ---------------------------------------------------------------------------- the store


def pool_prevalence(conn: Connection, label_set_id: int, target_ids: Sequence[int],
                    when: Any) -> float | None:
    """Check-worthy share of the split L was drawn from (e.g. all 2012 debates), labels as of ``when``.

    None unless L's claims come from one (dataset, split) that holds none of the targets: the
    prevalence must be known without the targets' labels.
    """
    pools = label_set_splits(conn, label_set_id)
    if len(pools) != 1:
        return None
    dataset, split = pools[0]
    ids = split_claim_ids(conn, dataset, split)
    if set(ids) & {int(i) for i in target_ids}:
        return None
    gold = labels_as_of(conn, ids, when)
    return float(np.mean(list(gold.values()))) if gold else None


def load_inputs(conn: Connection, run_id: int,
                options: CompareOptions | None = None) -> tuple[CompareInputs, dict[str, Any]]:
    """The arrays of a complete stored run, from the store and one SQL kNN per side.

    Targets are the run's calibrated claims with their stored scores; L is the run's label set
    (scored, embedded claims) with leave-one-out lists. Raises if the run is not complete or a
    target has no gold label as of the run's finish. Also returns whether the kNN still gives
    the run's stored neighbours (``neighbours_as_stored``): the comparison is then on exactly
    the run's neighbourhoods.
    """
    o = options or CompareOptions()
    run = comparison_run(conn, run_id)
    if run is None:
        raise ValueError(f"no calibration run {run_id}")
    if run["status"] != "complete":
        raise ValueError(f"calibration run {run_id} is {run['status']}, not complete")
    res = run_targets(conn, run_id)
    ids = [r.claim_id for r in res]
    gold = labels_as_of(conn, ids, run["finished_at"])
    if len(gold) != len(ids) or not ids:
        raise ValueError(f"run {run_id}: {len(ids) - len(gold)} of {len(ids)} targets have no gold label")
    key = ScoreKey(run["model_id"], run["prompt_version"], run["params_hash"], run["score_kind"])
    k = int(run["k"])
    want = max(k, *o.cv_ks, *(neighbour_columns(kk, m) for m in o.intervals for kk in {k, *o.cv_ks}))
    pool = labelled_pool(conn, run["label_set_id"], key, want, run["embed_model"])
    nq = nearest_labelled(conn, run["label_set_id"], ids, pool.cal.max_k, key, embed_model=run["embed_model"])
    if nq.claim_ids.tolist() != ids:
        raise ValueError(f"run {run_id}: some targets have no embedding")
    stored = [list(r.neighbour_ids) for r in res]
    as_stored = all(len(s) <= nq.neighbour_ids.shape[1] and nq.neighbour_ids[i, :len(s)].tolist() == s
                    for i, s in enumerate(stored))
    emb_cal = emb = None
    if o.head:
        emb_cal = claim_embeddings(conn, pool.claim_ids.tolist(), run["embed_model"])
        emb = claim_embeddings(conn, ids, run["embed_model"])
    inp = CompareInputs(pool_prevalence=pool_prevalence(conn, run["label_set_id"], ids, run["finished_at"]),
                        emb_cal=emb_cal, emb=emb,
                        cal=pool.cal, c=np.array([r.score for r in res], dtype=float),
                        nbr=pool.positions(nq.neighbour_ids), dist=nq.distances,
                        y=np.array([gold[i] for i in ids], dtype=np.int64), k=k, alpha=float(run["alpha"]),
                        threshold=float(run["threshold"]), score_kind=run["score_kind"])
    return inp, {"neighbours_as_stored": as_stored}


def _json_safe(value: Any) -> Any:
    """jsonb has no NaN or Infinity: such numbers become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _params_hash(o: CompareOptions) -> str:
    return sha256_text(json.dumps(o.params(), sort_keys=True))


def ensure_comparison(conn: Connection, run_id: int, options: CompareOptions | None = None,
                      code_rev: str | None = None, flow_run_id: str | None = None,
                      progress: Progress | None = None, fits: ComparisonFits = PASS_FITS) -> int:
    """Compute and store the comparison of a run (once per run and options); return its id.

    ``progress`` is told (steps done, steps) as the comparison goes (default: a line per step on
    stderr, as the scoring passes show theirs: :func:`comparison_progress`); ``fits``: the pass's.
    """
    o = options or CompareOptions()
    lock_comparison(conn, run_id, _params_hash(o))
    found = find_comparison(conn, run_id, _params_hash(o))
    if found is not None:
        return found
    if code_rev is None:
        code_rev = git_rev()
    inp, loaded = load_inputs(conn, run_id, o)
    comp = compare(inp, o, fits, progress or comparison_progress(run_id))
    comp.info |= loaded
    params_json = json.dumps(_json_safe(o.params() | {"info": comp.info}), sort_keys=True)
    return store_comparison(
        conn, run_id, params_json, _params_hash(o), code_rev, flow_run_id,
        [{"family": r.family, "method": r.method, "k": r.k, "metric": r.metric, "cls": r.cls,
          "value": None if math.isnan(r.value) else float(r.value)} for r in comp.rows])


def comparison_progress(run_id: int, echo: Callable[[str], None] | None = None) -> Progress:
    """The progress line of a run's comparison (:func:`checkworthy.runs.scoring.rate_progress`):
    steps done of all, their rate and the time left; on stderr unless ``echo`` says where."""
    def to_stderr(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    return rate_progress(echo or to_stderr,
                         lambda done, total: f"  compared methods on run {run_id}: {done}/{total} steps")


def latest_comparisons(conn: Connection, run_ids: Sequence[int]) -> list[int]:
    """The newest comparison of each run of the current version (for a report to pin)."""
    return stored_latest_comparisons(conn, run_ids, COMPARISON_VERSION)
