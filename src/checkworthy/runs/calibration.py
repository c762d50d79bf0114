"""The calibration core: a calibration fitted on its label set L alone (:func:`fit`), applied to
a batch's claims (:func:`calibrate`, :func:`outcome`), and a run finished with what came out
(:func:`finish_run`). Full runs, incremental recalibrations and served requests all go through it,
so the paper's NN-PPI and the fitted methods part ways here only.

Besides the paper's NN-PPI (``z`` + ``paper``, the default), a run may use any interval of
:mod:`checkworthy.method.intervals`, any correction of :mod:`checkworthy.method.corrections`, the
``cv`` choice, a predictor fitted on the label set, or the ``auto`` choice among them
(:mod:`checkworthy.method.predictor_choice`); what was fitted or chosen on L is recorded with the run
(:class:`checkworthy.store.run_spec.RunRecord`). The kNN is the store's SQL, the arithmetic pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection

from checkworthy.config import EMBED_MODEL
from checkworthy.method import nnppi
from checkworthy.method.corrections import CORRECTIONS, LabelledSet, Neighbourhood
from checkworthy.method.decision_cut import decide_prior
from checkworthy.method.drift import CALM, Drift, drift, drift_status, unlike_labelled, with_languages
from checkworthy.method.intervals import INTERVAL_METHODS
from checkworthy.method.metrics import metric_rows
from checkworthy.method.predictor_choice import (
    FittedCorrection,
    auto_columns,
    choose_correction,
    correction_on,
    uses_head,
)
from checkworthy.method.prevalence import share_positive, under_drift
from checkworthy.method.selective import fit_review, neighbour_weights
from checkworthy.runs.review_queue import queue_run, review_flags
from checkworthy.store.calibration_runs import complete_run, insert_results
from checkworthy.store.embeddings import claim_embeddings
from checkworthy.store.knn import (
    EXACT,
    KnnPath,
    Neighbours,
    leave_one_out_neighbours,
    load_pool,
    nearest_labelled,
)
from checkworthy.store.languages import claim_languages, label_set_languages
from checkworthy.store.metrics import store_metrics
from checkworthy.store.rows import ScoreKey, current_labels, max_claims_per_text
from checkworthy.store.run_spec import DEFAULT_CORRECTION, RunRecord, RunSpec

# ------------------------------------------------------------------ the batch's share, rule and drift


def raw_score_prevalence(conn: Connection, spec: RunSpec, c: np.ndarray, figure: Drift | None
                         ) -> dict[str, Any]:
    """The batch's share of label 1 for a run that builds no leave-one-out lists (the paper's
    path): from the raw score's decisions, a predictor fitted on nothing, so its decisions on L are
    as fair as on the batch (:func:`checkworthy.method.prevalence.share_positive`); none when the
    run's drift ``figure`` alerts (:func:`checkworthy.method.prevalence.under_drift`)."""
    m = spec.methods
    pool = load_pool(conn, spec.label_set_id, spec.key, m.embed_model)
    t = m.threshold
    p = share_positive(pool.labels, nnppi.decide(pool.scores, t), nnppi.decide(c, t), m.alpha)
    p = under_drift(p) if unlike_labelled(figure) else p
    return p.as_dict() | {"from": "raw score"}


@dataclass(frozen=True)
class Batch:
    """A run's claims as its decide-or-review rule sees them: theta, the positions in L of each
    claim's k nearest labelled claims (the run's SQL kNN) and drift's status of each claim
    (:func:`checkworthy.method.drift.drift_status`)."""

    theta: np.ndarray
    neighbour_positions: np.ndarray
    status: np.ndarray

    def weights(self, n_labelled: int) -> np.ndarray:
        """L's weights for this batch (:func:`checkworthy.method.selective.neighbour_weights`): the
        neighbours of the claims drift does not hold back, the only ones the rule may decide."""
        return neighbour_weights(self.neighbour_positions[self.status == CALM], n_labelled)


