"""``checkworthy``: the command line (run the main job, calibrate your own scores, report)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from checkworthy.config import REPORTS_DIR, load_params, quiet_offline_env
from checkworthy.errors import DataError


def _engine():
    from checkworthy.db import get_engine

    return get_engine()


def cmd_run(args: argparse.Namespace) -> int:
    """The main job: both datasets, every k, the table beside the paper, a Markdown report."""
    from checkworthy import report
    from checkworthy.pipeline import run_pipeline
    from checkworthy.scorers.registry import make_scorer

    t0 = time.monotonic()
    params = load_params(Path(args.params))
    if args.limit:
        params["limit"] = args.limit
    engine = _engine()
    scorers = [make_scorer(m["spec"], **{k: v for k, v in m.items() if k != "spec"},
                           **params.get("scoring", {}))
               for m in params["models"]]
    result = run_pipeline(engine, params, scorers, echo=print)
    run_ids = sorted(result.runs.values())
    with engine.begin() as conn:
        rows = report.table_rows(conn, run_ids)
        print()
        print(report.console_table(rows))
        name = args.name or time.strftime("run-%Y%m%d-%H%M%S")
        path = report.save_report(conn, name, run_ids, REPORTS_DIR)
    print(f"\nreport: {path}\nwall time: {time.monotonic() - t0:.0f} s")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Calibrate U's scores against L's labelled scores; write OUT; print metrics if U has labels."""
    from checkworthy.byo import calibrate_files, read_scored_csv

    # validate both files before the database is even started
    read_scored_csv(Path(args.labeled), label_required=True)
    read_scored_csv(Path(args.unlabeled), label_required=False)
    outcome = calibrate_files(_engine(), Path(args.labeled), Path(args.unlabeled), args.k,
                              Path(args.out), alpha=args.alpha, threshold=args.threshold)
    print(f"calibrated {outcome.n_rows} claims (run {outcome.run_id}) -> {args.out}")
    if outcome.metrics:
        print(f"{'method':<10} {'weighted F1':>12} {'F1 c0':>7} {'F1 c1':>7} {'accuracy':>9}")
        for method, m in outcome.metrics.items():
            print(f"{method:<10} {m['weighted_f1']:>12.3f} {m['f1_0']:>7.3f} {m['f1_1']:>7.3f} "
                  f"{m['accuracy']:>9.3f}")
        cov = outcome.metrics["nnppi"]
        print(f"NN-PPI interval coverage: class 0 {cov['coverage_0']:.3f}, class 1 "
              f"{cov['coverage_1']:.3f}, overall {cov['coverage_all']:.3f}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Re-render a stored report (by report name or id) from the store."""
    from sqlalchemy import text

    from checkworthy import report

    engine = _engine()
    with engine.begin() as conn:
        row = conn.execute(
            text("SELECT name, run_ids FROM reports WHERE name = :n OR CAST(id AS text) = :n "
                 "ORDER BY id DESC LIMIT 1"), {"n": args.run}).first()
        if row is None:
            print(f"no stored report named {args.run!r}", file=sys.stderr)
            return 2
        print(report.markdown(conn, row.run_ids, title=f"checkworthy report: {row.name}"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="checkworthy", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="the main job: score, embed, calibrate, report")
    r.add_argument("--params", default=str(Path("params.yaml")))
    r.add_argument("--name", help="report name (default: run-<timestamp>)")
    r.add_argument("--limit", type=int, help=argparse.SUPPRESS)
    r.set_defaults(func=cmd_run)

    c = sub.add_parser("calibrate", help="calibrate your own scores with NN-PPI")
    c.add_argument("--labeled", required=True, help="CSV with id,text,score,label")
    c.add_argument("--unlabeled", required=True, help="CSV with id,text,score[,label]")
    c.add_argument("--k", type=int, required=True)
    c.add_argument("--alpha", type=float, default=0.05)
    c.add_argument("--threshold", type=float, default=0.5)
    c.add_argument("--out", required=True)
    c.set_defaults(func=cmd_calibrate)

    rep = sub.add_parser("report", help="re-render a stored report")
    rep.add_argument("run", help="report name or id")
    rep.set_defaults(func=cmd_report)
    return p


def main(argv: list[str] | None = None) -> int:
    quiet_offline_env()
    args = build_parser().parse_args(argv)
    if getattr(args, "k", 1) is not None and getattr(args, "k", 1) < 1:
        print("error: --k must be at least 1", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
