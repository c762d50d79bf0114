"""A report on disk and in the store: analyse, render, write ``reports/<name>/`` and store it;
re-render a stored report.

The directory holds report.md, report.html (figures embedded), figures/*.png, metrics.json
for ``dvc metrics show`` and plots/*/ CSVs for ``dvc plots show``. The stored row pins the
analyses and comparisons it rendered, so ``checkworthy report <name>`` re-renders exactly the
same Markdown later.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from checkworthy.report.artifact import publish_artifact
from checkworthy.report.comparison import latest_comparisons
from checkworthy.report.document import to_html
from checkworthy.report.evaluation import AnalysisOptions, ensure_analyses
from checkworthy.report.render import Built, build
from checkworthy.store.reports import store_report


def write_report_dir(built: Built, out: Path) -> Path:
    """Write report.md, report.html, figures/, plots/ and metrics.json under ``out``; return report.md.

    ``figures/`` and ``plots/`` are generated: they are emptied first so no stale file survives.
    """
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("figures", "plots"):
        shutil.rmtree(out / sub, ignore_errors=True)
    images = {path: draw() for path, draw in sorted(built.figures.items())}
    for path, data in images.items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_bytes(data)
    for path, body in sorted(built.plot_files.items()):
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(body, encoding="utf-8")
    (out / "metrics.json").write_text(json.dumps(built.metrics, indent=2, sort_keys=True) + "\n",
                                      encoding="utf-8")
    (out / "report.html").write_text(to_html(built.doc, images), encoding="utf-8")
    md = out / "report.md"
    md.write_text(built.markdown, encoding="utf-8")
    return md


def save_report(conn: Connection, name: str, run_ids: Sequence[int], directory: Path,
                flow_run_id: str | None = None, *, options: AnalysisOptions | None = None) -> Path:
    """Analyse, render and write ``directory/<name>/``; store the Markdown; publish the artifacts.

    Returns the path of report.md. The report row pins the analyses it rendered, so
    ``checkworthy report <name>`` re-renders exactly the same Markdown later.
    """
    analysis_ids = ensure_analyses(conn, run_ids, options, flow_run_id)
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
