"""``checkworthy compare``: every interval, correction and calibrator on stored runs' inputs,
computed once per run (a stored comparison with the same options is reused), printed, and with
``--report NAME`` saved as a report whose "Methods compared" section shows them."""

from __future__ import annotations

import argparse
from pathlib import Path

from checkworthy.cli.checks import run_ids
from checkworthy.config import REPORTS_DIR
from checkworthy.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    cmp_ = sub.add_parser("compare", help="every interval, correction and calibrator on stored runs")
    cmp_.add_argument("--run", required=True, help="calibration run id(s), comma-separated")
    cmp_.add_argument("--report", help="also save a report of these runs under this name")
    cmp_.add_argument("--reports-dir", default=str(REPORTS_DIR))
    cmp_.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    """Every interval, correction and calibrator on stored runs' inputs: compute, store, print."""
    from checkworthy.report.console import comparison_tables
    from checkworthy.runs import comparisons
    from checkworthy.store.comparisons import comparison_heads, comparison_rows
    from checkworthy.store.engine import get_engine

    ids = run_ids(args.run)
    engine = get_engine()
    cids = []
    for rid in ids:
        try:
            with engine.begin() as conn:
                cids.append(comparisons.ensure_comparison(conn, rid))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    with engine.connect() as conn:
        heads = comparison_heads(conn, cids)
        for cid in cids:
            info = heads[cid]["params"].get("info", {})
            cv = info.get("cv_choice", {})
            print(comparison_tables(
                comparison_rows(conn, [cid]),
                f"run {heads[cid]['run_id']} (comparison {cid}, {info.get('n_targets')} targets, "
                f"|L| {info.get('n_labelled')}): CV chose {cv.get('label')} at k={cv.get('k')}"))
            print()
    if args.report:
        from checkworthy.report.files import save_report
        from checkworthy.runs.analyses import ensure_analyses

        with engine.begin() as conn:
            path = save_report(conn, args.report, ids, Path(args.reports_dir), ensure_analyses(conn, ids))
        print(f"report: {path}")
    return 0
