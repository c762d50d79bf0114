"""A report on disk and in the store: analyse, render, write ``reports/<name>/`` and store it;
re-render a stored report.

The directory holds report.md, report.html (figures embedded), figures/*.png, metrics.json
for ``dvc metrics show`` and plots/*/ CSVs for ``dvc plots show``. The stored row pins the
analyses and comparisons it rendered, so ``checkworthy report <name>`` re-renders exactly the
same Markdown later.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from checkworthy.data.outputs import write_tree
from checkworthy.report.artifact import publish_artifact
from checkworthy.report.document import to_html
from checkworthy.report.render import Built, build
from checkworthy.runs.comparisons import latest_comparisons
from checkworthy.store.reports import store_report


def write_report_dir(built: Built, out: Path) -> Path:
    """Make ``out`` hold report.md, report.html, figures/, plots/ and metrics.json, all or none
    (:func:`checkworthy.data.outputs.write_tree`: no stale or half-written file survives); return
    report.md."""
    images = {path: draw() for path, draw in sorted(built.figures.items())}
    files = dict(images)
    files |= {path: body.encode("utf-8") for path, body in sorted(built.plot_files.items())}
    files["metrics.json"] = (json.dumps(built.metrics, indent=2, sort_keys=True) + "\n").encode("utf-8")
    files["report.html"] = to_html(built.doc, images).encode("utf-8")
    files["report.md"] = built.markdown.encode("utf-8")
    write_tree(out, files)
    return out / "report.md"


def save_report(conn: Connection, name: str, run_ids: Sequence[int], directory: Path,
                analysis_ids: Sequence[int], flow_run_id: str | None = None) -> Path:
    """Render the runs' stored results and ``analysis_ids`` (stored by
    :func:`checkworthy.runs.analyses.ensure_analyses`) into ``directory/<name>/``; store the
    Markdown; publish the artifacts.

    Returns the path of report.md. The report row pins the analyses it rendered, so
    ``checkworthy report <name>`` re-renders exactly the same Markdown later.
    """
    comparison_ids = latest_comparisons(conn, run_ids) or None  # pinned: computed by `checkworthy compare`
    title = f"checkworthy report: {name}"
    built = build(conn, run_ids, title, analysis_ids, comparison_ids)
    path = write_report_dir(built, directory / name)
    store_report(conn, name, run_ids, built.markdown, str(path), flow_run_id, analysis_ids, comparison_ids)
    publish_artifact(path.parent, name, built.headline.markdown(title), built.headline.records())
    return path


def rerender(conn: Connection, row: Mapping[str, Any]) -> Built:
    """Re-render a stored report (a ``reports`` row) from its runs and pinned analyses."""
    return build(conn, row["run_ids"], f"checkworthy report: {row['name']}", row.get("analysis_ids"),
                 row.get("comparison_ids"))
