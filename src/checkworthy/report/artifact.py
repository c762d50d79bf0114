"""The report in the Prefect UI: a link artifact to report.html, the headline as a Markdown artifact
and as a table artifact; and a run's drift line as a Markdown artifact. Published only from inside
a flow or task run."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from checkworthy.report.formatting import slug


def publish_artifact(report_dir: Path, name: str, summary: str = "",
                     table: Sequence[Mapping[str, str]] = ()) -> str | None:
    """Inside a Prefect flow or task run: a link artifact to report.html, ``summary`` (Markdown: the
    headline table and its notes) and ``table`` (the headline's rows) as artifacts of the run.

    Outside a run this is a no-op (returns None), so the CLI and tests call it freely. The link
    is ``$CHECKWORTHY_REPORTS_URL/<name>/report.html`` when that is set (a web server in front
    of reports/), else a file:// URI. Returns the link.
    """
    from prefect.context import FlowRunContext, TaskRunContext  # start-up: Prefect, only for reports

    if FlowRunContext.get() is None and TaskRunContext.get() is None:
        return None
    from prefect.artifacts import (  # start-up: as above
        create_link_artifact,
        create_markdown_artifact,
        create_table_artifact,
    )

    base = os.environ.get("CHECKWORTHY_REPORTS_URL")
    page = report_dir / "report.html"
    link = f"{base.rstrip('/')}/{name}/report.html" if base else page.resolve().as_uri()
    key = "report-" + (slug(name)[:40] or "unnamed")
    create_link_artifact(link=link, link_text=f"checkworthy report {name}", key=key,
                         description=f"checkworthy report {name}: report.html (Markdown: report.md)")
    if summary:
        create_markdown_artifact(markdown=summary, key=key + "-summary",
                                 description=f"checkworthy report {name}: the headline")
    if table:
        create_table_artifact(table=[dict(row) for row in table], key=key + "-headline",
                              description=f"checkworthy report {name}: the headline's rows")
    return link


def publish_drift(run_id: int, line: str) -> str | None:
    """Inside a Prefect flow or task run: run ``run_id``'s drift line (:func:`checkworthy.report.
    drift.drift_line`) as a Markdown artifact keyed ``drift-run-<id>``; returns the key. Outside a
    run a no-op (None)."""
    from prefect.context import FlowRunContext, TaskRunContext  # start-up: as publish_artifact

    if FlowRunContext.get() is None and TaskRunContext.get() is None:
        return None
    from prefect.artifacts import create_markdown_artifact  # start-up: as above

    key = f"drift-run-{run_id}"
    create_markdown_artifact(markdown=line, key=key, description=f"checkworthy run {run_id}: drift")
    return key
