"""``checkworthy labels``: ``add FILE`` versions and validates a label file, appends its labels and
recalibrates; ``versions [LINEAGE]`` lists each label-set lineage's versions."""

from __future__ import annotations

import argparse
from pathlib import Path

from checkworthy.config import ROOT
from checkworthy.errors import DataError


def register(sub: argparse._SubParsersAction) -> None:
    lab = sub.add_parser("labels", help="label updates: add a label file, list label-set versions")
    lab_sub = lab.add_subparsers(dest="labels_command", required=True)
    la = lab_sub.add_parser("add", help="add or correct labels from a CSV id,dataset,label[,source][,text]")
    la.add_argument("file")
    la.add_argument("--event-only", action="store_true",
                    help="only emit checkworthy.labels.updated (a served deployment recalibrates)")
    la.set_defaults(func=cmd_labels)
    lv = lab_sub.add_parser("versions", help="the versions of each label-set lineage")
    lv.add_argument("lineage", nargs="?")
    lv.set_defaults(func=cmd_labels)


def cmd_labels(args: argparse.Namespace) -> int:
    """``labels add FILE``: version and validate a label file, append its labels, recalibrate.

    ``labels versions [LINEAGE]``: the versions of each label-set lineage.
    """
    from checkworthy.store import lineages
    from checkworthy.store.engine import get_engine

    if args.labels_command == "versions":
        with get_engine().connect() as conn:
            for name in [args.lineage] if args.lineage else sorted(lineages.heads(conn)):
                print(name)
                for i, v in enumerate(lineages.version_log(conn, name), 1):
                    print(f"  v{i}: label set {v['label_set_id']} ({v['n_items']} claims, "
                          f"{v['n_positive']} positive) {v['reason']}, {v['created_at']:%Y-%m-%d %H:%M}, "
                          f"data {v['dvc_hash'] or '-'}")
        return 0
    return add_label_file(Path(args.file), args.event_only)


def add_label_file(path: Path, event_only: bool) -> int:
    """The one way labels arrive (``labels add``, ``review import``): check, version (DVC),
    validate (GX), append, recalibrate; print what happened, the review-queue entries the labels
    closed included."""
    from checkworthy.data.label_files import in_label_folder, read_label_csv
    from checkworthy.flows.pipeline import label_update_flow
    from checkworthy.runs.label_updates import check_label_file, refuse_label_file
    from checkworthy.store.engine import get_engine
    from checkworthy.store.review_queue import answers_of_update
    from checkworthy.store.validations import failed_results

    try:
        rows = read_label_csv(path)  # a malformed file fails before anything starts
        with get_engine().connect() as conn:  # ... and one naming unknown claims before it is copied
            check_label_file(conn, path, rows)
    except DataError as exc:  # a file of data/labels/ is set aside, as the watch flow does
        if not in_label_folder(path, ROOT):
            raise
        moved = refuse_label_file(get_engine(), path, ROOT, str(exc))
        raise DataError(exc.file, exc.row, exc.field, f"{exc.problem}; moved to {moved}") from None
    out = label_update_flow(files=[str(path.resolve())], recalibrate_now=not event_only)
    for u in out.updates:
        print(f"{u.path}: {u.status}{' (already applied)' if u.reused else ''}, "
              f"{u.n_appended} labels appended, data version {u.data_version_id}")
        if u.moved_to:
            print(f"  moved to {u.moved_to}: data/labels/ keeps applied files only")
        for name, ls in u.new_heads.items():
            print(f"  {name}: new label set version {ls}")
        with get_engine().connect() as conn:
            answered = answers_of_update(conn, u.update_id)
            if answered:
                print(f"  review queue: {len(answered)} claims answered, their entries closed")
            if u.status == "rejected":
                for r in failed_results(conn, u.validation_run_ids):
                    where = ", ".join(f"line {x['line']}" if x.get("line") else f"claim {x['claim_id']}"
                                      for x in r.unexpected_rows[:10])
                    # name the field when the check is on a column of the file (not a derived one)
                    field = f" (field {r.column_name!r})" if r.column_name in ("label", "text") else ""
                    print(f"  failed {r.check_name}{field}: {where or f'observed {r.observed}'}")
    recal = out.recalibration
    if recal:
        for r in recal.runs:
            print(f"  run {r.run_id}: {r.mode}, {r.n_recomputed} claims recomputed, "
                  f"{r.n_copied} copied")
    return 0 if all(u.status == "applied" for u in out.updates) else 1
