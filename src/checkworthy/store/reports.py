"""Stored reports (``reports``): the Markdown as rendered, with the runs, analyses and comparisons it
pinned, so that it can be re-rendered byte for byte."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Connection, text


def store_report(conn: Connection, name: str, run_ids: Sequence[int], markdown: str, path: str,
                 flow_run_id: str | None, analysis_ids: Sequence[int] | None,
                 comparison_ids: Sequence[int] | None) -> None:
    """Insert a rendered report."""
    conn.execute(
        text("INSERT INTO reports (name, run_ids, markdown, path, flow_run_id, analysis_ids, comparison_ids) "
             "VALUES (:n, :r, :m, :p, :f, :a, :c)"),
        {"n": name, "r": [int(i) for i in run_ids], "m": markdown, "p": path, "f": flow_run_id,
         "a": analysis_ids, "c": comparison_ids},
    )


def stored_report(conn: Connection, ref: str) -> Mapping[str, Any] | None:
    """The newest stored report with this name (or id)."""
    return cast("Mapping[str, Any] | None", conn.execute(
        text("SELECT * FROM reports WHERE name = :n OR CAST(id AS text) = :n ORDER BY id DESC LIMIT 1"),
        {"n": ref}).mappings().first())
