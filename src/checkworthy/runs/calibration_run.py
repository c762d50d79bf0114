"""One calibration run: kNN in SQL, NN-PPI (or another interval and correction) on the arrays,
results, metrics and the 'complete' status stored in one transaction.

A run is identified by a key over all its inputs: a complete run with the same key is reused,
never recomputed, and two processes starting the same run serialise on the key's lock. A failure
marks the run 'failed'; the next attempt starts a new one. Besides the paper's NN-PPI (``z`` +
``paper``, the default), a run may use any interval of :mod:`checkworthy.method.intervals`, any
correction of :mod:`checkworthy.method.corrections`, the ``cv`` choice, a predictor fitted on the
label set, or the ``auto`` choice among them (:mod:`checkworthy.method.predictor_choice`); what was
fitted or chosen on L is added to the run's ``params``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, Engine

from checkworthy.config import EMBED_MODEL
from checkworthy.method import nnppi
from checkworthy.method.corrections import CORRECTIONS, LabelledSet, Neighbourhood
from checkworthy.method.drift import CALM, drift, drift_status, unlike_labelled, with_languages
from checkworthy.method.intervals import INTERVAL_METHODS
from checkworthy.method.metrics import metric_rows
from checkworthy.method.predictor_choice import (
    FittedCorrection,
    auto_columns,
    choose_correction,
    correction_on,
    uses_head,
)
from checkworthy.method.prevalence import prior_threshold, share_positive, under_drift
from checkworthy.method.selective import fit_review, neighbour_weights
from checkworthy.runs.review_queue import queue_run
from checkworthy.store.calibration_runs import (
    close_abandoned_runs,
    complete_run,
    fail_run,
    find_complete_run,
    insert_results,
    insert_run,
    lock_run_key,
    unlock_run_key,
)
from checkworthy.store.embeddings import claim_embeddings
from checkworthy.store.knn import (
    EXACT,
    KnnPath,
    Neighbours,
    leave_one_out_neighbours,
    load_pool,
    nearest_labelled,
)
from checkworthy.store.languages import claim_languages, ensure_languages, label_set_languages
from checkworthy.store.metrics import store_metrics
from checkworthy.store.rows import (
    ScoreKey,
    claim_scores,
    claim_text_hashes,
    current_labels,
    label_set_claims,
    label_set_fingerprint,
    max_claims_per_text,
)
from checkworthy.store.run_spec import DEFAULT_CORRECTION, RunContext, RunSpec, run_key


def compute(conn: Connection, spec: RunSpec) -> tuple[np.ndarray, nnppi.NNPPIResult, Any, dict]:
    """kNN + NN-PPI for the claims of ``spec`` that have a valid score; no writes.

    Returns (claim ids, results, the neighbours stored with each claim, params to add to the
    run when it completes: counts and, for methods other than the paper's, what was fitted).
    """
    scores = claim_scores(
        conn, spec.claim_ids, spec.key.model_id, spec.key.prompt_version, spec.key.params_hash,
        spec.key.score_kind,
    )
    usable = sorted(i for i in spec.claim_ids if scores.get(i) is not None)
    pool = None
    if not is_paper_default(spec):  # L's leave-one-out lists, as long as the interval needs
        pool = labelled_pool(conn, spec.label_set_id, spec.key,
                             neighbour_columns(spec.k, spec.interval_method, spec.correction),
                             spec.embed_model, spec.knn_path)
        if pool.cal.max_k < spec.k:
            raise ValueError(f"label set {spec.label_set_id} has fewer than k={spec.k} scored, embedded "
                             "claims besides each one")
    nb = nearest_labelled(conn, spec.label_set_id, usable, spec.k if pool is None else pool.cal.max_k,
                          spec.key, embed_model=spec.embed_model, knn=spec.knn_path)
    if len(nb.claim_ids) != len(usable):
        raise ValueError(f"{len(usable) - len(nb.claim_ids)} claims of {spec.target} have no embedding")
    c = np.array([scores[i] for i in nb.claim_ids], dtype=float)
    counts: dict[str, Any] = {
        "n_claims": len(spec.claim_ids),
        "n_calibrated": len(usable),
        "n_without_score": len(spec.claim_ids) - len(usable),
        "knn": knn_record(conn, spec, nb.claim_ids, nb.neighbour_ids),
    }
    if pool is None:
        res = nnppi.nnppi(c, nb.labels, nb.scores, spec.alpha, spec.threshold)
        figures = rule_and_drift(conn, spec, res.theta, nb.distances[:, 0], nb.neighbour_ids,
                                 nb.claim_ids.tolist())
        return nb.claim_ids, res, nb, counts | raw_score_prevalence(conn, spec, c, figures["drift"]) | figures
    emb = None
    if spec.correction == "auto" or uses_head(spec.correction):
        emb = (claim_embeddings(conn, pool.claim_ids.tolist(), spec.embed_model),
               claim_embeddings(conn, nb.claim_ids.tolist(), spec.embed_model))
    langs = batch_languages(conn, spec.label_set_id, nb.claim_ids.tolist())
    res, used, fitted = compute_methods(spec, pool, nb, c, emb, langs)
    return used.claim_ids, res, used, counts | fitted


#: how many of a run's claims its HNSW recall is measured on (exact kNN for them)
RECALL_SAMPLE = 200


def knn_record(conn: Connection, spec: RunSpec, claim_ids: NDArray[np.int64],
               neighbour_ids: NDArray[np.int64]) -> dict[str, Any]:
    """What the run records about its kNN path; for HNSW, recall@k against the exact path on an
    evenly spaced sample of its claims (``claim_ids`` with their (n, k) ``neighbour_ids``, every
    claim up to :data:`RECALL_SAMPLE`): the share of each sampled claim's exact k nearest that the
    run's lists hold, averaged."""
    out = spec.knn_path.as_dict()
    if spec.knn == "exact" or not len(claim_ids):
        return out
    k = neighbour_ids.shape[1]
    rows = recall_sample(len(claim_ids))
    exact = nearest_labelled(conn, spec.label_set_id, claim_ids[rows].tolist(), k, spec.key,
                             embed_model=spec.embed_model)
    found = [len(set(a) & set(e)) / k for a, e in zip(neighbour_ids[rows], exact.neighbour_ids)]
    return out | {"recall_at_k": float(np.mean(found)), "k": int(k), "recall_sample": len(rows)}


def recall_sample(n: int) -> NDArray[np.int64]:
    """Positions of the claims an HNSW run's recall is measured on: evenly spaced, at most
    :data:`RECALL_SAMPLE`."""
    return np.unique(np.linspace(0, n - 1, min(RECALL_SAMPLE, n)).astype(np.int64))


def raw_score_prevalence(conn: Connection, spec: RunSpec, c: np.ndarray, figure: dict[str, Any]
                         ) -> dict[str, Any]:
    """The batch's share of label 1 for a run that builds no leave-one-out lists (the paper's
    path): from the raw score's decisions, a predictor fitted on nothing, so its decisions on L are
    as fair as on the batch (:func:`checkworthy.method.prevalence.share_positive`); none when the
    run's drift ``figure`` alerts (:func:`checkworthy.method.prevalence.under_drift`)."""
    pool = load_pool(conn, spec.label_set_id, spec.key, spec.embed_model)
    t = spec.threshold
    p = share_positive(pool.labels, nnppi.decide(pool.scores, t), nnppi.decide(c, t), spec.alpha)
    p = under_drift(p) if unlike_labelled(figure) else p
    return {"prevalence": p.as_dict() | {"from": "raw score"}}


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


def review_params(spec: RunSpec, theta_l: np.ndarray, y_l: np.ndarray, batch: Batch,
                  threshold: float) -> dict[str, Any]:
    """The decide-or-review rule chosen on L (leave-one-out theta), certified on the labelled claims
    like the batch (:meth:`Batch.weights`), and the share of the batch it decides automatically
    (none that drift holds back), as stored in the run's ``params->'review'``."""
    rule = fit_review(theta_l, y_l, threshold, spec.review_risk, spec.max_risk, spec.delta,
                      weights=batch.weights(len(y_l)))
    theta, status = batch.theta, batch.status
    share = float(np.mean(rule.review(theta, status) == 0)) if len(theta) else None
    return {"review": rule.as_dict() | {"automated_share": share}}


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


def drift_params(loo_nearest: np.ndarray, nearest: np.ndarray, langs: Languages | None = None,
                 ) -> dict[str, Any]:
    """The run's drift figure (:mod:`checkworthy.method.drift`) as stored in ``params->'drift'``:
    its claims' nearest labelled distances against L's leave-one-out ones, and the languages of
    its claims that L has none of (``langs``; :func:`checkworthy.method.drift.with_languages`)."""
    figure = drift(loo_nearest, nearest).as_dict()
    if langs is not None:
        figure = with_languages(figure, langs.claims, langs.labelled)
    return {"drift": figure}


def rule_and_drift(conn: Connection, spec: RunSpec, theta: np.ndarray, nearest: np.ndarray,
                   neighbour_ids: np.ndarray, claim_ids: list[int]) -> dict[str, Any]:
    """:func:`drift_params` and :func:`review_params` (the claims drift holds back to a person) for
    the paper's path, which builds no leave-one-out lists for its own figures: L's from the same
    SQL kNN, NN-PPI at the run's k; ``neighbour_ids``: the (n, k) nearest labelled ids of the
    claims ``claim_ids``."""
    pool = labelled_pool(conn, spec.label_set_id, spec.key, spec.k, spec.embed_model, spec.knn_path)
    nb = Neighbourhood.loo(pool.cal, min(spec.k, pool.cal.max_k))
    langs = batch_languages(conn, spec.label_set_id, claim_ids)
    figure = drift_params(pool.cal.dist[:, 0], nearest, langs)
    theta_l = CORRECTIONS[DEFAULT_CORRECTION](nb)
    batch = Batch(theta, pool.positions(np.asarray(neighbour_ids)[:, :spec.k]),
                  drift_status(nearest, figure["drift"], langs.claims))
    return figure | review_params(spec, theta_l, pool.cal.y, batch, spec.threshold)


# ------------------------------------------------------------------ interval and correction


SPLIT_METHODS = ("conformal-split", "mondrian-split")


def is_paper_default(spec: RunSpec) -> bool:
    """The paper's NN-PPI with its z interval: computed by the original code path, bit for bit."""
    return spec.interval_method == "z" and spec.correction == DEFAULT_CORRECTION and spec.prior == "labelled"


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
    correction, fitted = spec.correction, {}
    if correction == "auto" and chosen is None:
        if emb is None:
            raise ValueError("the auto correction needs the claims' embeddings")
        chosen, figures = choose_correction(pool.cal, emb, spec.k, spec.threshold)
        fitted["auto_choice"] = {"chosen": chosen, "cv_f1_positive": figures}
    fc = correction_on(chosen if correction == "auto" else correction, pool.cal, spec.k, spec.threshold, emb)
    return fc, fitted | fc.fitted


def apply_run(spec: RunSpec, pool: LabelledPool, fc: FittedCorrection, nq: Neighbours, c: np.ndarray,
              theta_in: np.ndarray, threshold: float) -> tuple[nnppi.NNPPIResult, Neighbours]:
    """A fitted correction and the run's interval on targets (pure): ``nq`` their neighbour lists
    (as long as L's, nearest first), ``c`` their model scores, ``theta_in`` the scores the
    correction corrects (:meth:`FittedCorrection.scores`); decisions at ``threshold`` on theta."""
    k = fc.choice.k
    nb = Neighbourhood(c=theta_in, nbr=pool.positions(nq.neighbour_ids), cal=fc.cal, dist=nq.distances, k=k)
    theta = fc.choice.theta(nb)
    lo, hi = INTERVAL_METHODS[spec.interval_method](nb, spec.alpha, correction=fc.choice.theta)
    km = nnppi.knn_mean(nb.y_nbr())
    res = nnppi.NNPPIResult(
        score=c, theta=theta, ci_low=np.asarray(lo, dtype=float), ci_high=np.asarray(hi, dtype=float),
        knn_mean=km, decision=nnppi.decide(theta, threshold),
        knn_decision=nnppi.decide(km, spec.threshold),
        baseline_decision=nnppi.decide(c, spec.threshold))
    used = Neighbours(claim_ids=nq.claim_ids, neighbour_ids=nq.neighbour_ids[:, :k],
                      distances=nq.distances[:, :k], labels=nq.labels[:, :k], scores=nq.scores[:, :k])
    return res, used


def compute_methods(
    spec: RunSpec, pool: LabelledPool, nq: Neighbours, c: np.ndarray,
    emb: tuple[np.ndarray, np.ndarray] | None = None, langs: Languages | None = None,
) -> tuple[nnppi.NNPPIResult, Neighbours, dict[str, Any]]:
    """Any interval x correction on the arrays (pure); the neighbours used, and what was fitted.

    ``nq`` holds the targets' neighbour lists (as long as L's, nearest first), ``c`` their
    scores, ``emb`` (L's, the targets' embeddings) only for the head, ``langs`` the targets' and
    L's languages (none: drift reads no language). A predictor run
    (:data:`PREDICTOR_RUNS`) first replaces the scores; the correction is fitted on L only
    (:func:`fit_run`); the interval is centred on it (:func:`apply_run`). KNN and the
    raw-score baseline use the same neighbours as the correction and the model's own score.
    The batch's drift figure comes first: when it alerts, the claims it holds back go to a person
    and the batch's share of check-worthy claims is not estimated (nor decided for).
    """
    fc, fitted = fit_run(spec, pool, None if emb is None else emb[0])
    figure = drift_params(pool.cal.dist[:, 0], nq.distances[:, 0], langs)
    theta_in = fc.scores(c, None if emb is None else emb[1])
    cal = fc.cal
    # the batch's share of label 1, from the predictor's decisions on L (out of fold) and on U
    prevalence = share_positive(cal.y, nnppi.decide(cal.c, spec.threshold),
                                nnppi.decide(theta_in, spec.threshold), spec.alpha)
    if unlike_labelled(figure["drift"]):
        prevalence = under_drift(prevalence)
    fitted["prevalence"] = prevalence.as_dict()
    threshold = fc.choice.threshold
    if spec.prior == "batch" and prevalence.estimate is not None:
        threshold = prior_threshold(prevalence.labelled, prevalence.estimate, fc.choice.threshold)
        fitted["prior"] = {"mode": "batch", "labelled": prevalence.labelled, "batch": prevalence.estimate,
                           "threshold_on_theta": threshold}
    elif spec.prior == "batch":
        fitted["prior"] = {"mode": "batch", "threshold_on_theta": threshold,
                           "note": f"no batch estimate ({prevalence.not_estimable}): L's prior"}
    res, used = apply_run(spec, pool, fc, nq, c, theta_in, threshold)
    k = fc.choice.k
    batch = Batch(res.theta, pool.positions(nq.neighbour_ids[:, :k]),
                  drift_status(nq.distances[:, 0], figure["drift"], None if langs is None else langs.claims))
    fitted |= review_params(spec, fc.choice.theta(Neighbourhood.loo(cal, k)), cal.y, batch, threshold)
    return res, used, fitted | figure | {"k_used": k, "neighbour_columns": int(nq.neighbour_ids.shape[1])}


#: who closes the runs a dead process left running, when a calibration starts
STARTING = "the start of another calibration"


def run_calibration(engine: Engine, spec: RunSpec, ctx: RunContext | None = None) -> int:
    """Run (or reuse) the calibration described by ``spec``; return the run id. Holding the key's
    lock, it first closes the runs a dead process left running (:func:`close_abandoned_runs`)."""
    ctx = ctx or RunContext()
    with engine.connect() as lock:
        fingerprint = label_set_fingerprint(lock, spec.label_set_id)
        key = run_key(spec, fingerprint)
        lock_run_key(lock, key)
        try:
            close_abandoned_runs(lock, STARTING)
            existing = find_complete_run(lock, key)
            lock.commit()
            if existing is not None:
                return existing
            params = ctx.extra | {"n_claims": len(spec.claim_ids)}
            with engine.begin() as conn:
                ensure_run_languages(conn, spec)
                run_id = insert_run(conn, spec, key, fingerprint, params, ctx)
            try:
                with engine.begin() as conn:
                    _compute_and_store(conn, spec, run_id)
            except BaseException:
                with engine.begin() as conn:
                    fail_run(conn, run_id)
                raise
            return run_id
        finally:
            unlock_run_key(lock, key)


def ensure_run_languages(conn: Connection, spec: RunSpec) -> int:
    """Store the language of every text of the run's claims and of its label set that has none
    yet (texts stored before languages were, or by a path that stores none): drift reads them."""
    claims = list(spec.claim_ids) + label_set_claims(conn, spec.label_set_id)
    return ensure_languages(conn, claim_text_hashes(conn, claims))


def _compute_and_store(conn: Connection, spec: RunSpec, run_id: int) -> None:
    ids, res, nb, counts = compute(conn, spec)
    insert_results(conn, run_id, ids, res, nb.neighbour_ids, nb.distances)
    gold = current_labels(conn, [int(i) for i in ids])
    if len(gold) == len(ids) and len(ids):
        y = np.array([gold[int(i)] for i in ids])
        store_metrics(conn, run_id, metric_rows(y, res))
    if "review" in counts:
        langs = claim_languages(conn, [int(i) for i in ids])
        status = drift_status(nb.distances[:, 0], counts["drift"], [langs.get(int(i)) for i in ids])
        queue_run(conn, run_id, counts["review"], ids, res.theta, status)
    complete_run(conn, run_id, counts)
