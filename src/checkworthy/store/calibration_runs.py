"""Calibration runs in the store: ``calibration_runs`` rows (started, completed or failed once) and
their ``calibrated_results``, the advisory lock that serialises a run key, and which runs are in force.

A run is inserted ``running`` and moves once to ``complete`` (with counts merged into its params),
``failed``, or ``abandoned`` (its process died: :func:`close_abandoned_runs`). The lock is
session-level on a connection of its own, so the caller's transactions can commit while it is
held; a running run whose lock nobody holds has lost its process.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, Row, text

from checkworthy.method.nnppi import NNPPIResult
from checkworthy.store.knn import UNRECORDED
from checkworthy.store.run_spec import DEFAULT_CORRECTION, RunContext, RunSpec

#: the columns of a result row, in the order the writers give them
RESULT_COLUMNS = ("run_id", "claim_id", "score", "theta", "ci_low", "ci_high", "decision", "knn_mean",
                  "neighbour_ids", "neighbour_distances")


# ---- the run key's lock -----------------------------------------------------------------------


def lock_run_key(conn: Connection, run_key: str) -> None:
    """Wait for, then hold, the lock of a run key on ``conn`` (its own connection) until
    :func:`unlock_run_key`; commits, so that no transaction stays open meanwhile."""
    conn.execute(text("SELECT pg_advisory_lock(hashtextextended(:k, 0))"), {"k": run_key})
    conn.commit()


def unlock_run_key(conn: Connection, run_key: str) -> None:
    """Release the lock :func:`lock_run_key` took (and commit)."""
    conn.execute(text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))"), {"k": run_key})
    conn.commit()


def share_run_key(conn: Connection, run_key: str) -> None:
    """Wait for, then hold, a shared hold on a run key's lock on ``conn`` (its own connection)
    until :func:`unshare_run_key`: what the servers appending to an open served run hold, any
    number at once, so that :func:`close_abandoned_runs` leaves it alone while one of them lives.
    Commits."""
    conn.execute(text("SELECT pg_advisory_lock_shared(hashtextextended(:k, 0))"), {"k": run_key})
    conn.commit()


def unshare_run_key(conn: Connection, run_key: str) -> None:
    """Release the shared hold :func:`share_run_key` took (and commit)."""
    conn.execute(text("SELECT pg_advisory_unlock_shared(hashtextextended(:k, 0))"), {"k": run_key})
    conn.commit()


#: why a run is marked abandoned (``params->'abandoned'->>'reason'``)
ABANDONED = ("nobody held its run key's lock: the process running it ended (killed, or its database "
             "connection or server lost) before it finished")


def close_abandoned_runs(conn: Connection, noticed_by: str) -> list[int]:
    """Mark 'abandoned' every run left 'running' by a process that is gone; return their ids.

    A live run's process holds its key's lock (:func:`lock_run_key`) until the run is complete or
    failed, and the server releases it when that session ends, however it ends. So a running
    run whose key's lock can be taken here has no owner: it is finished as 'abandoned', with the
    reason and ``noticed_by`` in ``params->'abandoned'``. ``conn`` must hold no run key's lock
    but, at most, that of the run its caller is about to start (held, it can be taken again on
    the same session: that key's running runs are then leftovers too). Commits.
    """
    keys = conn.execute(text("SELECT DISTINCT run_key FROM calibration_runs WHERE status = 'running' "
                             "ORDER BY run_key")).scalars().all()
    conn.commit()
    closed: list[int] = []
    for key in keys:
        if not conn.execute(text("SELECT pg_try_advisory_lock(hashtextextended(:k, 0))"),
                            {"k": key}).scalar_one():
            continue  # its process is alive and working
        try:
            closed += conn.execute(text(
                """UPDATE calibration_runs SET status = 'abandoned', finished_at = now(),
                   params = params || jsonb_build_object('abandoned', jsonb_build_object(
                       'reason', CAST(:reason AS text), 'noticed_by', CAST(:by AS text)))
                   WHERE run_key = :k AND status = 'running' RETURNING id"""),
                {"k": key, "reason": ABANDONED, "by": noticed_by}).scalars().all()
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            unlock_run_key(conn, key)
    return sorted(closed)


# ---- a run's life -----------------------------------------------------------------------------


def find_complete_run(conn: Connection, run_key: str) -> int | None:
    """The id of the complete run with this key, if any."""
    return conn.execute(
        text("SELECT id FROM calibration_runs WHERE run_key = :k AND status = 'complete'"),
        {"k": run_key},
    ).scalar()


def insert_run(
    conn: Connection, spec: RunSpec, run_key: str, fingerprint: str, params: Mapping[str, Any],
    ctx: RunContext, parent_run_id: int | None = None, mode: str = "full",
) -> int:
    """Insert ``spec``'s run (:meth:`RunSpec.to_row`) as ``running``, with ``params`` and ``ctx``'s
    provenance; return its id. An ``incremental`` or ``served`` run names its parent. The database
    completes a run only with a result for each target claim that has a usable score (migration
    0007) and refuses one without a code revision (migration 0016)."""
    row = spec.to_row()
    return cast(int, conn.execute(
        text(
            """INSERT INTO calibration_runs (run_key, target, label_set_id, label_set_fingerprint,
               model_id, prompt_version, params_hash, score_kind, embed_model, k, alpha, threshold,
               interval_method, params, status, flow_run_id, code_rev, data_version_id, parent_run_id,
               mode, claim_ids)
               VALUES (:run_key, :target, :label_set_id, :fp, :model_id, :prompt_version, :params_hash,
               :score_kind, :embed_model, :k, :alpha, :threshold, :interval_method, CAST(:p AS jsonb),
               'running', :fr, :cr, :dv, :parent, :mode, :claim_ids) RETURNING id"""
        ),
        {name: value for name, value in row.items() if name != "params"}
        | {"run_key": run_key, "fp": fingerprint, "p": json.dumps(dict(params) | row["params"]),
               "fr": ctx.flow_run_id, "cr": ctx.code_rev, "dv": ctx.data_version_id, "parent": parent_run_id,
               "mode": mode},
    ).scalar_one())


def complete_run(conn: Connection, run_id: int, params: Mapping[str, Any]) -> None:
    """Mark a run complete, adding ``params`` (counts, what was fitted) to its params."""
    conn.execute(
        text(
            """UPDATE calibration_runs SET status = 'complete', finished_at = now(),
               params = params || CAST(:p AS jsonb) WHERE id = :i"""
        ),
        {"i": run_id, "p": json.dumps(dict(params))},
    )


def fail_run(conn: Connection, run_id: int) -> None:
    """Mark a run failed (the next attempt starts a new run)."""
    conn.execute(text("UPDATE calibration_runs SET status = 'failed', finished_at = now() WHERE id = :i"),
                 {"i": run_id})


def insert_results(
    conn: Connection, run_id: int, claim_ids: Sequence[int] | NDArray[np.int64], res: NNPPIResult,
    neighbour_ids: NDArray[np.int64], neighbour_distances: NDArray[np.float64],
) -> None:
    """Insert a run's result rows: one per claim, with its (k,) neighbour ids and distances."""
    ids = [int(i) for i in claim_ids]
    conn.execute(
        text(
            f"""INSERT INTO calibrated_results ({', '.join(RESULT_COLUMNS)})
               VALUES (:r, :c, :s, :th, :lo, :hi, :d, :km, :nid, :nd)"""
        ),
        [
            {"r": run_id, "c": ids[i], "s": float(res.score[i]), "th": float(res.theta[i]),
             "lo": float(res.ci_low[i]), "hi": float(res.ci_high[i]),
             "d": bool(res.decision[i]), "km": float(res.knn_mean[i]),
             "nid": [int(x) for x in neighbour_ids[i]],
             "nd": [float(x) for x in neighbour_distances[i]]}
            for i in range(len(ids))
        ],
    )


# ---- reading runs back ------------------------------------------------------------------------


def run_statuses(conn: Connection, run_ids: Sequence[int]) -> dict[int, str]:
    """The status of each stored run of ``run_ids`` (absent: no such run)."""
    return dict(conn.execute(text("SELECT id, status FROM calibration_runs WHERE id = ANY(:i)"),
                             {"i": [int(i) for i in run_ids]}).tuples().all())


def run_embed_models(conn: Connection, run_ids: Sequence[int]) -> dict[int, str]:
    """Each run's embedding model (its lineage's space), by run id."""
    rows = conn.execute(text("SELECT id, embed_model FROM calibration_runs WHERE id = ANY(:r)"),
                        {"r": [int(r) for r in run_ids]}).all()
    return {int(r.id): r.embed_model for r in rows}


def load_run(conn: Connection, run_id: int) -> Mapping[str, Any]:
    """A run's row as a mapping."""
    return cast(Mapping[str, Any], conn.execute(
        text("SELECT * FROM calibration_runs WHERE id = :i"), {"i": run_id}).mappings().one())


def load_results(conn: Connection, run_id: int) -> list[Mapping[str, Any]]:
    """A run's per-claim results with the claims' source ids, in claim id order."""
    return cast(list[Mapping[str, Any]], list(
        conn.execute(
            text(
                """SELECT r.*, c.source_id, c.dataset FROM calibrated_results r
                   JOIN claims c ON c.id = r.claim_id WHERE r.run_id = :i ORDER BY r.claim_id"""
            ),
            {"i": run_id},
        ).mappings()
    ))


def result_values(conn: Connection, run_id: int) -> Sequence[Row[Any]]:
    """A run's per-claim values without the neighbour arrays (claim_id, score, theta, ci_low, ci_high,
    decision, knn_mean, and ``nearest``: the distance to the nearest labelled neighbour), in claim
    id order."""
    return conn.execute(
        text("""SELECT claim_id, score, theta, ci_low, ci_high, decision, knn_mean,
                       neighbour_distances[1] AS nearest
                FROM calibrated_results WHERE run_id = :r ORDER BY claim_id"""), {"r": run_id}).all()


# ---- which runs are in force ------------------------------------------------------------------


def find_parent_run(conn: Connection, spec: RunSpec) -> int | None:
    """The newest complete run of ``spec``'s calibration on any version of its label set's
    lineage, whose neighbours were found the same way: its recorded ``params->'knn'`` holds every
    field of the spec's (:meth:`checkworthy.store.knn.KnnPath.as_dict`; a run that records none
    was exact; an HNSW run: the same ``ef_search`` and index build)."""
    return conn.execute(
        text(
            """SELECT r.id FROM calibration_runs r JOIN label_sets ls ON ls.id = r.label_set_id
               WHERE r.status = 'complete' AND r.target = :target
                 AND ls.name = (SELECT name FROM label_sets WHERE id = :label_set_id)
                 AND r.model_id = :model_id AND r.prompt_version = :prompt_version
                 AND r.params_hash = :params_hash AND r.score_kind = :score_kind
                 AND r.embed_model = :embed_model AND r.k = :k AND r.alpha = :alpha
                 AND r.threshold = :threshold AND r.interval_method = :interval_method
                 AND coalesce(r.params->>'correction', CAST(:default_correction AS text)) = :correction
                 AND coalesce(r.params->'knn', CAST(:unrecorded AS jsonb)) @> CAST(:knn AS jsonb)
               ORDER BY r.id DESC LIMIT 1"""
        ),
        {name: value for name, value in spec.to_row().items() if name not in ("params", "claim_ids")}
        | {"correction": spec.methods.correction, "default_correction": DEFAULT_CORRECTION,
           "knn": json.dumps(spec.methods.knn_path.as_dict()), "unrecorded": json.dumps(UNRECORDED)},
    ).scalar()


def stored_neighbour_ids(conn: Connection, run_id: int, claim_ids: Sequence[int]) -> NDArray[np.int64]:
    """The stored neighbour ids of a run's claims, rows in ``claim_ids`` order (every claim must
    have a result)."""
    rows: dict[int, list[int]] = dict(conn.execute(
        text("""SELECT claim_id, neighbour_ids FROM calibrated_results
                WHERE run_id = :r AND claim_id = ANY(:ids)"""),
        {"r": run_id, "ids": [int(i) for i in claim_ids]}).tuples().all())
    return np.array([rows[int(i)] for i in claim_ids], dtype=np.int64)


def runs_in_force(conn: Connection, label_set_name: str) -> list[Any]:
    """The newest complete run of every calibration (target x score key x k x ...) of a lineage's targets.

    Only the newest prompt version per model and score kind counts: a guideline change supersedes
    the calibrations made under the older prompt.
    """
    return list(conn.execute(
        text(
            """WITH r AS (
                 SELECT r.*, row_number() OVER (
                   PARTITION BY r.target, r.model_id, r.params_hash, r.score_kind, r.embed_model, r.k,
                                r.alpha, r.threshold, r.interval_method,
                                coalesce(r.params->>'correction', CAST(:dc AS text)),
                                coalesce(r.params->'knn', CAST(:unrecorded AS jsonb))->>'path',
                                r.params->'knn'->>'ef_search'
                                ORDER BY r.id DESC) AS n,
                   rank() OVER (PARTITION BY r.target, r.model_id, r.score_kind
                                ORDER BY pv.created_at DESC) AS prompt_rank
                 FROM calibration_runs r JOIN calibration_targets t ON t.name = r.target
                 JOIN label_sets ls ON ls.id = r.label_set_id AND ls.name = t.label_set_name
                 JOIN prompt_versions pv ON pv.id = r.prompt_version
                 WHERE t.label_set_name = :n AND r.status = 'complete')
               SELECT * FROM r WHERE n = 1 AND prompt_rank = 1 ORDER BY id"""
        ),
        {"n": label_set_name, "unrecorded": json.dumps(UNRECORDED), "dc": DEFAULT_CORRECTION},
    ).mappings())


def targets_needing_work(conn: Connection, label_set_names: Sequence[str] | None = None) -> list[str]:
    """Targets with no complete run yet, or with more claims than their newest complete run covered.

    Cheap enough to run on every schedule tick, so that loading a model is skipped when nothing
    has arrived.
    """
    return list(conn.execute(
        text(
            """SELECT DISTINCT t.name FROM calibration_targets t
               LEFT JOIN LATERAL (SELECT (r.params->>'n_claims')::int AS n FROM calibration_runs r
                                  JOIN label_sets ls ON ls.id = r.label_set_id
                                  WHERE r.target = t.name AND ls.name = t.label_set_name
                                    AND r.status = 'complete'
                                  ORDER BY r.id DESC LIMIT 1) last ON true
               WHERE (last.n IS NULL
                      OR last.n < (SELECT count(*) FROM target_claims tc WHERE tc.target = t.name))
                 AND (CAST(:names AS text[]) IS NULL OR t.label_set_name = ANY(CAST(:names AS text[])))
               ORDER BY t.name"""
        ),
        {"names": list(label_set_names) if label_set_names is not None else None},
    ).scalars())



def newest_runs(conn: Connection, label_set_name: str) -> list[Any]:
    """The newest complete run of each target a lineage has calibrated (served runs aside),
    registered as a calibration target or not (``predict``'s batches are not)."""
    return list(conn.execute(
        text(
            """SELECT DISTINCT ON (r.target) r.* FROM calibration_runs r
               JOIN label_sets ls ON ls.id = r.label_set_id
               WHERE ls.name = :n AND r.status = 'complete' AND r.mode <> 'served'
               ORDER BY r.target, r.id DESC"""
        ),
        {"n": label_set_name},
    ).mappings())
