"""``checkworthy evaluate``: every predictor on every held-out event (ClaimBuster 2016 debates,
CLEF 2024 dev and dev-test) through predict's path; writes held-out.md and .json."""

from __future__ import annotations

import argparse
from pathlib import Path

from checkworthy.cli.checks import output_dir, positive_int
from checkworthy.config import REPORTS_DIR
from checkworthy.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("evaluate", help="every predictor on every held-out event (ClaimBuster 2016 debates, "
                                         "CLEF 2024 dev and dev-test) through predict's path")
    ev.add_argument("--models", help="SPEC=SCORE_KIND[,...] (default: the LoRA ensemble, the MiniLM and "
                                     "Gemma LoRA, SetFit and logistic classifiers, and Gemma's token "
                                     "probability and few-shot P(Yes))")
    ev.add_argument("--out", default=str(REPORTS_DIR / "held-out"), help="folder for held-out.md and .json")
    ev.add_argument("--limit", type=positive_int, help=argparse.SUPPRESS)
    ev.set_defaults(func=cmd_evaluate)


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Every predictor on every held-out event through predict's path; write held-out.md."""
    from checkworthy.report.held_out import summary, write
    from checkworthy.runs.held_out import DEFAULT_PREDICTORS, evaluate_held_out
    from checkworthy.runs.predict import Recommended
    from checkworthy.settings import load_settings
    from checkworthy.store.engine import get_engine

    predictors = DEFAULT_PREDICTORS
    if args.models:
        predictors = tuple(tuple(m.strip().rsplit("=", 1)) for m in args.models.split(",") if m.strip())
        if any(len(p) != 2 or not all(p) for p in predictors):
            raise UsageError(f"--models: expected SPEC=SCORE_KIND[,...], got {args.models!r}")
    problem = output_dir("--out", args.out)
    if problem:
        raise UsageError(problem)
    settings = load_settings()
    try:
        measured, chosen_by, events = evaluate_held_out(get_engine(), predictors, settings=settings,
                                                        limit=args.limit, echo=print)
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from None
    rec = Recommended.of(settings.predict)
    described = (f"{rec.model} {rec.score_kind}, correction {rec.correction}, interval {rec.interval}, "
                 f"k = {rec.k}, prior {rec.prior}")
    path = write(Path(args.out), measured, chosen_by, events, described)
    print(f"\n{'predictor':<36} {'method':<26} {'F1 c1':>6} {'min':>6} {'max':>6} {'wF1':>6} {'AUC':>6}")
    for r in summary(measured):
        print(f"{r['predictor']:<36} {r['method']:<26} {r['f1_1']:>6.3f} {r['f1_1_min']:>6.3f} "
              f"{r['f1_1_max']:>6.3f} {r['weighted_f1']:>6.3f} {r['roc_auc']:>6.3f}")
    print(f"report: {path}")
    return 0
