"""The report in the Prefect UI: a link artifact to report.html and a summary artifact, published
only from inside a flow or task run."""

from __future__ import annotations

import os
from pathlib import Path

from checkworthy.report.document import Document, Table, to_markdown
from checkworthy.report.formatting import slug


def summary_markdown(doc: Document, name: str) -> str:
    """The report's summary table (its first table) as Markdown, for the artifact."""
    table = next(b for b in doc.blocks if isinstance(b, Table))
    return to_markdown(Document(f"checkworthy report: {name}", [table])).strip() + "\n"


def publish_artifact(report_dir: Path, name: str, summary: str = "") -> str | None:
    """Inside a Prefect flow or task run: a link artifact to report.html and a summary artifact.

    Outside a run this is a no-op (returns None), so the CLI and tests call it freely. The link
    is ``$CHECKWORTHY_REPORTS_URL/<name>/report.html`` when that is set (a web server in front
    of reports/), else a file:// URI. Returns the link.
    """
    from prefect.context import FlowRunContext, TaskRunContext  # start-up: Prefect, only for reports

    if FlowRunContext.get() is None and TaskRunContext.get() is None:
        return None
    from prefect.artifacts import create_link_artifact, create_markdown_artifact  # start-up: as above

    base = os.environ.get("CHECKWORTHY_REPORTS_URL")
    page = report_dir / "report.html"
    link = f"{base.rstrip('/')}/{name}/report.html" if base else page.resolve().as_uri()
    key = "report-" + (slug(name)[:40] or "unnamed")
    create_link_artifact(link=link, link_text=f"checkworthy report {name}", key=key,
                         description=f"checkworthy report {name}: report.html (Markdown: report.md)")
    if summary:
        create_markdown_artifact(markdown=summary, key=key + "-summary",
                                 description=f"checkworthy report {name}: weighted F1 per run")
    return link
