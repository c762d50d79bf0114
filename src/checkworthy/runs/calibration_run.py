"""One calibration run: kNN in SQL, the calibration core (:mod:`checkworthy.runs.calibration`) on
the arrays, results, metrics and the 'complete' status stored in one transaction.

A run is identified by a key over all its inputs: a complete run with the same key is reused,
never recomputed, and two processes starting the same run serialise on the key's lock. A failure
marks the run 'failed'; the next attempt starts a new one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, Engine

from checkworthy.runs.calibration import CalibrationOutcome, batch_neighbours, finish_run, fit, outcome
from checkworthy.store.calibration_runs import (
    close_abandoned_runs,
    fail_run,
    find_complete_run,
    insert_run,
    lock_run_key,
    unlock_run_key,
)
from checkworthy.store.knn import nearest_labelled
from checkworthy.store.languages import ensure_languages
from checkworthy.store.rows import claim_scores, claim_text_hashes, label_set_claims, label_set_fingerprint
from checkworthy.store.run_spec import RunContext, RunRecord, RunSpec, run_key


def compute(conn: Connection, spec: RunSpec) -> CalibrationOutcome:
    """kNN + the run's calibration for the claims of ``spec`` that have a valid score; no writes.

    The outcome's record holds the counts and what was computed with the results (the kNN
    path, the drift figure, the rule, the batch's share, what was fitted).
    """
    scores = claim_scores(conn, spec.claim_ids, spec.key.model_id, spec.key.prompt_version,
                          spec.key.params_hash, spec.key.score_kind)
    usable = sorted(i for i in spec.claim_ids if scores.get(i) is not None)
    fitted = fit(conn, spec)
    nb = batch_neighbours(conn, fitted, usable)
    c = np.array([scores[i] for i in nb.claim_ids], dtype=float)
    counts = RunRecord(n_claims=len(spec.claim_ids), n_calibrated=len(usable),
                       n_without_score=len(spec.claim_ids) - len(usable),
                       knn=knn_record(conn, spec, nb.claim_ids, nb.neighbour_ids))
    return outcome(conn, fitted, nb, c, counts)


#: how many of a run's claims its HNSW recall is measured on (exact kNN for them)
RECALL_SAMPLE = 200


def knn_record(conn: Connection, spec: RunSpec, claim_ids: NDArray[np.int64],
               neighbour_ids: NDArray[np.int64]) -> dict[str, Any]:
    """What the run records about its kNN path; for HNSW, recall@k against the exact path on an
    evenly spaced sample of its claims (``claim_ids`` with their (n, k) ``neighbour_ids``, every
    claim up to :data:`RECALL_SAMPLE`): the share of each sampled claim's exact k nearest that the
    run's lists hold, averaged."""
    out = spec.methods.knn_path.as_dict()
    if spec.methods.knn == "exact" or not len(claim_ids):
        return out
    k = neighbour_ids.shape[1]
    rows = recall_sample(len(claim_ids))
    exact = nearest_labelled(conn, spec.label_set_id, claim_ids[rows].tolist(), k, spec.key,
                             embed_model=spec.methods.embed_model)
    found = [len(set(a) & set(e)) / k for a, e in zip(neighbour_ids[rows], exact.neighbour_ids)]
    return out | {"recall_at_k": float(np.mean(found)), "k": int(k), "recall_sample": len(rows)}


def recall_sample(n: int) -> NDArray[np.int64]:
    """Positions of the claims an HNSW run's recall is measured on: evenly spaced, at most
    :data:`RECALL_SAMPLE`."""
    return np.unique(np.linspace(0, n - 1, min(RECALL_SAMPLE, n)).astype(np.int64))


#: who closes the runs a dead process left running, when a calibration starts
STARTING = "the start of another calibration"


@dataclass(frozen=True)
class RunOutcome:
    """A run of :func:`run_or_reuse`: its id, and what it computed (None: a complete run with the
    same key was reused, so its results are the store's)."""

    run_id: int
    computed: CalibrationOutcome | None = None


def run_calibration(engine: Engine, spec: RunSpec, ctx: RunContext | None = None) -> int:
    """Run (or reuse) the calibration described by ``spec``; return the run id
    (:func:`run_or_reuse`)."""
    return run_or_reuse(engine, spec, ctx).run_id


def run_or_reuse(engine: Engine, spec: RunSpec, ctx: RunContext | None = None) -> RunOutcome:
    """Run (or reuse) the calibration described by ``spec``; return the run, with the outcome it
    stored when it computed one. Holding the key's lock, it first closes the runs a dead process
    left running (:func:`close_abandoned_runs`)."""
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
                return RunOutcome(existing)
            params = ctx.extra | {"n_claims": len(spec.claim_ids)}
            with engine.begin() as conn:
                ensure_run_languages(conn, spec)
                run_id = insert_run(conn, spec, key, fingerprint, params, ctx)
            try:
                with engine.begin() as conn:
                    computed = compute(conn, spec)
                    finish_run(conn, run_id, computed)
            except BaseException:
                with engine.begin() as conn:
                    fail_run(conn, run_id)
                raise
            return RunOutcome(run_id, computed)
        finally:
            unlock_run_key(lock, key)


def ensure_run_languages(conn: Connection, spec: RunSpec) -> int:
    """Store the language of every text of the run's claims and of its label set that has none
    yet (texts stored before languages were, or by a path that stores none): drift reads them."""
    claims = list(spec.claim_ids) + label_set_claims(conn, spec.label_set_id)
    return ensure_languages(conn, claim_text_hashes(conn, claims))
