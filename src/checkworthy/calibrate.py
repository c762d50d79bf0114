"""One calibration run: kNN in SQL, NN-PPI on the arrays, results stored atomically.

A run is identified by a key over all its inputs (claims, label set fingerprint, score key,
k, alpha, threshold, interval method): a complete run with the same key is reused, never
recomputed. Two processes starting the same run serialise on an advisory lock; the second
finds the first's complete run. Results, metrics and the 'complete' status are written in
one transaction, so a run is never marked complete with partial results; a failure marks
the run 'failed' and the next attempt starts a new run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import Connection, Engine, text

from checkworthy import calibration
from checkworthy.config import EMBED_MODEL
from checkworthy.evaluate import metric_rows, store_metrics
from checkworthy.knn_sql import nearest_labelled
from checkworthy.store import ScoreKey, claim_scores, current_labels, sha256_text


@dataclass(frozen=True)
class RunSpec:
    """Everything that determines a calibration's result."""

    target: str
    claim_ids: tuple[int, ...]
    label_set_id: int
    key: ScoreKey
    k: int
    alpha: float = 0.05
    threshold: float = calibration.THRESHOLD
    interval_method: str = "z"
    embed_model: str = EMBED_MODEL


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


def compute(conn: Connection, spec: RunSpec) -> tuple[np.ndarray, calibration.NNPPIResult, Any, dict]:
    """kNN + NN-PPI for the claims of ``spec`` that have a valid score; no writes."""
    scores = claim_scores(
        conn, spec.claim_ids, spec.key.model_id, spec.key.prompt_version, spec.key.params_hash,
        spec.key.score_kind,
    )
    usable = sorted(i for i in spec.claim_ids if scores.get(i) is not None)
    nb = nearest_labelled(conn, spec.label_set_id, usable, spec.k, spec.key,
                          embed_model=spec.embed_model)
    if len(nb.claim_ids) != len(usable):
        raise ValueError(f"{len(usable) - len(nb.claim_ids)} claims of {spec.target} have no embedding")
    c = np.array([scores[i] for i in nb.claim_ids], dtype=float)
    res = calibration.nnppi(c, nb.labels, nb.scores, spec.alpha, spec.threshold)
    counts = {
        "n_claims": len(spec.claim_ids),
        "n_calibrated": len(usable),
        "n_without_score": len(spec.claim_ids) - len(usable),
    }
    return nb.claim_ids, res, nb, counts


def run_calibration(engine: Engine, spec: RunSpec, ctx: RunContext | None = None) -> int:
    """Run (or reuse) the calibration described by ``spec``; return the run id."""
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
             "p": json.dumps(ctx.extra | {"n_claims": len(spec.claim_ids)}),
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
