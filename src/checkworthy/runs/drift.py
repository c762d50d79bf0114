"""A run's drift figure: how far its claims lie from the labelled set, against L's own spread
(:mod:`checkworthy.method.drift`), stored in the run's ``params->'drift'`` when it completes."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from checkworthy.method.drift import check_drift, fit_radius
from checkworthy.store.calibration_runs import nearest_distances
from checkworthy.store.knn import load_pool, nearest_labelled
from checkworthy.store.rows import ScoreKey


def drift_params(conn: Connection, run_id: int, label_set_id: int, key: ScoreKey, embed_model: str
                 ) -> dict[str, Any]:
    """``{"drift": ...}`` for a run whose results are stored: L's leave-one-out nearest distances
    (the same SQL kNN, a claim never its own or its text's neighbour) give the radius."""
    ids = load_pool(conn, label_set_id, key, embed_model).ids.tolist()
    loo = nearest_labelled(conn, label_set_id, ids, 1, key, leave_one_out=True, embed_model=embed_model)
    radius = fit_radius(loo.distances[:, 0])
    return {"drift": check_drift(nearest_distances(conn, run_id), radius).as_dict()}
