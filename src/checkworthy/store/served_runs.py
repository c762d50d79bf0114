"""Which calibration run the API serves, and what each request stored.

The API serves the newest complete run of a label-set lineage (optionally of one model, score
kind, k, correction or interval): a recalibration after new labels is served from the next
request on. The requests calibrated with one served run within a window of time are stored in
one run of mode ``served`` (its *window*, migration 0018), which is never itself served.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection, text

from checkworthy.method.drift import Drift
from checkworthy.store.run_spec import DEFAULT_CORRECTION

#: the run fields a server may be pinned to (``checkworthy serve --model ... --k ...``)
SELECTORS = ("model", "score_kind", "k", "correction", "interval")


def newest_run(conn: Connection, lineage: str, selection: Mapping[str, Any] | None = None,
               run_id: int | None = None) -> int | None:
    """The newest complete, non-served run of ``lineage`` that matches ``selection`` (and is
    ``run_id``, when given); None when there is none. Looked up on every request: one row."""
    sel = {name: (selection or {}).get(name) for name in SELECTORS}
    return conn.execute(
        text(
            """SELECT r.id
               FROM calibration_runs r JOIN label_sets ls ON ls.id = r.label_set_id
               JOIN models m ON m.id = r.model_id
               WHERE ls.name = :lineage AND r.status = 'complete' AND r.mode <> 'served'
                 AND (CAST(:run_id AS bigint) IS NULL OR r.id = :run_id)
                 AND (CAST(:model AS text) IS NULL OR m.spec = :model)
                 AND (CAST(:score_kind AS text) IS NULL OR r.score_kind = :score_kind)
                 AND (CAST(:k AS int) IS NULL OR r.k = :k)
                 AND (CAST(:correction AS text) IS NULL
                      OR coalesce(r.params->>'correction', CAST(:dc AS text)) = :correction)
                 AND (CAST(:interval AS text) IS NULL OR r.interval_method = :interval)
               ORDER BY r.id DESC LIMIT 1"""
        ),
        {"lineage": lineage, "run_id": run_id, "dc": DEFAULT_CORRECTION} | sel,
    ).scalar()


def calibrated_lineages(conn: Connection) -> list[str]:
    """The label-set lineages with at least one complete run that could be served, by name."""
    return list(conn.execute(text(
        """SELECT DISTINCT ls.name FROM calibration_runs r JOIN label_sets ls ON ls.id = r.label_set_id
           WHERE r.status = 'complete' AND r.mode <> 'served' ORDER BY ls.name""")).scalars())


def lineage_dataset(conn: Connection, label_set_id: int) -> str:
    """The dataset most of a label set's claims belong to (a request's claims join it)."""
    return cast(str, conn.execute(
        text("""SELECT c.dataset FROM label_set_items i JOIN claims c ON c.id = i.claim_id
                WHERE i.label_set_id = :s GROUP BY c.dataset ORDER BY count(*) DESC, c.dataset LIMIT 1"""),
        {"s": label_set_id},
    ).scalar_one())


def insert_request(conn: Connection, request_uid: uuid.UUID, key_id: int, endpoint: str,
                   served_run_id: int, run_id: int | None, claim_ids: Sequence[int],
                   drift: Drift | None) -> int:
    """Record what a request stored, and its own drift figure; return its id."""
    return cast(int, conn.execute(
        text("""INSERT INTO api_requests (request_uid, key_id, endpoint, served_run_id, run_id, claim_ids,
                                          drift)
                VALUES (:u, :k, :e, :s, :r, :c, CAST(:d AS jsonb)) RETURNING id"""),
        {"u": request_uid, "k": key_id, "e": endpoint, "s": served_run_id, "r": run_id,
         "c": [int(i) for i in claim_ids], "d": None if drift is None else json.dumps(drift.as_dict())},
    ).scalar_one())


# ---- windows: the run that records a served run's requests for a while ------------------------


@dataclass(frozen=True)
class Window:
    """A served run's open window: its run, that run's key, and whether its time is over."""

    run_id: int
    run_key: str
    over: bool


@dataclass(frozen=True)
class WindowCounts:
    """What a window's run holds: its requests, their claims, its review-queue entries, and the
    distance of each result to its nearest labelled claim (claim id order), with that result's
    claim."""

    n_requests: int
    n_claims: int
    n_queued: int
    nearest: list[float]
    #: the claim of each result, in the order of ``nearest``
    claim_ids: list[int]


def lock_windows(conn: Connection, served_run_id: int) -> None:
    """Take the served run's window lock until the transaction ends: requests (threads, worker
    processes) find, open, append to and complete its window one at a time."""
    conn.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
                 {"k": f"served-window:{served_run_id}"})


def open_window(conn: Connection, served_run_id: int, seconds: float) -> Window | None:
    """The served run's open window (its running run of mode ``served``), over when it opened
    ``seconds`` ago or more; None when none is open."""
    row = conn.execute(
        text("""SELECT id, run_key, clock_timestamp() >= started_at + make_interval(secs => :w) AS over
                FROM calibration_runs
                WHERE parent_run_id = :s AND mode = 'served' AND status = 'running'"""),
        {"s": served_run_id, "w": float(seconds)}).one_or_none()
    return None if row is None else Window(int(row.id), str(row.run_key), bool(row.over))


def is_running(conn: Connection, run_id: int) -> bool:
    """Whether the run is still running (an open window another process may have closed)."""
    return cast(bool, conn.execute(text("SELECT status = 'running' FROM calibration_runs WHERE id = :i"),
                                   {"i": run_id}).scalar_one())


def window_counts(conn: Connection, run_id: int) -> WindowCounts:
    """What a window's run holds so far (:class:`WindowCounts`)."""
    row = conn.execute(
        text("""SELECT (SELECT count(*) FROM api_requests WHERE run_id = :r) AS n_requests,
                       (SELECT coalesce(sum(cardinality(claim_ids)), 0) FROM api_requests
                        WHERE run_id = :r) AS n_claims,
                       (SELECT count(*) FROM review_queue WHERE run_id = :r) AS n_queued,
                       (SELECT coalesce(array_agg(neighbour_distances[1] ORDER BY claim_id), '{}')
                        FROM calibrated_results WHERE run_id = :r) AS nearest,
                       (SELECT coalesce(array_agg(claim_id ORDER BY claim_id), '{}')
                        FROM calibrated_results WHERE run_id = :r) AS claim_ids"""),
        {"r": run_id}).one()
    return WindowCounts(int(row.n_requests), int(row.n_claims), int(row.n_queued),
                        [float(d) for d in row.nearest], [int(i) for i in row.claim_ids])


def complete_window(conn: Connection, run_id: int, params: Mapping[str, Any]) -> bool:
    """Complete a window's run with its final ``params`` (added to those it opened with); False
    when it is no longer running (closed meanwhile, e.g. as abandoned)."""
    return conn.execute(
        text("""UPDATE calibration_runs SET status = 'complete', finished_at = now(),
                params = params || CAST(:p AS jsonb) WHERE id = :i AND status = 'running'"""),
        {"i": run_id, "p": json.dumps(dict(params))}).rowcount == 1


def requests_of_key(conn: Connection, key_id: int) -> list[Mapping[str, Any]]:
    """A key's requests, oldest first."""
    return cast(list[Mapping[str, Any]], list(conn.execute(
        text("SELECT * FROM api_requests WHERE key_id = :k ORDER BY id"), {"k": key_id}).mappings()))