def review_figure(spec: RunSpec, theta_l: np.ndarray, y_l: np.ndarray, batch: Batch,
                  threshold: float, threshold_from_labels: bool = False) -> dict[str, Any]:
    """The decide-or-review rule chosen on L (leave-one-out theta), certified on the labelled claims
    like the batch (:meth:`Batch.weights`), and the share of the batch it decides automatically
    (none that drift holds back), as the run records it (:attr:`RunRecord.review`);
    ``threshold_from_labels``: the threshold was derived from L
    (:attr:`~checkworthy.method.decision_cut.PriorDecision.from_labels`)."""
    m = spec.methods
    rule = replace(fit_review(theta_l, y_l, threshold, m.review_risk, m.max_risk, m.delta,
                              weights=batch.weights(len(y_l))), threshold_from_labels=threshold_from_labels)
    theta, status = batch.theta, batch.status
    share = float(np.mean(rule.review(theta, status) == 0)) if len(theta) else None
    return rule.as_dict() | {"automated_share": share}


@dataclass(frozen=True)
class Languages:
    """A batch's languages as drift reads them: each claim's (None where none is stored) and the
    languages of L's claims."""

    claims: list[str | None]
    labelled: frozenset[str]


def batch_languages(conn: Connection, label_set_id: int, claim_ids: list[int]) -> Languages:
    """The stored languages of ``claim_ids`` (in that order) and of the label set's claims."""
    got = claim_languages(conn, claim_ids)
    return Languages([got.get(int(i)) for i in claim_ids], frozenset(label_set_languages(conn, label_set_id)))


def drift_figure(loo_nearest: np.ndarray, nearest: np.ndarray, langs: Languages | None = None,
                 ) -> Drift:
    """The run's drift figure (:mod:`checkworthy.method.drift`, :attr:`RunRecord.drift`):
    its claims' nearest labelled distances against L's leave-one-out ones, and the languages of
    its claims that L has none of (``langs``; :func:`checkworthy.method.drift.with_languages`)."""
    figure = drift(loo_nearest, nearest)
    if langs is not None:
        figure = with_languages(figure, langs.claims, langs.labelled)
    return figure


def rule_and_drift(conn: Connection, f: FittedCalibration, theta: np.ndarray, nearest: np.ndarray,
                   neighbour_ids: np.ndarray, claim_ids: list[int]) -> RunRecord:
    """:func:`drift_figure` and :func:`review_figure` (the claims drift holds back to a person) for
    the paper's path (``f``: :func:`fit`'s, whose L lists come from the same SQL kNN), which builds
    no leave-one-out lists for its own figures: NN-PPI at the run's k on L; ``neighbour_ids``: the
    (n, k) nearest labelled ids of the claims ``claim_ids``."""
    spec, pool = f.spec, f.pool
    k = spec.methods.k
    nb = Neighbourhood.loo(pool.cal, min(k, pool.cal.max_k))
    langs = batch_languages(conn, spec.label_set_id, claim_ids)
    figure = drift_figure(pool.loo_nearest, nearest, langs)
    theta_l = CORRECTIONS[DEFAULT_CORRECTION](nb)
    batch = Batch(theta, pool.positions(np.asarray(neighbour_ids)[:, :k]),
                  drift_status(nearest, figure, langs.claims))
    review = review_figure(spec, theta_l, pool.cal.y, batch, spec.methods.threshold)
    return RunRecord(drift=figure, review=review)


# ------------------------------------------------------------------ interval and correction


SPLIT_METHODS = ("conformal-split", "mondrian-split")


def is_paper_default(spec: RunSpec) -> bool:
    """The paper's NN-PPI with its z interval: computed by the original code path, bit for bit."""
    m = spec.methods
    return m.interval_method == "z" and m.correction == DEFAULT_CORRECTION and m.prior == "labelled"


