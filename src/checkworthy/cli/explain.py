"""``checkworthy explain``: why a claim got its decision, from the audit views (docs/audit.md)."""

from __future__ import annotations

import argparse
import sys

from checkworthy.cli.checks import claim_ref, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    ex = sub.add_parser("explain", help="why a claim got its decision (audit lineage)")
    ex.add_argument("claim", type=claim_ref,
                    help="the claim's source id (as in the input file), or id:<claim id>")
    ex.add_argument("--dataset", help="only claims of this dataset (source ids may repeat across datasets)")
    ex.add_argument("--run", type=positive_int,
                    help="only this calibration run (default: every run, newest first)")
    ex.set_defaults(func=cmd_explain)


def cmd_explain(args: argparse.Namespace) -> int:
    """Every decision on the claim, newest first; 2 when no claim matches, 1 when none was decided."""
    from checkworthy.report.explanation import format_decision
    from checkworthy.store.audit import explain, find_claims
    from checkworthy.store.engine import get_engine

    with get_engine().connect() as conn:
        ids = find_claims(conn, args.claim, args.dataset)
        if not ids:
            print(f"no claim {args.claim!r}" + (f" in dataset {args.dataset!r}" if args.dataset else ""),
                  file=sys.stderr)
            return 2
        decisions = explain(conn, ids, args.run)
    if not decisions:
        print(f"claim {args.claim!r} has no calibrated decision"
              + (f" in run {args.run}" if args.run else ""), file=sys.stderr)
        return 1
    print("\n\n".join(format_decision(d) for d in decisions))
    return 0
