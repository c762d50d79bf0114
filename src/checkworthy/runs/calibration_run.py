"""One calibration run: kNN in SQL, NN-PPI on the arrays, results stored atomically.

A run is identified by a key over all its inputs (claims, label set fingerprint, score key,
k, alpha, threshold, interval method): a complete run with the same key is reused, never
recomputed. Two processes starting the same run serialise on an advisory lock; the second
finds the first's complete run. Results, metrics and the 'complete' status are written in
one transaction, so a run is never marked complete with partial results; a failure marks
the run 'failed' and the next attempt starts a new run.

Methods: ``RunSpec.interval_method`` names an interval of :data:`checkworthy.method.intervals.INTERVAL_METHODS`
and ``RunSpec.correction`` a point correction of :data:`checkworthy.method.corrections.CORRECTIONS`, or
``"cv"`` (method, k and parameters chosen by leave-one-out weighted F1 on the label set alone,
:func:`checkworthy.method.corrections.select_by_cv`), or a predictor fitted on the label set that
replaces the model score first (:data:`PREDICTOR_RUNS`: the standard score calibrators of
:mod:`checkworthy.method.calibrators`, and the embedding head of :mod:`checkworthy.method.embedding_head`
alone, under NN-PPI or under the CV choice). The default, ``z`` + ``paper``, is the paper's
NN-PPI computed exactly as before (:func:`checkworthy.method.nnppi.nnppi`, no extra query). Any
other pair also fetches the label set's leave-one-out neighbour lists from SQL (conformal
intervals, fitted lambdas and the CV need them). Both names are stored in the run (column
``interval_method``, ``params->>'correction'``); what was fitted or chosen on L (lambda, kappa,
the CV choice) is added to ``params`` when the run completes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import Connection, Engine, text

from checkworthy.config import EMBED_MODEL
from checkworthy.method import nnppi
from checkworthy.method.calibrators import CALIBRATORS, fitted_params
from checkworthy.method.corrections import (
    CORRECTIONS,
    Choice,
    LabelledSet,
    Neighbourhood,
    estimate_lambda,
    select_by_cv,
)
from checkworthy.method.embedding_head import fit_head
from checkworthy.method.intervals import INTERVAL_METHODS
from checkworthy.runs.evaluation import metric_rows, store_metrics
from checkworthy.store.embeddings import claim_embeddings
from checkworthy.store.knn import Neighbours, nearest_labelled
from checkworthy.store.rows import ScoreKey, claim_scores, current_labels, sha256_text


@dataclass(frozen=True)
class RunSpec:
    """Everything that determines a calibration's result."""

    target: str
    claim_ids: tuple[int, ...]
    label_set_id: int
    key: ScoreKey
    k: int
    alpha: float = 0.05
    threshold: float = nnppi.THRESHOLD
    interval_method: str = "z"
    embed_model: str = EMBED_MODEL
    #: point correction (a CORRECTIONS name or "cv"). Part of the run key like every field, so
    #: runs stored before this field existed have keys without it: they are recomputed (with
    #: identical results) rather than reused. Kept that way because ``recalibrate.fast_run_key``
    #: hashes every field too and the two keys must agree.
    correction: str = "paper"


@dataclass
class RunContext:
    """Provenance attached to a run (not part of its identity)."""

    flow_run_id: str | None = None
    code_rev: str = ""
    data_version_id: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _fingerprint(conn: Connection, label_set_id: int) -> str:
    return conn.execute(
        text("SELECT fingerprint FROM label_sets WHERE id = :i"), {"i": label_set_id}
    ).scalar_one()


def run_key(spec: RunSpec, fingerprint: str) -> str:
    """sha256 over every input of the run."""
    body = asdict(spec) | {"claim_ids": sorted(spec.claim_ids), "fingerprint": fingerprint}
    body["label_set_id"] = None  # the fingerprint, not the row id, identifies the labels
    return sha256_text(json.dumps(body, sort_keys=True, default=str))


def find_complete_run(conn: Connection, key: str) -> int | None:
    """The id of the complete run with this key, if any."""
    return conn.execute(
        text("SELECT id FROM calibration_runs WHERE run_key = :k AND status = 'complete'"),
        {"k": key},
    ).scalar()