def neighbour_columns(k: int, interval_method: str, correction: str = "") -> int:
    """How many neighbours per claim a run fetches (:func:`labelled_pool` caps it at |L| - 1).

    Split conformal restricts each list to a random half of L and needs k of that half among
    the listed: ``max(8k, k + 40)`` columns make a shortfall vanishingly rare (the chance that
    fewer than k of n columns fall in the half is a binomial tail, < 1e-9 for these n). The
    ``auto`` correction drops a fold of L from each list (:func:`auto_columns`).
    """
    n = max(8 * k, k + 40) if interval_method in SPLIT_METHODS else k
    return max(n, auto_columns(k)) if correction == "auto" else n


@dataclass(frozen=True)
class LabelledPool:
    """The label set's claims that can be neighbours (scored, embedded), with their LOO lists."""

    claim_ids: np.ndarray
    cal: LabelledSet

    @property
    def loo_nearest(self) -> np.ndarray:
        """Each labelled claim's distance to its nearest other one (what drift compares a batch's
        nearest labelled distances with)."""
        if self.cal.dist is None:
            raise RuntimeError("the labelled pool has no neighbour distances")
        return self.cal.dist[:, 0]

    def positions(self, neighbour_ids: np.ndarray) -> np.ndarray:
        """Positions in the pool of neighbour claim ids (all are members: same SQL pool)."""
        pos = np.searchsorted(self.claim_ids, neighbour_ids)
        if pos.size and (pos.max() >= len(self.claim_ids) or (self.claim_ids[pos] != neighbour_ids).any()):
            raise RuntimeError("a neighbour is not in the labelled pool")
        return pos


def labelled_pool(
    conn: Connection, label_set_id: int, key: ScoreKey, n_cols: int, embed_model: str = EMBED_MODEL,
    knn: KnnPath = EXACT,
) -> LabelledPool:
    """L as a :class:`~checkworthy.method.corrections.LabelledSet`: labels, scores, leave-one-out lists.

    The lists come from the same SQL kNN as the targets' (:func:`leave_one_out_neighbours`: a
    claim never lists itself or another claim with its text), nearest first, ``n_cols`` long or, for a small
    L, as long as every claim can have (the smallest count of other-text claims, at least 1).
    """
    pool = load_pool(conn, label_set_id, key, embed_model)
    ids = pool.ids
    n_cols = max(1, min(n_cols, len(ids) - max_claims_per_text(conn, ids.tolist())))
    loo = leave_one_out_neighbours(conn, label_set_id, ids.tolist(), n_cols, key,
                           embed_model=embed_model, knn=knn)
    if not np.array_equal(loo.claim_ids, ids):
        raise RuntimeError("leave-one-out kNN did not return one list per labelled claim")
    pos = np.searchsorted(ids, loo.neighbour_ids)
    cal = LabelledSet(y=pool.labels, c=pool.scores, nbr=pos, dist=loo.distances)
    return LabelledPool(ids, cal)


def fit_run(spec: RunSpec, pool: LabelledPool, emb: np.ndarray | None = None, chosen: str | None = None,
            ) -> tuple[FittedCorrection, dict[str, Any]]:
    """The run's correction fitted on L alone (pure), and what to record about it.

    ``auto`` first chooses among its candidates by cross-validation on L, unless ``chosen`` names
    the choice already made (a served run's, recorded in its params); ``emb`` holds L's embeddings
    (the embedding head and ``auto`` need them).
    """
    m = spec.methods
    return fit_labelled(pool.cal, m.correction, m.k, m.threshold, emb, chosen)


def fit_labelled(cal: LabelledSet, correction: str, k: int, threshold: float, emb: np.ndarray | None = None,
                 chosen: str | None = None, seed: int = 0) -> tuple[FittedCorrection, dict[str, Any]]:
    """:func:`fit_run` on L's arrays alone (pure; the method comparisons fit through it too):
    ``correction`` at ``k`` with decisions at ``threshold``, ``auto`` choosing on L unless
    ``chosen``; ``emb``: L's embeddings; ``seed``: the folds of ``auto`` and of the head."""
    fitted: dict[str, Any] = {}
    if correction == "auto" and chosen is None:
        if emb is None:
            raise ValueError("the auto correction needs the claims' embeddings")
        chosen, figures = choose_correction(cal, emb, k, threshold, seed=seed)
        fitted["auto_choice"] = {"chosen": chosen, "cv_f1_positive": figures}
    name = chosen if correction == "auto" and chosen is not None else correction
    fc = correction_on(name, cal, k, threshold, emb, seed)
    return fc, fitted | fc.fitted


