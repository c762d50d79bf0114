"""``checkworthy calibrate``: NN-PPI (or another correction and interval) on a team's own scores.

Also the options ``predict`` shares with it: decide or review, the kNN path, and ``--name``, the
lineage's name for runs from files (a name is one labelled file's: the same file and name give the
same lineage; a name that already holds another file's labels is refused).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from checkworthy.cli.checks import closed_unit, lineage_name, open_unit, output_file, positive_int
from checkworthy.config import EF_SEARCH
from checkworthy.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("calibrate", help="calibrate your own scores with NN-PPI")
    c.add_argument("--labeled", dest="labelled", metavar="LABELED",
                   required=True, help="CSV with id,text,score,label")
    c.add_argument("--unlabeled", dest="unlabelled", metavar="UNLABELED",
                   required=True, help="CSV with id,text,score[,label]")
    c.add_argument("--k", type=positive_int, required=True, help="neighbours per claim (at least 1)")
    c.add_argument("--alpha", type=open_unit, default=0.05, help="1 - interval level, in (0, 1)")
    c.add_argument("--threshold", type=closed_unit, default=0.5, help="decision threshold, in [0, 1]")
    c.add_argument("--out", required=True)
    c.add_argument("--interval", default="z",
                   help="interval method: z (the paper's), t, t-pred, conformal, conformal-local, mondrian, "
                        "mondrian-local, conformal-split, mondrian-split")
    c.add_argument("--correction", default="paper",
                   help="point correction: paper (NN-PPI), raw, knn, clipped, weighted, adaptive-k, ppi++, "
                        "shrink, global, or cv (chosen by cross-validation on the labelled file); a score "
                        "calibrator fitted on the labelled file: platt, platt-score, isotonic, temperature, "
                        "venn-abers; "
                        "or the embedding head (logistic regression on MiniLM vector + score): head, "
                        "head+nnppi (corrected by NN-PPI), head-cv (correction chosen by cross-validation); "
                        "or auto: platt, head-cv or cv, whichever has the best cross-validated "
                        "positive-class F1 on the labelled file")
    add_review_options(c, ("error", 0.1, 0.1))
    add_knn_options(c, ("exact", EF_SEARCH))
    add_name_option(c)
    c.set_defaults(func=cmd_calibrate)


def add_review_options(p: argparse.ArgumentParser, defaults: tuple[str | None, float | None, float | None]
                       ) -> None:
    """Decide or review: the OUT column ``review`` (1 = a person should decide the claim)."""
    risk, max_risk, delta = defaults
    p.add_argument("--review-risk", default=risk,
                   help="what the automatic decisions bound: error (wrong decisions among them) or miss "
                        "(check-worthy claims among the automatic dismissals); default error")
    p.add_argument("--max-risk", type=float, default=max_risk, help="the bound R, in (0, 1); default 0.1")
    p.add_argument("--delta", type=float, default=delta,
                   help="the chance over the labelled file that the bound fails, in (0, 1); default 0.1")


def add_knn_options(p: argparse.ArgumentParser, defaults: tuple[str | None, int | None]) -> None:
    """How neighbours are found: the exact top-k or pgvector's HNSW index (recall recorded)."""
    p.add_argument("--knn", choices=("exact", "hnsw"), default=defaults[0],
                   help="exact (a top-k over every labelled claim, the default) or hnsw (pgvector's HNSW "
                        "index: approximate, for large labelled sets; the run records its recall@k)")
    p.add_argument("--ef-search", type=positive_int, default=defaults[1],
                   help=f"HNSW candidates per search, 1-1000 (default {EF_SEARCH}, params.yaml ef_search): "
                        "more is slower, closer to exact")


def add_name_option(p: argparse.ArgumentParser) -> None:
    """The lineage's name for runs from files (``serve --lineage NAME``)."""
    p.add_argument("--name", type=lineage_name,
                   help="the lineage's name (1-64 letters, digits, '.', '_', '-'; default "
                        "upload:<hash of --labeled>:labeled): the same file and name give the same lineage; "
                        "a name holding another file's labels is refused")


def check_name(name: str | None, labelled: Path) -> None:
    """Refuse (before anything is stored) a ``--name`` that already names a lineage of other
    claims than ``labelled``'s: a lineage's runs, champion and served answers are of one file's labels."""
    from checkworthy.runs.own_scores import upload_dataset
    from checkworthy.store.engine import get_engine
    from checkworthy.store.lineages import lineage_datasets

    if name is None:
        return
    with get_engine().connect() as conn:
        others = [d for d in lineage_datasets(conn, name) if d != upload_dataset(labelled)]
    if others:
        raise UsageError(f"--name {name}: already the lineage of other labels (dataset {others[0]}, not "
                         f"{labelled}); choose another name")


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Calibrate U's scores against L's labelled scores; write OUT; print metrics if U has labels."""
    from checkworthy.report.console import print_outcome
    from checkworthy.runs.own_scores import calibrate_files, read_scored_files
    from checkworthy.store.engine import get_engine
    from checkworthy.store.run_spec import RunMethods

    try:
        methods = RunMethods(args.k, args.alpha, args.threshold, args.interval, correction=args.correction,
                             review_risk=args.review_risk, max_risk=args.max_risk, delta=args.delta,
                             knn=args.knn, ef_search=args.ef_search)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    problem = output_file("--out", args.out, [args.labelled, args.unlabelled])
    if problem:
        raise UsageError(problem)
    # validate both files, alone and together, before the database is even started
    read_scored_files(Path(args.labelled), Path(args.unlabelled), args.k)
    check_name(args.name, Path(args.labelled))
    outcome = calibrate_files(get_engine(), Path(args.labelled), Path(args.unlabelled), Path(args.out),
                              methods, lineage=args.name)
    print_outcome(outcome, f"interval {args.interval}, correction {args.correction}", args.out, args.labelled,
                  args.unlabelled)
    return 0
