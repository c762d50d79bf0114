"""The ``data_versions`` table: one row per (DVC hash of ``data/``, git revision) a result used."""

from __future__ import annotations

from typing import cast

from sqlalchemy import Connection, text

from checkworthy.data.versioning import DataVersion


def record_data_version(conn: Connection, version: DataVersion) -> int:
    """Store a data version once (see :func:`checkworthy.data.versioning.data_version`); return its id."""
    params = {"h": version.dvc_hash, "g": version.git_rev}
    conn.execute(
        text("INSERT INTO data_versions (dvc_hash, git_rev) VALUES (:h, :g) ON CONFLICT DO NOTHING"), params
    )
    return cast(int, conn.execute(
        text("SELECT id FROM data_versions WHERE dvc_hash = :h AND git_rev = :g"), params
    ).scalar_one())
