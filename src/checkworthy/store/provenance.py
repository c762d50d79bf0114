"""Provenance and change records: who wrote a row, which data a run used, what changed.

Flow-run stamping: :func:`stamped` returns the engine with a Prefect flow-run id attached;
every transaction begun on it first sets ``checkworthy.flow_run_id`` (transaction-local), and
the migration-0003 trigger copies it into the ``flow_run_id`` column of each row inserted.
So the existing store functions record the flow run without a new parameter, and a pooled
connection never carries the id into someone else's transaction.

Changes: a label update or a guideline edit is recorded once in ``change_events``, with the id
of the Prefect event that announces it (emitted by :mod:`checkworthy.flows.events`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, event, text

_OPTION = "checkworthy_flow_run_id"
_listening: set[int] = set()


def _on_begin(conn: Connection) -> None:
    flow_run_id = conn.get_execution_options().get(_OPTION)
    if flow_run_id:
        conn.exec_driver_sql(
            "SELECT set_config('checkworthy.flow_run_id', %(f)s, true)", {"f": str(flow_run_id)}
        )


def stamped(engine: Engine, flow_run_id: str | None) -> Engine:
    """``engine`` whose transactions stamp ``flow_run_id`` on every row they insert."""
    if not flow_run_id:
        return engine
    base = getattr(engine, "engine", engine)
    if id(base) not in _listening:
        event.listen(base, "begin", _on_begin)
        _listening.add(id(base))
    return engine.execution_options(**{_OPTION: str(flow_run_id)})


def record_flow_run(
    conn: Connection, flow_run_id: str, flow_name: str, parameters: Mapping[str, Any] | None = None,
    deployment: str | None = None, code_rev: str = "",
) -> None:
    """Register a flow run once (re-running a task of the same run changes nothing)."""
    conn.execute(
        text(
            """INSERT INTO flow_runs (flow_run_id, flow_name, deployment, parameters, code_rev)
               VALUES (:f, :n, :d, CAST(:p AS jsonb), :c) ON CONFLICT DO NOTHING"""
        ),
        {"f": flow_run_id, "n": flow_name, "d": deployment,
         "p": json.dumps(dict(parameters or {}), default=str, sort_keys=True), "c": code_rev},
    )


def attach_data_version(conn: Connection, flow_run_id: str, data_version_id: int, role: str = "used") -> None:
    """Attach a data version to a flow run ('used' as input or 'produced' by it)."""
    conn.execute(
        text(
            """INSERT INTO flow_run_data_versions (flow_run_id, data_version_id, role)
               VALUES (:f, :d, :r) ON CONFLICT DO NOTHING"""
        ),
        {"f": flow_run_id, "d": data_version_id, "r": role},
    )


@dataclass(frozen=True)
class Change:
    """A stored change and the id of the Prefect event that announces it."""

    id: int
    kind: str
    key: str
    event_id: str
    payload: dict[str, Any]
    new: bool


def record_change(
    conn: Connection, kind: str, key: str, payload: Mapping[str, Any], data_version_id: int | None
) -> Change:
    """Store a change once per (kind, key), with the id its Prefect event will carry.

    The event id is chosen here (rows are append-only: nothing is filled in later), so a
    re-emitted event of the same change has the same id and Prefect can tell it is a repeat.
    """
    body = json.loads(json.dumps(dict(payload), default=str, sort_keys=True))
    row = conn.execute(
        text(
            """INSERT INTO change_events (kind, key, payload, data_version_id, prefect_event_id)
               VALUES (:k, :key, CAST(:p AS jsonb), :dv, :e) ON CONFLICT (kind, key) DO NOTHING
               RETURNING id"""
        ),
        {"k": kind, "key": key, "p": json.dumps(body), "dv": data_version_id, "e": str(uuid.uuid4())},
    ).scalar()
    got = conn.execute(
        text("SELECT id, payload, prefect_event_id FROM change_events WHERE kind = :k AND key = :key"),
        {"k": kind, "key": key},
    ).one()
    return Change(got.id, kind, key, got.prefect_event_id, dict(got.payload), row is not None)



def change_history(conn: Connection, kind: str, key: str) -> tuple[int, bool]:
    """How many changes of ``kind`` are stored, and whether the change ``key`` is one of them."""
    seen, known = conn.execute(
        text("""SELECT count(*), coalesce(bool_or(key = :key), false) FROM change_events
                WHERE kind = :k"""),
        {"k": kind, "key": key}).one()
    return int(seen), bool(known)
