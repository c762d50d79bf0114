"""``checkworthy predict``: the recommended path, a team's labelled and unlabelled claims scored
with the recommended model (params.yaml ``predict:``, or the lineage's champion) and calibrated."""

from __future__ import annotations

import argparse
from pathlib import Path

from checkworthy.cli.calibrate import add_knn_options, add_name_option, add_review_options, check_name
from checkworthy.cli.checks import closed_unit, open_unit, output_file, positive_int
from checkworthy.config import PARAMS_FILE, load_params
from checkworthy.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    pr = sub.add_parser("predict", help="the recommended path: score your labelled and unlabelled claims "
                                        "with the recommended model and calibrate (params.yaml predict:)")
    pr.add_argument("--labeled", dest="labelled", metavar="LABELED",
                    required=True, help="CSV with id,text,label")
    pr.add_argument("--unlabeled", dest="unlabelled", metavar="UNLABELED",
                    required=True, help="CSV with id,text[,label]")
    pr.add_argument("--out", required=True)
    pr.add_argument("--params", default=str(PARAMS_FILE), help="params file with the predict: section")
    pr.add_argument("--model", help="model spec (default: params.yaml predict.model)")
    pr.add_argument("--score-kind", help="the model's score kind to calibrate (default: predict.score_kind)")
    pr.add_argument("--k", type=positive_int, help="neighbours per claim (default: predict.k)")
    pr.add_argument("--alpha", type=open_unit, help="1 - interval level, in (0, 1)")
    pr.add_argument("--threshold", type=closed_unit, help="decision threshold, in [0, 1]")
    pr.add_argument("--interval", help="interval method (default: predict.interval)")
    pr.add_argument("--correction", help="correction (default: predict.correction)")
    pr.add_argument("--prior", choices=("labelled", "batch"),
                    help="decide for the labelled file's share of check-worthy claims (labelled) or for the "
                         "batch's, estimated under label shift (batch); default: predict.prior")
    add_review_options(pr, (None, None, None))
    add_knn_options(pr, (None, None))
    add_name_option(pr)
    pr.set_defaults(func=cmd_predict)


def cmd_predict(args: argparse.Namespace) -> int:
    """Score L and U with the recommended model, calibrate U against L, write OUT."""
    from checkworthy.report.console import print_outcome
    from checkworthy.runs.predict import Recommended, check_score_kind, predict_files, read_files
    from checkworthy.scorers.registry import configured_scorer
    from checkworthy.store.engine import get_engine

    problem = output_file("--out", args.out, [args.labelled, args.unlabelled])
    if problem is None and args.params and not Path(args.params).is_file():
        problem = f"--params: no such file {args.params}"
    if problem:
        raise UsageError(problem)
    params = load_params(Path(args.params)) if args.params else {}
    options = ("model", "score_kind", "k", "alpha", "threshold", "interval", "correction", "prior",
               "review_risk", "max_risk", "delta", "knn", "ef_search")
    given = {name: getattr(args, name) for name in options}
    rec = Recommended.from_params(params, **given)
    try:
        rec.methods  # noqa: B018 - refuses an unknown method or a bound outside (0, 1)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    labelled, unlabelled = Path(args.labelled), Path(args.unlabelled)
    lab, unl = read_files(labelled, unlabelled, rec.k)  # before the model or the store starts
    check_name(args.name, labelled)
    if args.model is None and args.score_kind is None:  # the lineage's champion, if it has one
        from checkworthy.runs.adapt import with_champion
        from checkworthy.runs.own_scores import labelled_lineage

        params, rec = with_champion(get_engine(), params, rec, args.name or labelled_lineage(labelled))
    try:
        scorer, prompt = configured_scorer(params, rec.model)
        check_score_kind(rec, scorer)
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(f"--model {rec.model}: {exc}") from None
    outcome = predict_files(get_engine(), (labelled, unlabelled), (lab, unl), Path(args.out), rec,
                            (scorer, prompt), lineage=args.name)
    print_outcome(outcome, f"{rec.model} {rec.score_kind}, correction {rec.correction}, "
                           f"interval {rec.interval}, k = {rec.k}, prior {rec.prior}",
                  args.out, args.labelled, args.unlabelled)
    return 0
