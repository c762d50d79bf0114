"""``checkworthy adapt`` and ``checkworthy models``: a lineage's own model, trained on its labels,
and the registry of its versions (:mod:`checkworthy.runs.adapt`).

Every option, the label file and the lineage's labels are checked before anything is stored or
trained: a mistake is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, get_args

from checkworthy.cli.checks import output_dir, positive_int, share
from checkworthy.config import PARAMS_FILE, ROOT
from checkworthy.errors import DataError, UsageError
from checkworthy.settings import Trainer

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from checkworthy.runs.adapt import AdaptSettings, Labelled
    from checkworthy.runs.own_scores import Row


def register(sub: argparse._SubParsersAction) -> None:
    ad = sub.add_parser("adapt", help="fine-tune the recommended small model on a lineage's labels "
                                      "(cross-fitted), register it, promote it if it beats the champion")
    add_adapt_arguments(ad)
    ad.set_defaults(func=cmd_adapt)
    md = sub.add_parser("models", help="the model registry: list, promote, retire")
    add_models_arguments(md)
    md.set_defaults(func=cmd_models)


def add_adapt_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--labeled", dest="labelled", metavar="LABELED",
                   help="CSV with id,text,label: the lineage of this file (as predict --labeled "
                        "names it)")
    p.add_argument("--lineage", help="a stored lineage (label-set name), e.g. one the data team's label "
                                     "updates version; with --labeled, the file must be of it")
    p.add_argument("--params", default=str(PARAMS_FILE), help="params file (adapt: and predict: sections)")
    p.add_argument("--folds", type=positive_int,
                   help="cross-fitting folds K, at least 2 (default: adapt.folds)")
    p.add_argument("--epochs", type=positive_int,
                   help="passes over each fold's labels (default: adapt.epochs)")
    p.add_argument("--trainer", choices=get_args(Trainer),
                   help="the lineage's model: auto (a MiniLM LoRA for English labels without a slower "
                        "model, else the stack), minilm-lora, or stack: a TF-IDF and USE stack over the "
                        "multilingual model (default: adapt.trainer)")
    p.add_argument("--slow-model", metavar="SPEC",
                   help="a slower, better classifier the lineage's stack also weighs, in any language, "
                        "e.g. classifier:gemma-lora-ml (default: adapt.slow_model)")
    p.add_argument("--slow-share", type=share,
                   help="the share of the labelled claims, those the cheap stack is least sure of, whose "
                        "band the slower model reads; 1: every claim (default: adapt.slow_share)")
    p.add_argument("--no-dvc", action="store_true", help="do not dvc add / dvc push the artefact")


def add_models_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="models_command", required=True)
    ls = sub.add_parser("list", help="every model version, its status and cross-validated figures")
    ls.add_argument("--lineage", help="only this lineage's versions")
    for name, what in (("promote", "make a version its lineage's champion (the champion is retired)"),
                       ("retire", "retire a version (a retired champion leaves params.yaml's predict: model "
                                  "in force)")):
        c = sub.add_parser(name, help=what)
        c.add_argument("version", type=positive_int, help="the version's id (checkworthy models list)")
        c.add_argument("--reason", default="by hand", help="why, for the audit record")


def cmd_adapt(args: argparse.Namespace) -> int:
    """``checkworthy adapt``: check, train cross-fitted, compare with the champion, register."""
    from checkworthy.runs.adapt import AdaptSettings, DvcVersioning, adapt, adapt_start
    from checkworthy.settings import load_settings
    from checkworthy.store.engine import get_engine

    if not args.labelled and not args.lineage:
        raise UsageError("give --labeled FILE or --lineage NAME")
    if not Path(args.params).is_file():
        raise UsageError(f"--params: no such file {args.params}")
    settings = load_settings(Path(args.params))
    params = settings.params
    s = AdaptSettings.of(settings.adapt, folds=args.folds, epochs=args.epochs, trainer=args.trainer,
                         slow_model=args.slow_model, slow_share=args.slow_share)
    _check_settings(s, args.no_dvc)
    given = _labelled_file(args, s.folds)
    eng = get_engine()
    lab = _labels_in_force(eng, args, given, s.folds)
    command = " ".join(["checkworthy", *sys.argv[1:]])
    minilm, start = adapt_start(lab, params, s)
    stack = f"a TF-IDF and USE stack over {start}" + (
        ("" if lab.english else " (the labels are not English)") if s.slow_model is None else
        f" and {s.slow_model} on {s.slow_share:.0%} of the labelled claims, those {start} is least sure of")
    print(f"adapting {lab.lineage}: {len(lab.labels)} labelled texts ({sum(lab.labels)} check-worthy), "
          f"{s.folds} folds + 1, " + (f"{s.epochs} epochs each, from {start}" if minilm else stack))
    out = adapt(eng, lab, params, s, int(params.get("seed", 0)),
                dvc=None if args.no_dvc else DvcVersioning(ROOT, command), echo=print)
    print(f"model version {out.version_id}: {out.spec}")
    print(out.reason)
    print(f"champion of {lab.lineage}: {out.spec if out.promoted else out.champion}"
          + (" (predict and serve of this lineage use it)" if out.promoted else ""))
    return 0


def _check_settings(s: AdaptSettings, no_dvc: bool) -> None:
    """Refuse an artefact root that cannot be written (or, versioned with DVC, lies outside the
    project), a model to continue from that cannot be read, a trainer that cannot weigh the slower
    model and a slower model that cannot be one."""
    from checkworthy.runs.adapt import slow_model_problem, trainer_problem

    problem = output_dir("adapt.root", str(s.artefact_root))
    if problem is None and not no_dvc and not s.artefact_root.resolve().is_relative_to(ROOT.resolve()):
        problem = f"adapt.root {s.root}: outside the project, so DVC cannot version it; use --no-dvc"
    problem = problem or _start_problem(s.start) or trainer_problem(s) or slow_model_problem(s.slow_model)
    if problem:
        raise UsageError(problem)


def _labelled_file(args: argparse.Namespace, folds: int) -> tuple[Path, str, list[Row]] | None:
    """The ``--labeled`` file, its lineage and its rows, checked (its lineage is ``--lineage``'s
    when both are given; its labels can be cross-fitted); None without ``--labeled``."""
    from checkworthy.runs.adapt import distinct_labels, labels_problem
    from checkworthy.runs.own_scores import labelled_lineage, read_scored_csv

    if not args.labelled:
        return None
    labelled = Path(args.labelled)
    lab_rows = read_scored_csv(labelled, label_required=True, scored=False)
    lineage = labelled_lineage(labelled)
    if args.lineage and args.lineage != lineage:
        raise UsageError(f"--labeled {labelled} is of lineage {lineage}, not --lineage {args.lineage}")
    pairs = [(r.text, r.label) for r in lab_rows if r.label is not None]  # all: label_required
    why = labels_problem(list(distinct_labels(lineage, 0, pairs).labels), folds)
    if why:
        raise DataError(labelled, None, "label", why)
    return labelled, lineage, lab_rows


def _labels_in_force(eng: Engine, args: argparse.Namespace, given: tuple[Path, str, list[Row]] | None,
                     folds: int) -> Labelled:
    """The lineage's labels in force: the ``given`` file's (stored) and those added since, or the
    stored ``--lineage``'s, refused when unknown or too few to cross-fit."""
    from checkworthy.runs.adapt import distinct_labels, labels_problem, lineage_labels
    from checkworthy.runs.own_scores import store_labelled
    from checkworthy.store.rows import label_set_texts

    if given is not None:
        labelled, lineage, lab_rows = given
        with eng.begin() as conn:  # the lineage's labels in force: the file's, and those added since
            label_set = store_labelled(conn, labelled, lab_rows)
            return distinct_labels(lineage, label_set, label_set_texts(conn, label_set))
    try:
        lab = lineage_labels(eng, args.lineage)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    why = labels_problem(lab.labels, folds)
    if why:
        raise UsageError(f"--lineage {args.lineage}: {why}")
    return lab