def compute(conn: Connection, spec: RunSpec) -> tuple[np.ndarray, nnppi.NNPPIResult, Any, dict]:
    """kNN + NN-PPI for the claims of ``spec`` that have a valid score; no writes.

    Returns (claim ids, results, the neighbours stored with each claim, params to add to the
    run when it completes: counts and, for methods other than the paper's, what was fitted).
    """
    check_methods(spec.interval_method, spec.correction)
    scores = claim_scores(
        conn, spec.claim_ids, spec.key.model_id, spec.key.prompt_version, spec.key.params_hash,
        spec.key.score_kind,
    )
    usable = sorted(i for i in spec.claim_ids if scores.get(i) is not None)
    pool = None
    if not is_paper_default(spec):  # L's leave-one-out lists, as long as the interval needs
        pool = labelled_pool(conn, spec.label_set_id, spec.key,
                             neighbour_columns(spec.k, spec.interval_method), spec.embed_model)
        if pool.cal.max_k < spec.k:
            raise ValueError(f"label set {spec.label_set_id} has fewer than k={spec.k} scored, embedded "
                             "claims besides each one")
    nb = nearest_labelled(conn, spec.label_set_id, usable, spec.k if pool is None else pool.cal.max_k,
                          spec.key, embed_model=spec.embed_model)
    if len(nb.claim_ids) != len(usable):
        raise ValueError(f"{len(usable) - len(nb.claim_ids)} claims of {spec.target} have no embedding")
    c = np.array([scores[i] for i in nb.claim_ids], dtype=float)
    counts: dict[str, Any] = {
        "n_claims": len(spec.claim_ids),
        "n_calibrated": len(usable),
        "n_without_score": len(spec.claim_ids) - len(usable),
    }
    if pool is None:
        res = nnppi.nnppi(c, nb.labels, nb.scores, spec.alpha, spec.threshold)
        return nb.claim_ids, res, nb, counts
    emb = None
    if PREDICTOR_RUNS.get(spec.correction, ("",))[0] == "head":
        emb = (claim_embeddings(conn, pool.claim_ids.tolist(), spec.embed_model),
               claim_embeddings(conn, nb.claim_ids.tolist(), spec.embed_model))
    res, used, fitted = compute_methods(spec, pool, nb, c, emb)
    return used.claim_ids, res, used, counts | fitted


# ------------------------------------------------------------------ interval and correction


#: neighbour counts the ``cv`` correction chooses from (those up to the run's k, and k itself)
CV_KS = (3, 5, 10)
#: predictors fitted on L that replace the model score before a correction:
#: run correction name -> (predictor, correction applied to the predictor's probability)
PREDICTOR_RUNS: dict[str, tuple[str, str]] = {
    **{name: (name, "raw") for name in ("platt", "platt-score", "isotonic", "temperature")},
    "head": ("head", "raw"),
    "head+nnppi": ("head", "paper"),
    "head-cv": ("head", "cv"),
}
#: correction names a run accepts: the registry's, ``cv`` and the predictors
RUN_CORRECTIONS = (*CORRECTIONS, "cv", *PREDICTOR_RUNS)
SPLIT_METHODS = ("conformal-split", "mondrian-split")


def check_methods(interval_method: str, correction: str) -> None:
    """Refuse unknown method names before anything is computed or stored."""
    if interval_method not in INTERVAL_METHODS:
        raise ValueError(f"unknown interval {interval_method!r}; choose from {sorted(INTERVAL_METHODS)}")
    if correction not in RUN_CORRECTIONS:
        raise ValueError(f"unknown correction {correction!r}; choose from {sorted(RUN_CORRECTIONS)}")


def is_paper_default(spec: RunSpec) -> bool:
    """The paper's NN-PPI with its z interval: computed by the original code path, bit for bit."""
    return spec.interval_method == "z" and spec.correction == "paper"


def cv_ks(k: int) -> tuple[int, ...]:
    """The k a ``cv`` run may choose: :data:`CV_KS` up to the run's k, plus k (k is the budget)."""
    return tuple(sorted({x for x in CV_KS if x <= k} | {k}))


