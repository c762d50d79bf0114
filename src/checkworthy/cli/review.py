"""``checkworthy review``: ``export`` the top of the open review queue as Label Studio tasks or a
CSV to fill in; ``import FILE`` their answers, through ``labels add``."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from checkworthy.cli.checks import output_file, positive_int
from checkworthy.cli.labels import add_label_file
from checkworthy.config import PARAMS_FILE
from checkworthy.errors import DataError, UsageError


def register(sub: argparse._SubParsersAction) -> None:
    rv = sub.add_parser("review", help="the review queue: export the claims a person should decide, "
                                       "import their answers")
    rv_sub = rv.add_subparsers(dest="review_command", required=True)
    rx = rv_sub.add_parser("export", help="the top of the open queue as Label Studio tasks or a CSV to fill")
    rx.add_argument("--format", choices=("csv", "label-studio"), default="label-studio")
    rx.add_argument("--limit", type=positive_int, default=100, help="how many claims (default 100)")
    rx.add_argument("--order", choices=("uncertain", "coverage", "random"), default="uncertain",
                    help="uncertain: the open queue, most uncertain first (what a person must decide); "
                         "coverage: the claims queued for drift first, spread over the new region "
                         "(k-center), then the most uncertain (labels for a new kind of claim); "
                         "random: a uniform sample of the unlabelled claims (labels to calibrate with)")
    rx.add_argument("--seed", type=int,
                    help="the random and coverage orders' seed (default: params.yaml seed)")
    rx.add_argument("--target", help="only claims of this calibration target (e.g. clef2024:incoming)")
    rx.add_argument("--out", required=True, help="the file to write (.json for label-studio, .csv for csv)")
    rx.set_defaults(func=cmd_review)
    ri = rv_sub.add_parser("import", help="a Label Studio export (.json) or a filled-in CSV (.csv): "
                                          "labels added as by 'labels add', queue entries closed")
    ri.add_argument("file")
    ri.add_argument("--event-only", action="store_true",
                    help="only emit checkworthy.labels.updated (a served deployment recalibrates)")
    ri.set_defaults(func=cmd_review)


def cmd_review(args: argparse.Namespace) -> int:
    """``review export``: the top of the open review queue as Label Studio tasks or CSV.

    ``review import FILE``: a Label Studio export or a filled-in CSV, through ``labels add``.
    """
    from checkworthy.runs.review_queue import answers_as_label_file, export_rows, write_export
    from checkworthy.settings import load_settings
    from checkworthy.store.engine import get_engine

    if args.review_command == "import":
        with tempfile.TemporaryDirectory() as tmp:
            labels = Path(tmp) / f"review-{Path(args.file).stem}.csv"
            answers = answers_as_label_file(Path(args.file), labels)
            print(f"{args.file}: {len(answers)} answers")
            try:
                return add_label_file(labels, args.event_only)
            except DataError as exc:  # name the person's file and task, not the label file made from it
                if exc.file != str(labels):
                    raise
                row = answers[exc.row - 2].row if exc.row and 2 <= exc.row < len(answers) + 2 else None
                raise DataError(args.file, row, None, exc.problem) from None
    suffix = ".json" if args.format == "label-studio" else ".csv"
    problem = output_file("--out", args.out, [])
    if problem is None and Path(args.out).suffix.lower() != suffix:
        problem = f"--out {args.out}: --format {args.format} writes a {suffix} file"
    if problem:
        raise UsageError(problem)
    with get_engine().connect() as conn:
        try:
            rows = export_rows(conn, args.limit, args.target, args.order,
                               load_settings(PARAMS_FILE).seed if args.seed is None else args.seed)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    write_export(rows, Path(args.out), args.format)
    what = {"uncertain": "most uncertain first", "random": "drawn at random",
            "coverage": "those beyond the labelled set's radius spread first, then most uncertain",
            }[args.order]
    print(f"{len(rows)} claims to label, {what} -> {args.out} ({args.format})")
    if args.format == "label-studio":
        print("Label Studio: import it into a project with the labelling configuration of docs/review.md")
    return 0
