"""The review queue in the store (migration 0008): entries appended by runs, answers appended with
labels, and the open queue (``review_open``) read back for export.

A person's answer closes every entry of its claim; answers are written in the transaction that
appends the label, so a label and the closing of its entries are one fact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Connection, Row, text

#: the open queue's columns, in export order
OPEN_COLUMNS = ("entry_id", "run_id", "target", "claim_id", "dataset", "source_id", "text", "theta",
                "priority", "reason")


def insert_entries(conn: Connection, run_id: int, claim_ids: Sequence[int], theta: Sequence[float],
                   priority: Sequence[float], reasons: Sequence[str], causes: Sequence[str]) -> int:
    """Append a running run's entries in one statement, each with its cause (``rule`` or
    ``drift``, migration 0014); return how many."""
    if not len(claim_ids):
        return 0
    return conn.execute(text(
        """INSERT INTO review_queue (run_id, claim_id, theta, priority, reason, cause)
           SELECT :r, u.c, u.t, u.p, u.why, u.cause
           FROM unnest(CAST(:c AS bigint[]), CAST(:t AS float8[]), CAST(:p AS float8[]),
                       CAST(:why AS text[]), CAST(:cause AS text[])) AS u(c, t, p, why, cause)"""),
        {"r": run_id, "c": [int(c) for c in claim_ids], "t": [float(t) for t in theta],
         "p": [float(p) for p in priority], "why": list(reasons), "cause": list(causes)}).rowcount


def entries_of_run(conn: Connection, run_id: int) -> list[Mapping[str, Any]]:
    """A run's entries, most uncertain first."""
    return cast(list[Mapping[str, Any]], list(conn.execute(text(
        """SELECT claim_id, theta, priority, reason, cause FROM review_queue WHERE run_id = :r
           ORDER BY priority DESC, claim_id"""), {"r": run_id}).mappings()))


def open_entries(conn: Connection, limit: int | None = None, target: str | None = None
                 ) -> list[Mapping[str, Any]]:
    """The top of the open queue (one row per unanswered claim of the runs in force), most
    uncertain first; ``target`` keeps one calibration target's claims."""
    return cast(list[Mapping[str, Any]], list(conn.execute(text(
        f"""SELECT {', '.join(OPEN_COLUMNS)} FROM review_open
            WHERE CAST(:t AS text) IS NULL OR target = :t
            ORDER BY priority DESC, claim_id LIMIT :n"""), {"t": target, "n": limit}).mappings()))


def open_drift_claims(conn: Connection, claim_ids: Sequence[int]) -> set[int]:
    """The claims among ``claim_ids`` that a run in force queued for drift (cause ``drift``) and
    no one has answered yet."""
    return set(conn.execute(text(
        """SELECT DISTINCT q.claim_id FROM review_queue q
           JOIN calibrations_in_force f ON f.run_id = q.run_id
           WHERE q.cause = 'drift' AND q.claim_id = ANY(:c)
             AND NOT EXISTS (SELECT 1 FROM review_answers a WHERE a.claim_id = q.claim_id)"""),
        {"c": [int(c) for c in claim_ids]}).scalars())


def unlabelled_sample(conn: Connection, limit: int | None, target: str | None, seed: int
                      ) -> list[Mapping[str, Any]]:
    """A uniform sample of the claims the calibrations in force decide that have no label and no
    answer (the stream), with their newest theta and run's threshold; the order is a seeded hash
    of the claim id, so the same seed gives the same sample."""
    return cast(list[Mapping[str, Any]], list(conn.execute(text(
        """SELECT * FROM (
               SELECT DISTINCT ON (cr.claim_id) cr.run_id, f.target, cr.claim_id, c.dataset, c.source_id,
                      t.text, cr.theta, r.threshold
               FROM calibrated_results cr
               JOIN calibrations_in_force f ON f.run_id = cr.run_id
               JOIN calibration_runs r ON r.id = cr.run_id
               JOIN claims c ON c.id = cr.claim_id
               JOIN texts t ON t.text_hash = c.text_hash
               WHERE (CAST(:t AS text) IS NULL OR f.target = :t)
                 AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.claim_id = cr.claim_id)
                 AND NOT EXISTS (SELECT 1 FROM review_answers a WHERE a.claim_id = cr.claim_id)
               ORDER BY cr.claim_id, cr.run_id DESC) x
           ORDER BY md5(x.claim_id::text || ':' || CAST(:seed AS text)), x.claim_id LIMIT :n"""),
        {"t": target, "n": limit, "seed": seed}).mappings()))


def calibrated_targets(conn: Connection) -> list[str]:
    """The targets with a calibration in force."""
    return list(conn.execute(text("SELECT DISTINCT target FROM calibrations_in_force ORDER BY 1")).scalars())


def targets_with_entries(conn: Connection) -> list[str]:
    """The targets that have ever had a claim queued (to name them when ``target`` matches none)."""
    return list(conn.execute(text(
        """SELECT DISTINCT r.target FROM review_queue q JOIN calibration_runs r ON r.id = q.run_id
           ORDER BY 1""")).scalars())


def close_answered(conn: Connection, update_id: int, labels: Mapping[int, int]) -> int:
    """Record the answers of a label update for the claims among ``labels`` (claim id -> label) that
    were ever queued and are not answered by this update already; return how many."""
    return conn.execute(text(
        """INSERT INTO review_answers (claim_id, label, update_id)
           SELECT a.claim_id, a.label, :u
           FROM unnest(CAST(:c AS bigint[]), CAST(:l AS smallint[])) AS a(claim_id, label)
           WHERE EXISTS (SELECT 1 FROM review_queue q WHERE q.claim_id = a.claim_id)
           ON CONFLICT (claim_id, update_id) DO NOTHING"""),
        {"u": update_id, "c": [int(c) for c in labels], "l": [int(v) for v in labels.values()]},
    ).rowcount


def answers_of_update(conn: Connection, update_id: int) -> list[Mapping[str, Any]]:
    """The answers a label update recorded."""
    return cast(list[Mapping[str, Any]], list(conn.execute(text(
        "SELECT claim_id, label FROM review_answers WHERE update_id = :u ORDER BY claim_id"),
        {"u": update_id}).mappings()))


def labelled_results(conn: Connection, run_id: int) -> Sequence[Row[Any]]:
    """A run's (claim_id, theta, nearest labelled distance, label) with each claim's label as it
    stood when the run finished (None if it had none), so that figures derived from them never
    change afterwards."""
    return conn.execute(text(
        """SELECT r.claim_id, r.theta, r.neighbour_distances[1] AS nearest,
                  (SELECT l.label FROM labels l
                   WHERE l.claim_id = r.claim_id AND l.created_at <= cr.finished_at
                   ORDER BY l.id DESC LIMIT 1) AS label
           FROM calibrated_results r JOIN calibration_runs cr ON cr.id = r.run_id
           WHERE r.run_id = :r ORDER BY r.claim_id"""), {"r": run_id}).all()


def queued_counts(conn: Connection, run_ids: Sequence[int]) -> dict[int, int]:
    """How many claims each run queued for review."""
    return dict(conn.execute(text(
        "SELECT run_id, count(*) FROM review_queue WHERE run_id = ANY(:r) GROUP BY run_id"),
        {"r": [int(i) for i in run_ids]}).tuples().all())