def neighbour_columns(k: int, interval_method: str) -> int:
    """How many neighbours per claim a run fetches (:func:`labelled_pool` caps it at |L| - 1).

    Split conformal restricts each list to a random half of L and needs k of that half among
    the listed: ``max(8k, k + 40)`` columns make a shortfall vanishingly rare (the chance that
    fewer than k of n columns fall in the half is a binomial tail, < 1e-9 for these n).
    """
    return max(8 * k, k + 40) if interval_method in SPLIT_METHODS else k


POOL_SQL = text(
    """SELECT i.claim_id, i.label, p.score
       FROM label_set_items i
       JOIN claims c ON c.id = i.claim_id
       JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :embed_model
       JOIN predictions p ON p.text_hash = c.text_hash AND p.model_id = :model_id
            AND p.prompt_version = :prompt_version AND p.params_hash = :params_hash
            AND p.score_kind = :score_kind AND p.score IS NOT NULL
       WHERE i.label_set_id = :label_set_id ORDER BY i.claim_id"""
)


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
) -> LabelledPool:
    """L as a :class:`~checkworthy.method.corrections.LabelledSet`: labels, scores, leave-one-out lists.

    The lists come from the same SQL kNN as the targets' (``leave_one_out=True``: a claim never
    lists itself or another claim with its text), nearest first, ``n_cols`` long or, for a small
    L, as long as every claim can have (the smallest count of other-text claims, at least 1).
    """
    rows = conn.execute(POOL_SQL, {
        "label_set_id": label_set_id, "embed_model": embed_model, "model_id": key.model_id,
        "prompt_version": key.prompt_version, "params_hash": key.params_hash,
        "score_kind": key.score_kind}).all()
    ids = np.array([r.claim_id for r in rows], dtype=np.int64)
    most_copies = conn.execute(text(
        "SELECT coalesce(max(n), 1) FROM (SELECT count(*) AS n FROM claims WHERE id = ANY(:c) "
        "GROUP BY text_hash) d"), {"c": ids.tolist()}).scalar_one()
    n_cols = max(1, min(n_cols, len(ids) - int(most_copies)))
    loo = nearest_labelled(conn, label_set_id, ids.tolist(), n_cols, key, leave_one_out=True,
                           embed_model=embed_model)
    if not np.array_equal(loo.claim_ids, ids):
        raise RuntimeError("leave-one-out kNN did not return one list per labelled claim")
    pos = np.searchsorted(ids, loo.neighbor_ids)
    cal = LabelledSet(y=np.array([r.label for r in rows], dtype=np.int64),
                      c=np.array([r.score for r in rows], dtype=float), nbr=pos, dist=loo.distances)
    return LabelledPool(ids, cal)


def fit_choice(cal: LabelledSet, correction: str, k: int, threshold: float) -> tuple[Choice, dict[str, Any]]:
    """The correction as a fully fitted :class:`Choice` (on L only), and what to record about it.

    ``ppi++``/``shrink`` get their factor by leave-one-out least squares on L; ``cv`` runs
    :func:`select_by_cv` over every method of its grid and the k of :func:`cv_ks`.
    """
    if correction == "cv":
        best = select_by_cv(cal, ks=cv_ks(k), thresholds=(threshold,)).best
        return best, {"cv_choice": {"method": best.method, "k": best.k, "params": dict(best.params),
                                    "threshold": best.threshold, "cv_weighted_f1": best.cv_score}}
    params: dict[str, Any] = {}
    if correction == "ppi++":
        params["lam"] = estimate_lambda(cal, k, form="ppi++")
    elif correction == "shrink":
        params["kappa"] = estimate_lambda(cal, k, form="shrink")
    return Choice(correction, k, params, threshold), ({"correction_params": params} if params else {})


