"""Which calibration run the API serves, and what each request stored.

The API serves the newest complete run of a label-set lineage (optionally of one model, score
kind, k, correction or interval): a recalibration after new labels is served from the next
request on. A request's own run (mode ``served``) is never itself served.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, text

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
    return conn.execute(
        text("""SELECT c.dataset FROM label_set_items i JOIN claims c ON c.id = i.claim_id
                WHERE i.label_set_id = :s GROUP BY c.dataset ORDER BY count(*) DESC, c.dataset LIMIT 1"""),
        {"s": label_set_id},
    ).scalar_one()


def insert_request(conn: Connection, request_uid: uuid.UUID, key_id: int, endpoint: str,
                   served_run_id: int, run_id: int | None, claim_ids: Sequence[int]) -> int:
    """Record what a request stored; return its id."""
    return conn.execute(
        text("""INSERT INTO api_requests (request_uid, key_id, endpoint, served_run_id, run_id, claim_ids)
                VALUES (:u, :k, :e, :s, :r, :c) RETURNING id"""),
        {"u": request_uid, "k": key_id, "e": endpoint, "s": served_run_id, "r": run_id,
         "c": [int(i) for i in claim_ids]},
    ).scalar_one()


def requests_of_key(conn: Connection, key_id: int) -> list[Mapping[str, Any]]:
    """A key's requests, oldest first."""
    return list(conn.execute(text("SELECT * FROM api_requests WHERE key_id = :k ORDER BY id"),
                             {"k": key_id}).mappings())