def _start_problem(start: str) -> str | None:
    """Why today's model to continue from cannot be read (None when it can)."""
    from checkworthy.scorers.classifier import model_type

    try:
        model_type(start)
    except FileNotFoundError as exc:
        return f"adapt.start {start!r}: {exc}"
    return None


def cmd_models(args: argparse.Namespace) -> int:
    """``checkworthy models list | promote | retire``."""
    from checkworthy.runs.adapt import set_status
    from checkworthy.store import model_registry as registry
    from checkworthy.store.engine import get_engine

    if args.models_command == "list":
        with get_engine().connect() as conn:
            rows = registry.versions(conn, args.lineage)
        if args.lineage and not rows:
            raise UsageError(f"--lineage {args.lineage!r}: no model versions (checkworthy adapt "
                             "registers them)")
        for r in rows:
            f1 = r["metrics"].get("cv_f1_positive")
            print(f"{r['id']}\t{r['lineage']}\t{r['status']}\t{r['spec']}\t"
                  f"cv F1 {'-' if f1 is None else f'{f1:.3f}'}\t{r['n_labels'] or '-'} labels\t"
                  f"{r['created_at']:%Y-%m-%d %H:%M}\t{r['reason']}")
        return 0
    status = "champion" if args.models_command == "promote" else "retired"
    try:
        row, replaced = set_status(get_engine(), args.version, status, args.reason)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"model version {args.version} ({row['spec']}) of {row['lineage']}: {status}"
          + (f"; version {replaced} retired" if replaced else ""))
    return 0