def fit_predictor(
    name: str, cal: LabelledSet, c: np.ndarray, emb: tuple[np.ndarray, np.ndarray] | None = None,
    seed: int = 0,
) -> tuple[LabelledSet, np.ndarray, dict[str, Any]]:
    """L and the targets with a predictor fitted on L in place of the model score (pure).

    A score calibrator (:data:`checkworthy.method.calibrators.CALIBRATORS`) maps every score, L's
    included (one or two parameters: L's in-sample probabilities are fair game for conformal
    scores). The embedding head needs ``emb`` = (L's vectors, the targets' vectors); L gets its
    out-of-fold probabilities and pairwise cross-fitted neighbour scores
    (:meth:`checkworthy.method.embedding_head.HeadFit.labelled_set`), so no label judges itself.
    Returns (L, the targets' probabilities, the fitted numbers to record).
    """
    if name == "head":
        if emb is None:
            raise ValueError("the embedding head needs the claims' embeddings")
        head = fit_head(emb[0], cal.c, cal.y, seed=seed)
        return head.labelled_set(cal), head.predict(emb[1], c), {"C": head.C}
    model = CALIBRATORS[name]().fit(cal.c, cal.y)
    p_cal = model.predict_proba(cal.c)[:, 1]
    return (LabelledSet(y=cal.y, c=p_cal, nbr=cal.nbr, dist=cal.dist), model.predict_proba(c)[:, 1],
            fitted_params(model))


def compute_methods(
    spec: RunSpec, pool: LabelledPool, nq: Neighbours, c: np.ndarray,
    emb: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[nnppi.NNPPIResult, Neighbours, dict[str, Any]]:
    """Any interval x correction on the arrays (pure); the neighbours used, and what was fitted.

    ``nq`` holds the targets' neighbour lists (as long as L's, nearest first), ``c`` their
    scores, ``emb`` (L's, the targets' embeddings) only for the head. A predictor run
    (:data:`PREDICTOR_RUNS`) first replaces the scores (:func:`fit_predictor`); the correction
    is fitted on L only (:func:`fit_choice`); the interval is centred on it. KNN and the
    raw-score baseline use the same neighbours as the correction and the model's own score.
    """
    cal, theta_in, fitted = pool.cal, c, {}
    correction = spec.correction
    if correction in PREDICTOR_RUNS:
        predictor, correction = PREDICTOR_RUNS[correction]
        cal, theta_in, p_params = fit_predictor(predictor, cal, c, emb)
        fitted = {"predictor": {"name": predictor, "params": p_params}}
    choice, chosen = fit_choice(cal, correction, spec.k, spec.threshold)
    fitted |= chosen
    k = choice.k
    nb = Neighbourhood(c=theta_in, nbr=pool.positions(nq.neighbor_ids), cal=cal, dist=nq.distances, k=k)
    theta = choice.theta(nb)
    lo, hi = INTERVAL_METHODS[spec.interval_method](nb, spec.alpha, correction=choice.theta)
    km = nnppi.knn_mean(nb.y_nbr())
    res = nnppi.NNPPIResult(
        score=c, theta=theta, ci_low=np.asarray(lo, dtype=float), ci_high=np.asarray(hi, dtype=float),
        knn_mean=km, decision=nnppi.decide(theta, choice.threshold),
        knn_decision=nnppi.decide(km, spec.threshold),
        baseline_decision=nnppi.decide(c, spec.threshold))
    used = Neighbours(claim_ids=nq.claim_ids, neighbor_ids=nq.neighbor_ids[:, :k],
                      distances=nq.distances[:, :k], labels=nq.labels[:, :k], scores=nq.scores[:, :k])
    return res, used, fitted | {"k_used": k, "neighbour_columns": int(nq.neighbor_ids.shape[1])}


def run_calibration(engine: Engine, spec: RunSpec, ctx: RunContext | None = None) -> int:
    """Run (or reuse) the calibration described by ``spec``; return the run id."""
    check_methods(spec.interval_method, spec.correction)
    ctx = ctx or RunContext()
    with engine.connect() as lock:
        fingerprint = _fingerprint(lock, spec.label_set_id)
        key = run_key(spec, fingerprint)
        lock.execute(text("SELECT pg_advisory_lock(hashtextextended(:k, 0))"), {"k": key})
        lock.commit()
        try:
            existing = find_complete_run(lock, key)
            lock.commit()
            if existing is not None:
                return existing
            run_id = _start(engine, spec, key, fingerprint, ctx)
            try:
                with engine.begin() as conn:
                    _compute_and_store(conn, spec, run_id)
            except BaseException:
                with engine.begin() as conn:
                    conn.execute(
                        text("UPDATE calibration_runs SET status = 'failed', finished_at = now() "
                             "WHERE id = :i"), {"i": run_id})
                raise
            return run_id
        finally:
            lock.execute(text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))"), {"k": key})
            lock.commit()