def apply_run(spec: RunSpec, pool: LabelledPool, fc: FittedCorrection, nq: Neighbours, c: np.ndarray,
              theta_in: np.ndarray, threshold: float) -> tuple[nnppi.NNPPIResult, Neighbours]:
    """A fitted correction and the run's interval on targets (pure): ``nq`` their neighbour lists
    (as long as L's, nearest first), ``c`` their model scores, ``theta_in`` the scores the
    correction corrects (:meth:`FittedCorrection.scores`); decisions at ``threshold`` on theta."""
    k = fc.choice.k
    nb = Neighbourhood(c=theta_in, nbr=pool.positions(nq.neighbour_ids), cal=fc.cal, dist=nq.distances, k=k)
    theta = fc.choice.theta(nb)
    m = spec.methods
    lo, hi = INTERVAL_METHODS[m.interval_method](nb, m.alpha, correction=fc.choice.theta)
    res = nnppi.NNPPIResult.decided(c, theta, np.asarray(lo, dtype=float), np.asarray(hi, dtype=float),
                                    nnppi.knn_mean(nb.y_nbr()), m.threshold,
                                    nnppi.decide(theta, threshold))
    used = Neighbours(claim_ids=nq.claim_ids, neighbour_ids=nq.neighbour_ids[:, :k],
                      distances=nq.distances[:, :k], labels=nq.labels[:, :k], scores=nq.scores[:, :k])
    return res, used


def compute_methods(
    f: FittedCalibration, nq: Neighbours, c: np.ndarray, emb: np.ndarray | None = None,
    langs: Languages | None = None,
) -> tuple[nnppi.NNPPIResult, Neighbours, RunRecord]:
    """A fitted correction and any interval on a batch (pure); the neighbours used, and what to
    record: what was fitted, the batch's share and prior, the rule and the drift figure.

    ``nq`` holds the targets' neighbour lists (as long as L's, nearest first), ``c`` their
    scores, ``emb`` their embeddings only for a predictor reading them, ``langs`` the targets' and
    L's languages (none: drift reads no language). A predictor run
    (:data:`PREDICTOR_RUNS`) first replaces the scores; the correction was fitted on L only
    (:func:`fit`); the interval is centred on it (:func:`apply_run`). KNN and the
    raw-score baseline use the same neighbours as the correction and the model's own score.
    The batch's drift figure comes first: when it alerts, the claims it holds back go to a person
    and the batch's share of check-worthy claims is not estimated (nor decided for).
    """
    spec, pool, fc = f.spec, f.pool, f.correction
    if fc is None:
        raise ValueError("the paper's path fits no correction")
    figure = drift_figure(pool.loo_nearest, nq.distances[:, 0], langs)
    theta_in = fc.scores(c, emb)
    cal = fc.cal
    # the batch's share of label 1, from the predictor's decisions on L (out of fold) and on U
    m = spec.methods
    prevalence = share_positive(cal.y, nnppi.decide(cal.c, m.threshold), nnppi.decide(theta_in, m.threshold),
                                m.alpha)
    if unlike_labelled(figure):
        prevalence = under_drift(prevalence)
    k = fc.choice.k
    theta_l = fc.choice.theta(Neighbourhood.loo(cal, k))
    threshold, prior = decide_prior(m.prior, prevalence, theta_l, cal.y, fc.choice.threshold)
    res, used = apply_run(spec, pool, fc, nq, c, theta_in, threshold)
    batch = Batch(res.theta, pool.positions(nq.neighbour_ids[:, :k]),
                  drift_status(nq.distances[:, 0], figure, None if langs is None else langs.claims))
    review = review_figure(spec, theta_l, cal.y, batch, threshold,
                           threshold_from_labels=prior is not None and prior.from_labels)
    return res, used, RunRecord.from_json(f.fitted) | RunRecord(
        drift=figure, review=review, prevalence=prevalence.as_dict(), prior=prior,
        extra={"k_used": k, "neighbour_columns": int(nq.neighbour_ids.shape[1])})


