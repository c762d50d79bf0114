"""``checkworthy run``: the main job (both datasets, every k, the table beside the paper, a report)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from checkworthy.cli.checks import positive_int
from checkworthy.config import PARAMS_FILE, REPORTS_DIR


def register(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser("run", help="the main job: score, embed, calibrate, report")
    r.add_argument("--params", default=str(PARAMS_FILE), help="params file (default: $CHECKWORTHY_PARAMS, "
                   "else params.yaml of the project)")
    r.add_argument("--name", help="report name (default: run-<timestamp>)")
    r.add_argument("--reports-dir", default=str(REPORTS_DIR))
    r.add_argument("--limit", type=positive_int, help=argparse.SUPPRESS)
    r.add_argument("--commit-data", action="store_true",
                   help="snapshot data/ with dvc add + dvc push first (default: record data.dvc as is)")
    r.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    """The main job: both datasets, every k, the table beside the paper, a Markdown report."""
    from checkworthy.flows.pipeline import ReportOptions, pipeline_flow
    from checkworthy.report.console import console_table, table_rows
    from checkworthy.runs.flow_types import FlowContext
    from checkworthy.settings import load_settings
    from checkworthy.store.engine import get_engine

    t0 = time.monotonic()
    load_settings(Path(args.params))  # a params file the flow would refuse is refused here, in one line
    # the Prefect pipeline flow (ephemeral API unless PREFECT_API_URL is set); its last task writes
    # the report, so the flow run carries the report's artifacts
    result = pipeline_flow(ctx=FlowContext(params_path=str(Path(args.params).resolve())), limit=args.limit,
                           commit_data=args.commit_data, echo=True,
                           report=ReportOptions(name=args.name or time.strftime("run-%Y%m%d-%H%M%S"),
                                                folder=str(Path(args.reports_dir).resolve())))
    with get_engine().connect() as conn:
        print()
        print(console_table(table_rows(conn, sorted(result.run_ids))))
    print(f"\nreport: {result.report or 'none (no calibration run)'}\n"
          f"wall time: {time.monotonic() - t0:.0f} s")
    return 0