def _start(engine: Engine, spec: RunSpec, key: str, fingerprint: str, ctx: RunContext) -> int:
    with engine.begin() as conn:
        return conn.execute(
            text(
                """INSERT INTO calibration_runs (run_key, target, label_set_id,
                   label_set_fingerprint, model_id, prompt_version, params_hash, score_kind,
                   embed_model, k, alpha, threshold, interval_method, params, status,
                   flow_run_id, code_rev, data_version_id)
                   VALUES (:key, :t, :ls, :fp, :m, :pv, :ph, :sk, :em, :k, :a, :th, :im,
                   CAST(:p AS jsonb), 'running', :fr, :cr, :dv) RETURNING id"""
            ),
            {"key": key, "t": spec.target, "ls": spec.label_set_id, "fp": fingerprint,
             "m": spec.key.model_id, "pv": spec.key.prompt_version, "ph": spec.key.params_hash,
             "sk": spec.key.score_kind, "em": spec.embed_model, "k": spec.k, "a": spec.alpha,
             "th": spec.threshold, "im": spec.interval_method,
             "p": json.dumps(ctx.extra | {"n_claims": len(spec.claim_ids), "correction": spec.correction}),
             "fr": ctx.flow_run_id, "cr": ctx.code_rev, "dv": ctx.data_version_id},
        ).scalar_one()


def _compute_and_store(conn: Connection, spec: RunSpec, run_id: int) -> None:
    ids, res, nb, counts = compute(conn, spec)
    conn.execute(
        text(
            """INSERT INTO calibrated_results (run_id, claim_id, score, theta, ci_low, ci_high,
               decision, knn_mean, neighbor_ids, neighbor_distances)
               VALUES (:r, :c, :s, :th, :lo, :hi, :d, :km, :nid, :nd)"""
        ),
        [
            {"r": run_id, "c": int(ids[i]), "s": float(res.score[i]), "th": float(res.theta[i]),
             "lo": float(res.ci_low[i]), "hi": float(res.ci_high[i]),
             "d": bool(res.decision[i]), "km": float(res.knn_mean[i]),
             "nid": [int(x) for x in nb.neighbor_ids[i]],
             "nd": [float(x) for x in nb.distances[i]]}
            for i in range(len(ids))
        ],
    )
    gold = current_labels(conn, [int(i) for i in ids])
    if len(gold) == len(ids) and len(ids):
        y = np.array([gold[int(i)] for i in ids])
        store_metrics(conn, run_id, metric_rows(y, res))
    conn.execute(
        text(
            """UPDATE calibration_runs SET status = 'complete', finished_at = now(),
               params = params || CAST(:p AS jsonb) WHERE id = :i"""
        ),
        {"i": run_id, "p": json.dumps(counts)},
    )


def load_run(conn: Connection, run_id: int) -> Mapping[str, Any]:
    """A run's row as a mapping (for reports and the CLI)."""
    return conn.execute(text("SELECT * FROM calibration_runs WHERE id = :i"), {"i": run_id}).mappings().one()


def load_results(conn: Connection, run_id: int) -> list[Mapping[str, Any]]:
    """A run's per-claim results with the claims' source ids, in claim id order."""
    return list(
        conn.execute(
            text(
                """SELECT r.*, c.source_id, c.dataset FROM calibrated_results r
                   JOIN claims c ON c.id = r.claim_id WHERE r.run_id = :i ORDER BY r.claim_id"""
            ),
            {"i": run_id},
        ).mappings()
    )


def neighbor_source_ids(conn: Connection, claim_ids: Sequence[int]) -> dict[int, str]:
    """Source ids of neighbour claims, for output files."""
    rows = conn.execute(
        text("SELECT id, source_id FROM claims WHERE id = ANY(:c)"), {"c": list(map(int, claim_ids))}
    ).all()
    return {r.id: r.source_id for r in rows}
