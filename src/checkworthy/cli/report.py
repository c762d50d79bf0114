"""``checkworthy report``: re-render a stored report (by name or id) from the store, or report
given runs (``run:<ids>``).

The Markdown (or, with ``--html``, the self-contained HTML page) goes to stdout, byte for byte
what the stored report holds; ``--out DIR`` writes the whole report directory instead
(report.md, report.html, figures/, plots/, metrics.json) under ``DIR/<name>/``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from checkworthy.cli.checks import output_dir, run_ids
from checkworthy.config import REPORTS_DIR
from checkworthy.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    rep = sub.add_parser("report", help="re-render a stored report")
    rep.add_argument("run", help="report name or id, or run:<calibration run id>[,<id>...]")
    rep.add_argument("--html", action="store_true", help="print the self-contained HTML page instead")
    rep.add_argument("--out", help="write the report directory (md, html, figures, plots, metrics.json) "
                                   "under OUT/<name>/ instead of printing")
    rep.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    """Re-render a stored report, or report given runs: print it or write its directory."""
    from checkworthy.report.files import rerender, save_report, write_report_dir
    from checkworthy.runs.analyses import ensure_analyses
    from checkworthy.store.calibration_runs import run_statuses
    from checkworthy.store.engine import get_engine
    from checkworthy.store.reports import stored_report

    # where the report directory goes: --out, or reports/ for a first report of given runs
    where = args.out or (str(REPORTS_DIR) if args.run.startswith("run:") else None)
    problem = output_dir("--out" if args.out else "reports folder", where) if where else None
    if problem:
        raise UsageError(problem)
    ids = run_ids(args.run, "run:") if args.run.startswith("run:") else None
    with get_engine().begin() as conn:
        if ids is not None:
            statuses = run_statuses(conn, ids)
            unfinished = [i for i in ids if statuses.get(i) != "complete"]
            if unfinished:  # failed, abandoned or unknown runs have no results to report
                i = unfinished[0]
                state = f"is {statuses[i]}" if i in statuses else "does not exist"
                raise UsageError(f"{args.run}: run {i} {state}; a report takes complete runs only")
            name = "runs-" + "-".join(map(str, ids))
            row = stored_report(conn, name)
            if row is None and ids:  # first report of these runs: analyse and store it
                save_report(conn, name, ids, Path(args.out or REPORTS_DIR), ensure_analyses(conn, ids))
                row = stored_report(conn, name)
        else:
            row = stored_report(conn, args.run)
        if row is None:
            print(f"no stored report named {args.run!r}", file=sys.stderr)
            return 2
        built = rerender(conn, row)
        if args.out:
            path = write_report_dir(built, Path(args.out) / row["name"])
            print(f"report: {path}")
        else:
            sys.stdout.write(built.html() if args.html else built.markdown)
    return 0