# ------------------------------------------------------------------ the service


@dataclass(frozen=True)
class FittedCalibration:
    """A calibration fitted on L alone: L's leave-one-out lists (as long as the interval and the
    correction need) and the fitted correction with what to record about it; ``correction`` is
    None on the paper's path (:func:`is_paper_default`), which fits nothing."""

    spec: RunSpec
    pool: LabelledPool
    correction: FittedCorrection | None = None
    fitted: dict[str, Any] = field(default_factory=dict)

    @property
    def n_columns(self) -> int:
        """How many neighbours each claim of a batch is given: the run's k on the paper's path,
        else as many as L's lists hold."""
        return self.spec.methods.k if self.correction is None else self.pool.cal.max_k

    def needs_embeddings(self) -> bool:
        """Whether the fitted correction reads the batch's embeddings (a predictor that does)."""
        fc = self.correction
        return fc is not None and fc.predictor is not None and fc.predictor.uses_embeddings


def fit(conn: Connection, spec: RunSpec, chosen: str | None = None) -> FittedCalibration:
    """Fit ``spec``'s calibration on its label set: L's leave-one-out lists and, off the paper's
    path, its correction (``auto`` chooses among its candidates on L unless ``chosen`` names the
    choice already made, a served run's); ValueError when L is too small for k."""
    m = spec.methods
    if is_paper_default(spec):
        return FittedCalibration(spec, labelled_pool(conn, spec.label_set_id, spec.key, m.k, m.embed_model,
                                                     m.knn_path))
    pool = labelled_pool(conn, spec.label_set_id, spec.key,
                         neighbour_columns(m.k, m.interval_method, m.correction), m.embed_model, m.knn_path)
    if pool.cal.max_k < m.k:
        raise ValueError(f"label set {spec.label_set_id} has fewer than k={m.k} scored, embedded "
                         "claims besides each one")
    name = (chosen or "auto") if m.correction == "auto" else m.correction
    emb = (claim_embeddings(conn, pool.claim_ids.tolist(), m.embed_model)
           if name == "auto" or uses_head(name) else None)
    fc, fitted = fit_run(spec, pool, emb, chosen)
    return FittedCalibration(spec, pool, fc, fitted)


def batch_neighbours(conn: Connection, f: FittedCalibration, claim_ids: list[int]) -> Neighbours:
    """The SQL kNN of a batch's claims (sorted ids with a usable score) among L, as many columns as
    the fitted calibration reads; ValueError when a claim has no embedding."""
    m = f.spec.methods
    nb = nearest_labelled(conn, f.spec.label_set_id, claim_ids, f.n_columns, f.spec.key,
                          embed_model=m.embed_model, knn=m.knn_path)
    if len(nb.claim_ids) != len(claim_ids):
        raise ValueError(f"{len(claim_ids) - len(nb.claim_ids)} claims of {f.spec.target} have no embedding")
    return nb


def calibrate(f: FittedCalibration, nb: Neighbours, c: np.ndarray, emb: np.ndarray | None = None,
              threshold: float | None = None) -> tuple[nnppi.NNPPIResult, Neighbours]:
    """The batch's results (pure) under a fitted calibration: ``nb`` its neighbour lists, ``c``
    its scores, ``emb`` its embeddings where :meth:`FittedCalibration.needs_embeddings`;
    decisions at ``threshold`` on theta (default: the correction's own). Returns the results and
    the neighbours they used."""
    m, fc = f.spec.methods, f.correction
    if fc is None:
        return nnppi.nnppi(c, nb.labels, nb.scores, m.alpha, m.threshold), nb
    return apply_run(f.spec, f.pool, fc, nb, c, fc.scores(c, emb),
                     fc.choice.threshold if threshold is None else threshold)


