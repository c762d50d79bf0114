"""``checkworthy predict``: the recommended path, a team's labelled and unlabelled claims scored
with the recommended model (params.yaml ``predict:``, or the lineage's champion) and calibrated."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import get_args

from checkworthy.cli.calibrate import add_knn_options, add_name_option, add_review_options
from checkworthy.cli.checks import closed_unit, open_unit, output_file, positive_int
from checkworthy.config import PARAMS_FILE
from checkworthy.errors import UsageError
from checkworthy.settings import Prior


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
    pr.add_argument("--prior", choices=get_args(Prior),
                    help="decide for the labelled file's share of check-worthy claims (labelled: theta >= "
                         "the threshold), for the batch's, estimated under label shift (batch), or at the "
                         "cut on theta with the best positive-class F1 on the labelled file (f1), or at that "
                         "cut where the labelled file's share lies within the batch's estimated interval and "
                         "for the labelled file's share elsewhere (auto); default: predict.prior")
    pr.add_argument("--embedding",
                    help="the lineage's embedding space for kNN, drift and the heads: auto (MiniLM when the "
                         "labelled claims are English, else use-multilingual-v3), all-MiniLM-L6-v2 or "
                         "use-multilingual-v3; a lineage keeps its first space (default: predict.embedding)")
    add_review_options(pr, (None, None, None))
    add_knn_options(pr, (None, None))
    add_name_option(pr)
    pr.set_defaults(func=cmd_predict)


def cmd_predict(args: argparse.Namespace) -> int:
    """Score L and U with the recommended model, calibrate U against L, write OUT."""
    from checkworthy.report.console import print_outcome
    from checkworthy.runs.predict import PredictRequest, Recommended, check_embedding, predict
    from checkworthy.settings import Settings, load_settings

    problem = output_file("--out", args.out, [args.labelled, args.unlabelled])
    if problem is None and args.params and not Path(args.params).is_file():
        problem = f"--params: no such file {args.params}"
    if problem:
        raise UsageError(problem)
    settings = load_settings(Path(args.params)) if args.params else Settings()
    options = ("model", "score_kind", "k", "alpha", "threshold", "interval", "correction", "prior",
               "review_risk", "max_risk", "delta", "knn", "ef_search", "embedding")
    rec = Recommended.of(settings.predict, **{name: getattr(args, name) for name in options})
    try:
        rec.methods  # noqa: B018 - refuses an unknown method or a bound outside (0, 1)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    option = "predict.embedding" if args.embedding is None else "--embedding"
    check_embedding(rec.embedding, option)
    request = PredictRequest(Path(args.labelled), Path(args.unlabelled), Path(args.out), args.name,
                             model_given=args.model is not None or args.score_kind is not None,
                             embedding_option=option)
    done = predict(request, settings, rec)
    rec = done.rec
    print_outcome(done.outcome, f"{rec.model} {rec.score_kind}, correction {rec.correction}, "
                                f"interval {rec.interval}, k = {rec.k}, prior {rec.prior}",
                  args.out, args.labelled, args.unlabelled)
    return 0
