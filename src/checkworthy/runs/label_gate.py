"""The validation gate of a stored label set: read it, run the suite, store the verdict.

A label set whose verdict fails is not used for calibration (the previous one stays in force).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine

from checkworthy.data.validation import Bounds, build_frame, run_suite
from checkworthy.store import validations
from checkworthy.store.lineages import label_set_name


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
    bounds = bounds or Bounds()
    with engine.begin() as conn:
        name = label_set_name(conn, label_set_id)
        rows = validations.label_set_rows(conn, label_set_id)
        outcome = run_suite(build_frame(rows, validations.target_texts(conn, name)), bounds)
        vid = validations.store_outcome(conn, outcome, name, label_set_id, None, data_version_id)
        failed = validations.failed_checks(conn, vid)
        ok = validations.run_success(conn, vid)
    return Verdict(vid, ok, failed)
