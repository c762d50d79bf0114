"""The model registry's SQL: versions of each lineage's models and the decisions on their status.

A version (``model_versions``) is a model spec a lineage may use, with what it was trained on and
its cross-validated figures; its status (champion, challenger, retired) is its newest decision
(``model_decisions``). Both tables are append-only, so the history of every promotion, with the
figures it was decided on, stays for auditors. A lineage has at most one champion: every status
change holds :data:`REGISTRY_LOCK` for its transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Connection, text

REGISTRY_LOCK = 7_2024_0004  # one status change at a time (one champion per lineage)
STATUSES = ("champion", "challenger", "retired")


@dataclass(frozen=True)
class NewVersion:
    """A model version to register."""

    lineage: str
    spec: str
    label_set_id: int | None = None
    label_fingerprint: str | None = None
    n_labels: int | None = None
    n_positive: int | None = None
    code_rev: str = ""
    artefact: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, Any] = field(default_factory=dict)
    training: Mapping[str, Any] = field(default_factory=dict)


def lock_registry(conn: Connection) -> None:
    """Hold the registry lock until the transaction ends."""
    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": REGISTRY_LOCK})


def register_version(conn: Connection, v: NewVersion) -> int:
    """The id of ``v``'s (lineage, spec), registering it first if new (a spec names one model, so
    a second registration of it is the first)."""
    conn.execute(
        text(
            """INSERT INTO model_versions (lineage, spec, label_set_id, label_fingerprint, n_labels,
                                          n_positive, code_rev, artefact, metrics, training)
               VALUES (:l, :s, :ls, :f, :n, :np, :rev, CAST(:a AS jsonb), CAST(:m AS jsonb),
                       CAST(:t AS jsonb))
               ON CONFLICT (lineage, spec) DO NOTHING"""
        ),
        {"l": v.lineage, "s": v.spec, "ls": v.label_set_id, "f": v.label_fingerprint, "n": v.n_labels,
         "np": v.n_positive, "rev": v.code_rev, "a": json.dumps(dict(v.artefact)),
         "m": json.dumps(dict(v.metrics)), "t": json.dumps(dict(v.training))},
    )
    return cast(int, conn.execute(text("SELECT id FROM model_versions WHERE lineage = :l AND spec = :s"),
                                  {"l": v.lineage, "s": v.spec}).scalar_one())


def decide(conn: Connection, version_id: int, status: str, decided_by: str, reason: str,
           figures: Mapping[str, Any] | None = None, compared_with: int | None = None) -> int:
    """Append a status decision for a version; return its id."""
    return cast(int, conn.execute(
        text(
            """INSERT INTO model_decisions (version_id, status, compared_with, decided_by, reason, figures)
               VALUES (:v, :s, :c, :b, :r, CAST(:f AS jsonb)) RETURNING id"""
        ),
        {"v": version_id, "s": status, "c": compared_with, "b": decided_by, "r": reason,
         "f": json.dumps(dict(figures or {}))},
    ).scalar_one())


def version(conn: Connection, version_id: int) -> Mapping[str, Any] | None:
    """A version with its current status (None if unknown or never decided)."""
    return cast("Mapping[str, Any] | None", conn.execute(
        text("SELECT * FROM model_registry WHERE id = :i"), {"i": version_id}).mappings().first())


def champion(conn: Connection, lineage: str) -> Mapping[str, Any] | None:
    """The lineage's champion (None: the project's recommended model is in force)."""
    return cast("Mapping[str, Any] | None", conn.execute(
        text("""SELECT * FROM model_registry WHERE lineage = :l AND status = 'champion'
                ORDER BY id DESC LIMIT 1"""),
        {"l": lineage},
    ).mappings().first())


def versions(conn: Connection, lineage: str | None = None) -> list[Mapping[str, Any]]:
    """Every version (of ``lineage``, when given), oldest first, with its current status."""
    return cast(list[Mapping[str, Any]], list(conn.execute(
        text("""SELECT * FROM model_registry WHERE CAST(:l AS text) IS NULL OR lineage = :l
                ORDER BY lineage, id"""),
        {"l": lineage},
    ).mappings()))


def decisions(conn: Connection, version_id: int) -> list[Mapping[str, Any]]:
    """A version's decisions, oldest first."""
    return cast(list[Mapping[str, Any]], list(conn.execute(
        text("SELECT * FROM model_decisions WHERE version_id = :v ORDER BY id"), {"v": version_id}
    ).mappings()))
