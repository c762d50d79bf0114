"""The validation gate of a stored label set: read it, run the suite, store the verdict.

A label set whose verdict fails is not used for calibration (the previous one stays in force).
A lineage is held to params.yaml's bounds, widened to admit its own first version: a team's
``predict`` file of 40 labels, 15% check-worthy, was accepted as its lineage's start, so the
labels the team adds to it are not refused for the size or balance it began with
(:func:`lineage_bounds`); the main job's sampled sets start within the bounds and keep them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy import Connection, Engine

from checkworthy.data.validation import Bounds, build_frame, run_suite
from checkworthy.store import validations
from checkworthy.store.lineages import label_set_name, version_log


@dataclass
class Verdict:
    """The stored verdict on a label set: may it be used for calibration?"""

    validation_run_id: int
    success: bool
    failures: list[str]


def validate_label_set(
    engine: Engine, label_set_id: int, bounds: Bounds | None = None, data_version_id: int | None = None
) -> Verdict:
    """Validate a stored label set against the claims its lineage calibrates; store the verdict."""
    with engine.begin() as conn:
        name = label_set_name(conn, label_set_id)
        bounds = lineage_bounds(conn, name, bounds or Bounds())
        rows = validations.label_set_rows(conn, label_set_id)
        outcome = run_suite(build_frame(rows, validations.target_texts(conn, name)), bounds)
        vid = validations.store_outcome(conn, outcome, name, label_set_id, None, data_version_id)
        failed = validations.failed_checks(conn, vid)
        ok = validations.run_success(conn, vid)
    return Verdict(vid, ok, failed)


def lineage_bounds(conn: Connection, name: str, bounds: Bounds) -> Bounds:
    """``bounds`` widened to admit lineage ``name``'s first version (its size and share of label
    1); unchanged for a lineage without versions."""
    log = version_log(conn, name)
    if not log:
        return bounds
    n, rate = log[0]["n_items"], log[0]["n_positive"] / max(log[0]["n_items"], 1)
    return replace(bounds, min_rows=min(bounds.min_rows, n),
                   min_positive_rate=min(bounds.min_positive_rate, rate),
                   max_positive_rate=max(bounds.max_positive_rate, rate))
