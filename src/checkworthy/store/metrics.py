"""A calibration run's evaluation metrics (``evaluation_metrics``): stored once per run, read back
keyed by (method, metric, class)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection, text


def store_metrics(conn: Connection, run_id: int, rows: Iterable[tuple[str, str, str, float]]) -> None:
    """Insert metric rows for a run (once: a run's metrics are never rewritten)."""
    payload = [
        {"r": run_id, "m": m, "n": n, "c": c, "v": None if v != v else float(v)}
        for m, n, c, v in rows
    ]
    conn.execute(
        text(
            "INSERT INTO evaluation_metrics (run_id, method, metric, class, value) "
            "VALUES (:r, :m, :n, :c, :v) ON CONFLICT DO NOTHING"
        ),
        payload,
    )


def load_metrics(conn: Connection, run_id: int) -> dict[tuple[str, str, str], float]:
    """A run's metrics keyed by (method, metric, class)."""
    rows = conn.execute(
        text("SELECT method, metric, class, value FROM evaluation_metrics WHERE run_id = :r"),
        {"r": run_id},
    ).all()
    return {(r.method, r.metric, r.class_ if hasattr(r, "class_") else r[2]): r.value for r in rows}


def metrics_summary(conn: Connection, run_ids: Sequence[int]) -> dict[str, Any]:
    """The runs' headline metrics as DVC tracks them: target -> "spec|score kind" -> "k=K" -> values."""
    runs = conn.execute(
        text("""SELECT r.id, r.target, r.k, r.score_kind, m.spec FROM calibration_runs r
                JOIN models m ON m.id = r.model_id WHERE r.id = ANY(:i) ORDER BY r.id"""),
        {"i": [int(i) for i in run_ids]}).all()
    summary: dict[str, Any] = {}
    for r in runs:
        m = load_metrics(conn, r.id)
        entry = {f"{method}_weighted_f1": m.get((method, "weighted_f1", "all"))
                 for method in ("baseline", "knn", "nnppi")}
        entry["nnppi_coverage"] = m.get(("nnppi", "coverage", "all"))
        entry["run_id"] = r.id
        summary.setdefault(r.target, {}).setdefault(f"{r.spec}|{r.score_kind}", {})[f"k={r.k}"] = entry
    return summary
