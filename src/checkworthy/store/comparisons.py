"""Method comparisons (``method_comparisons`` heads, ``method_comparison`` rows) and what a comparison
reads about a stored run: the run, its targets' scores and neighbours, the split its label set was
drawn from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Connection, Row, text

# ---- a run's inputs ---------------------------------------------------------------------------


def comparison_run(conn: Connection, run_id: int) -> Mapping[str, Any] | None:
    """The ``calibration_runs`` row, or None."""
    return cast("Mapping[str, Any] | None", conn.execute(
        text("SELECT * FROM calibration_runs WHERE id = :i"), {"i": run_id}).mappings().first())


def run_targets(conn: Connection, run_id: int) -> Sequence[Row[Any]]:
    """The run's targets (claim_id, score, neighbour_ids), by claim id."""
    return conn.execute(text("SELECT claim_id, score, neighbour_ids FROM calibrated_results "
                             "WHERE run_id = :r ORDER BY claim_id"), {"r": run_id}).all()


def label_set_splits(conn: Connection, label_set_id: int) -> Sequence[Row[Any]]:
    """The distinct (dataset, split) pairs of a label set's claims."""
    return conn.execute(text(
        """SELECT DISTINCT c.dataset, c.split FROM label_set_items i JOIN claims c ON c.id = i.claim_id
           WHERE i.label_set_id = :ls"""), {"ls": label_set_id}).all()


def split_claim_ids(conn: Connection, dataset: str, split: str) -> list[int]:
    """Every claim of one split of a dataset."""
    return list(conn.execute(text("SELECT id FROM claims WHERE dataset = :d AND split = :s"),
                             {"d": dataset, "s": split}).scalars().all())


# ---- comparisons ------------------------------------------------------------------------------


def lock_comparison(conn: Connection, run_id: int, params_hash: str) -> None:
    """Serialise, until the transaction ends, the comparisons of one run with these options."""
    conn.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
                 {"k": f"compare:{run_id}:{params_hash}"})


def find_comparison(conn: Connection, run_id: int, params_hash: str) -> int | None:
    """The stored comparison of this run with these options (by their hash), if any."""
    return conn.execute(text("SELECT id FROM method_comparisons WHERE run_id = :r AND params_hash = :h"),
                        {"r": run_id, "h": params_hash}).scalar()


def store_comparison(conn: Connection, run_id: int, params_json: str, params_hash: str, code_rev: str,
                     flow_run_id: str | None, rows: Sequence[Mapping[str, Any]]) -> int:
    """Insert a comparison head and its rows (family, method, k, metric, cls, value); return its id."""
    cid: int = conn.execute(
        text("""INSERT INTO method_comparisons (run_id, params, params_hash, code_rev, flow_run_id)
                VALUES (:r, CAST(:p AS jsonb), :h, :cr, :fr) RETURNING id"""),
        {"r": run_id, "p": params_json, "h": params_hash, "cr": code_rev, "fr": flow_run_id},
    ).scalar_one()
    conn.execute(
        text("""INSERT INTO method_comparison (comparison_id, run_id, family, method, k, metric, class, value)
                VALUES (:c, :r, :family, :method, :k, :metric, :cls, :value)"""),
        [{"c": cid, "r": run_id} | dict(r) for r in rows],
    )
    return cid


def latest_comparisons(conn: Connection, run_ids: Sequence[int], version: int) -> list[int]:
    """The newest comparison of each run computed by this ``version``, sorted."""
    return sorted(conn.execute(
        text("""SELECT max(id) FROM method_comparisons WHERE run_id = ANY(:r)
                AND (params->>'version')::int = :v GROUP BY run_id"""),
        {"r": [int(i) for i in run_ids], "v": version}).scalars())


def comparison_rows(conn: Connection, comparison_ids: Sequence[int]) -> list[dict[str, Any]]:
    """Stored rows of the given comparisons, sorted by run, comparison, family, method, k, metric, class."""
    return [dict(r) for r in conn.execute(
        text("""SELECT m.comparison_id, m.run_id, m.family, m.method, m.k, m.metric, m.class, m.value
                FROM method_comparison m WHERE m.comparison_id = ANY(:c)
                ORDER BY m.run_id, m.comparison_id, m.family, m.method, m.k NULLS FIRST, m.metric,
                         m.class"""),
        {"c": [int(i) for i in comparison_ids]}).mappings()]


def comparison_heads(conn: Connection, comparison_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """The comparisons' head rows keyed by id (params with ``info``)."""
    return {r["id"]: dict(r) for r in conn.execute(
        text("SELECT id, run_id, params, code_rev FROM method_comparisons WHERE id = ANY(:c) ORDER BY id"),
        {"c": [int(i) for i in comparison_ids]}).mappings()}
