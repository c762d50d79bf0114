"""Turn a calibration's arrays into metric rows (pure) and store them (thin adapter)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numpy.typing import ArrayLike
from sqlalchemy import Connection, text

from checkworthy.method import metrics
from checkworthy.method.nnppi import NNPPIResult

METHODS = ("baseline", "knn", "nnppi")


def metric_rows(y: ArrayLike, res: NNPPIResult) -> Iterator[tuple[str, str, str, float]]:
    """(method, metric, class, value) rows for the three methods on gold labels ``y``.

    ``class`` is '0', '1' or 'all'. Besides the classification figures: mean score by gold
    class (raw score for the baseline, theta for NN-PPI, kNN mean for KNN) and, for NN-PPI,
    interval coverage per class and the mean interval width (overall and per gold class).
    """
    y = np.asarray(y, dtype=int)
    decisions = {"baseline": res.baseline_decision, "knn": res.knn_decision, "nnppi": res.decision}
    values = {"baseline": res.score, "knn": res.knn_mean, "nnppi": res.theta}
    for method in METHODS:
        for name, value in metrics.classification_report(y, decisions[method]).items():
            base, _, cls = name.rpartition("_")
            if cls in ("0", "1"):
                yield method, base, cls, value
            else:
                yield method, name, "all", value
        for cls, value in metrics.mean_score_by_class(y, values[method]).items():
            yield method, "mean_score", str(cls), value
    for cls, value in metrics.interval_coverage(y, res.ci_low, res.ci_high).items():
        yield "nnppi", "coverage", cls, value
    width = res.ci_high - res.ci_low
    yield "nnppi", "mean_width", "all", float(np.mean(width))
    for cls in metrics.CLASSES:  # per gold class: are the intervals wider where they miss more?
        in_cls = y == cls
        mean = float(np.mean(width[in_cls])) if np.any(in_cls) else float("nan")
        yield "nnppi", "mean_width", str(cls), mean
    yield "nnppi", "n", "all", float(len(y))


def store_metrics(conn: Connection, run_id: int, rows: Iterator[tuple[str, str, str, float]]) -> None:
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
