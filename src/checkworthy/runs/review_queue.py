"""The review queue's two ends: a finished calibration queues the claims its decide-or-review rule
sends to a person; ``checkworthy review export`` writes the top of the open queue as Label Studio
tasks or CSV, and ``checkworthy review import`` turns the answers into a label file that goes
through ``labels add`` (which closes the entries it answers).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Connection

from checkworthy.data import label_studio
from checkworthy.data.label_files import REQUIRED
from checkworthy.method.selective import ReviewRule, review_priority
from checkworthy.store import review_queue as queue
from checkworthy.store.calibration_runs import result_values

#: the CSV export's columns: a label file's (fill ``label``) and what the reviewer should know
CSV_COLUMNS = (*REQUIRED, "text", "theta", "priority", "reason", "run_id", "target")


def queue_run(conn: Connection, run_id: int, review: Mapping[str, Any]) -> int:
    """Append the run's claims that its rule (``params->'review'``) sends to a person, with their
    priority and reason; return how many. Called while the run is running."""
    rule = ReviewRule.from_dict(review)
    rows = result_values(conn, run_id)
    theta = np.array([r.theta for r in rows], dtype=float)
    flagged = rule.review(theta) == 1
    ids = [r.claim_id for r, f in zip(rows, flagged) if f]
    theta = theta[flagged]
    return queue.insert_entries(conn, run_id, ids, theta, review_priority(theta, rule.threshold),
                                [rule.reason(float(t)) for t in theta])


def export_rows(conn: Connection, limit: int | None, target: str | None) -> list[Mapping[str, Any]]:
    """The top of the open queue; a ``target`` that never had a queued claim is refused."""
    if target is not None and target not in queue.targets_with_entries(conn):
        known = ", ".join(queue.targets_with_entries(conn)) or "none yet"
        raise ValueError(f"--target {target!r}: no claim of it was ever queued (targets: {known})")
    return queue.open_entries(conn, limit, target)


def write_export(rows: Sequence[Mapping[str, Any]], out: Path, fmt: str) -> None:
    """Write the entries as Label Studio tasks (JSON) or as a CSV to fill in (``label`` empty)."""
    tmp = out.with_name(out.name + ".tmp")
    if fmt == "label-studio":
        tmp.write_text(json.dumps(label_studio.tasks(rows), indent=1, ensure_ascii=False) + "\n",
                       encoding="utf-8")
    else:
        with tmp.open("w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, CSV_COLUMNS)
            w.writeheader()
            for r in rows:
                w.writerow({"id": r["source_id"], "dataset": r["dataset"], "label": "", "text": r["text"],
                            "theta": f"{r['theta']:.6f}", "priority": f"{r['priority']:.6f}",
                            "reason": r["reason"], "run_id": r["run_id"], "target": r["target"]})
    tmp.replace(out)


def answers_as_label_file(path: Path, out: Path) -> int:
    """Write the answers in ``path`` (a Label Studio JSON export, or a CSV with ``id,dataset,label``)
    as a label file at ``out``; return how many rows. Bad answers raise
    :class:`~checkworthy.errors.DataError` naming the file, task or line, and field."""
    rows = label_studio.read_answers(path)
    with out.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow((*REQUIRED, "source"))
        w.writerows((a.id, a.dataset, a.label, a.source) for a in rows)
    return len(rows)