@dataclass(frozen=True)
class CalibrationOutcome:
    """What a run stores: its claims' results (``result`` in ``claim_ids`` order), each claim's
    distance to its nearest labelled claim, the neighbours of each (None when the rows are stored
    already, an incremental run's) and the run's record (counts, kNN path, review rule, drift,
    the batch's share and prior, what was fitted)."""

    claim_ids: NDArray[np.int64]
    result: nnppi.NNPPIResult
    nearest: NDArray[np.float64]
    record: RunRecord
    neighbours: Neighbours | None = None


def outcome(conn: Connection, f: FittedCalibration, nb: Neighbours, c: np.ndarray,
            counts: RunRecord) -> CalibrationOutcome:
    """A full run's outcome on its batch (``nb``: :func:`batch_neighbours`, ``c``: their scores):
    the results, the drift figure and decide-or-review rule, the batch's share (and for the
    batch's prior its threshold) and what was fitted, with ``counts`` added to the record."""
    spec, ids = f.spec, nb.claim_ids.tolist()
    if f.correction is None:
        res, used = calibrate(f, nb, c)
        figures = rule_and_drift(conn, f, res.theta, nb.distances[:, 0], nb.neighbour_ids, ids)
        figures = replace(figures, prevalence=raw_score_prevalence(conn, spec, c, figures.drift))
    else:
        emb = claim_embeddings(conn, ids, spec.methods.embed_model) if f.needs_embeddings() else None
        res, used, figures = compute_methods(f, nb, c, emb, batch_languages(conn, spec.label_set_id, ids))
    return CalibrationOutcome(used.claim_ids, res, used.distances[:, 0], counts | figures, used)


def store_rows(conn: Connection, run_id: int, out: CalibrationOutcome) -> None:
    """Store an outcome's result rows (unless stored already) and queue for a person the claims its
    rule sends there or drift holds back."""
    ids = [int(i) for i in out.claim_ids]
    if out.neighbours is not None:
        insert_results(conn, run_id, ids, out.result, out.neighbours.neighbour_ids, out.neighbours.distances)
    if out.record.review:
        queue_run(conn, run_id, out.record.review, ids, out.result.theta,
                  outcome_drift_status(out, claim_languages(conn, ids)))


def outcome_drift_status(out: CalibrationOutcome, langs: Mapping[int, str]) -> NDArray[np.int8]:
    """Each of the outcome's claims' drift status (:func:`drift_status`) under its run's figure,
    ``langs`` holding each claim's stored language (a claim without one: unknown)."""
    return drift_status(out.nearest, out.record.drift, [langs.get(int(i)) for i in out.claim_ids])


def queued_claims(out: CalibrationOutcome, langs: Mapping[int, str]) -> dict[int, str]:
    """The claims the run queues for a person (:func:`store_rows`), each with its cause
    (``drift`` or ``rule``); none when the run has no rule. ``langs``: as for
    :func:`outcome_drift_status`."""
    if not out.record.review:
        return {}
    status = outcome_drift_status(out, langs)
    flagged = review_flags(out.record.review, out.result.theta, status)
    return {int(c): "drift" if s != CALM else "rule"
            for c, f, s in zip(out.claim_ids, flagged, status) if f}


def finish_run(conn: Connection, run_id: int, out: CalibrationOutcome) -> None:
    """Finish a running run with its outcome: its rows and queue entries (:func:`store_rows`),
    its metrics when every claim has a label, and its record; then it is complete."""
    store_rows(conn, run_id, out)
    ids = [int(i) for i in out.claim_ids]
    gold = current_labels(conn, ids)
    if len(gold) == len(ids) and len(ids):
        store_metrics(conn, run_id, metric_rows(np.array([gold[i] for i in ids]), out.result))
    complete_run(conn, run_id, out.record.to_json())
