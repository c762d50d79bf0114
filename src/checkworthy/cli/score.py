"""``checkworthy score`` and ``checkworthy train-classifier``: arguments and output.

``score`` runs any model spec over a CSV ``id,text`` (:mod:`checkworthy.runs.score_file`). Model
options come from the params file as the flows build them
(:func:`checkworthy.scorers.registry.configured_scorer`), overridden by ``--opt KEY=VALUE``.

``train-classifier`` trains a leakage-free classifier artefact (``runs.train_classifier``, with
``--method lora`` ``runs.train_lora``, with ``--method setfit`` ``runs.train_setfit``) and prints
its F1 on the test splits it excluded.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from checkworthy.cli.checks import output_file, positive_int
from checkworthy.config import PARAMS_FILE
from checkworthy.errors import UsageError
from checkworthy.runs.score_file import ScoreOptions, read_input, score_csv
from checkworthy.runs.scoring import teacher_probabilities
from checkworthy.runs.train_classifier import ARTEFACT_ROOT, DEFAULT_EXCLUDE, TrainingData, train
from checkworthy.scorers.lora_classifier import BASES
from checkworthy.scorers.registry import configured_scorer
from checkworthy.store.engine import get_engine


def parse_options(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; values are read as YAML scalars (``0.1`` -> float, ``true`` -> bool)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--opt expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = yaml.safe_load(value) if value.strip() else None
    return out


def register(sub: argparse._SubParsersAction) -> None:
    sc = sub.add_parser("score", help="score a CSV (id,text) with any model spec")
    add_score_arguments(sc)
    sc.set_defaults(func=cmd_score)
    tc = sub.add_parser("train-classifier", help="train the leakage-free MiniLM classifier")
    add_train_arguments(tc)
    tc.set_defaults(func=cmd_train_classifier)


def add_score_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a params file models: entry by its name "
                   "(embedded:gemma3-270m, embedded:gemma3-270m#t0.1) or any model spec: ollama:gemma3:1b, "
                   "openai:<deployment>, classifier:<name>[@version], ensemble:<name>+<name>, file:<path>")
    p.add_argument("--input", required=True, help="CSV with columns id,text")
    p.add_argument("--out", required=True, help="CSV to write: id,score,status,raw[,...]")
    p.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                   help="model option, e.g. temperature=0.1, mode=raw, concurrency=8 (repeatable)")
    p.add_argument("--params", default=str(PARAMS_FILE),
                   help="params file whose model options apply ('' for none)")
    p.add_argument("--kind", help="score kind written to the score column (default: the model's first)")
    p.add_argument("--chunk-size", type=positive_int, default=64, help="texts per stored chunk")


def cmd_score(args: argparse.Namespace) -> int:
    """``checkworthy score``: a CSV of claims scored with any model spec, the scores stored like
    the main job's; a bad option, file or model (or a backend that fails) is one line, status 2."""
    from checkworthy.scorers.http_retry import BackendError

    try:
        return run_score(args)
    except (ValueError, FileNotFoundError, BackendError) as exc:
        raise UsageError(str(exc)) from None


def run_score(args: argparse.Namespace) -> int:
    """Validate input and model first, then start the store and score."""
    from checkworthy.settings import load_settings
    from checkworthy.store.engine import get_engine

    problem = output_file("--out", args.out, [args.input])
    if problem:
        raise ValueError(problem)
    rows = read_input(Path(args.input))
    overrides = parse_options(args.opt)
    if args.params and not Path(args.params).is_file():
        raise ValueError(f"--params: no such file {args.params}")
    params = load_settings(Path(args.params)).params if args.params else {}
    scorer, prompt = configured_scorer(params, args.model, **overrides)
    summary = score_csv(get_engine(), scorer, prompt, rows, Path(args.out),
                        ScoreOptions(kind=args.kind, chunk_size=args.chunk_size))
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(summary.statuses.items()))
    print(f"{summary.n_rows} rows ({summary.n_texts} distinct texts): {summary.n_new} scored now, "
          f"{summary.n_reused} reused from the store, in {summary.seconds:.1f} s -> {args.out}")
    print(f"{summary.kind}: {statuses}")
    if summary.tokens:
        print("tokens: " + ", ".join(f"{k} {v:,}" for k, v in summary.tokens.items()))
    return 0


def run_train_multilingual(args: argparse.Namespace, root: Path) -> int:
    """``--method multilingual``: train, save, version with DVC (unless ``--no-dvc``), print the
    languages' cross-fitted ROC AUC."""
    from checkworthy.runs.train_lora import version_with_dvc  # start-up: torch
    from checkworthy.runs.train_multilingual import (  # start-up: sklearn
        MultilingualSpec,
        read_exclude_texts,
        train_multilingual,
    )

    exclude = read_exclude_texts(args.exclude_texts)
    spec = MultilingualSpec(**({"seed": args.seed} if args.seed is not None else {}))
    model = train_multilingual(args.name, exclude, spec, root=root, echo=print)
    print(f"classifier:{model.name}@{model.version}")
    print(f"{'language':<9} {'n':>6} {'AUC tfidf':>10} {'AUC use':>8} (cross-fitted)")
    for code, auc in model.manifest["cross_fitted_roc_auc"].items():
        n = model.manifest["training_data"]["languages"][code]["n_texts"]
        print(f"{code:<9} {n:>6} {auc['tfidf']:>10.3f} {auc['use']:>8.3f}")
    if not args.no_dvc:
        print(f"versioned: {version_with_dvc(root / model.name, ' '.join(['checkworthy', *sys.argv[1:]]))}")
    return 0


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", required=True, help="artefact name (models/classifier/<name>/)")
    p.add_argument("--exclude", default=",".join(DEFAULT_EXCLUDE),
                   help="groups whose texts never enter training: dataset:split or dataset:calibration "
                        "(default: both test splits and both calibration sets)")
    p.add_argument("--seed", type=int, help="seed of the calibration samples (default: params.yaml)")
    p.add_argument("--method", choices=("logistic", "lora", "setfit", "multilingual"), default="logistic",
                   help="logistic: a head on frozen MiniLM vectors (minutes); lora: a transformer (--base) "
                        "fine-tuned with a LoRA adapter (MiniLM: about 13 min on 2 cores); setfit: SetFit "
                        "on a balanced sample, with a LoRA adapter; multilingual: char n-gram TF-IDF a "
                        "language and a USE multilingual head, stacked, on every language's tweets "
                        "(needs --exclude-texts); lora, setfit and multilingual are versioned with DVC")
    p.add_argument("--exclude-texts", type=Path, metavar="CSV",
                   help="multilingual: a CSV whose text column holds claims training never sees "
                        "(a benchmark's held-out claims)")
    p.add_argument("--base", choices=sorted(BASES), default="minilm",
                   help="lora: the transformer under the adapter (gemma3-270m: 0.16 s a text and epoch)")
    p.add_argument("--C", dest="c", type=float, help="logistic: fixed inverse regularisation")
    p.add_argument("--epochs", type=positive_int,
                   help="lora: passes over the training texts (default: minilm 2, gemma3-270m 1)")
    p.add_argument("--rank", type=positive_int,
                   help="lora, setfit: the adapter's rank (default: minilm and setfit 16, gemma3-270m 8)")
    p.add_argument("--examples", type=positive_int,
                   help="setfit, lora: training texts per class, a seeded sample of the training set "
                        "(default: setfit 500, lora every text)")
    p.add_argument("--steps", type=positive_int, default=600, help="setfit: contrastive batches of pairs")
    p.add_argument("--teacher", metavar="MODEL",
                   help="lora: learn this model's P(check-worthy) of each training text instead of its label "
                        "(distillation, e.g. the recommended ensemble:minilm-lora+gemma-lora; scored through "
                        "the store); the epoch is still chosen by the held-back texts' labels")
    p.add_argument("--device", default="cpu",
                   help="lora: the torch device that trains (cpu, cuda, cuda:1); evaluation runs on the CPU")
    p.add_argument("--no-dvc", action="store_true",
                   help="lora, setfit, multilingual: do not dvc add / dvc push the artefact")
    p.add_argument("--root", help="artefact root (default: models/classifier)")


def cmd_train_classifier(args: argparse.Namespace) -> int:
    """``checkworthy train-classifier``: train the leakage-free classifier artefact, print its test
    F1; a bad option is one line, status 2."""
    try:
        return run_train(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def run_train(args: argparse.Namespace) -> int:
    """Train, save, print the test F1."""
    data = TrainingData(exclude=[g.strip() for g in args.exclude.split(",") if g.strip()], seed=args.seed)
    root = Path(args.root) if args.root else ARTEFACT_ROOT
    if args.teacher and args.method != "lora":
        raise ValueError(f"--teacher: only with --method lora (not {args.method})")
    if (args.exclude_texts is not None) != (args.method == "multilingual"):
        raise ValueError("--exclude-texts: needed with --method multilingual, and only with it")
    if args.method == "multilingual":
        return run_train_multilingual(args, root)
    if args.method in ("lora", "setfit"):
        from checkworthy.runs.train_lora import (  # start-up: torch
            FineTuning,
            Teacher,
            train_lora,
            version_with_dvc,
        )

        if args.method == "lora":
            spec = FineTuning.for_base(args.base, epochs=args.epochs, rank=args.rank, device=args.device)
            teacher = None if not args.teacher else Teacher(
                args.teacher, partial(teacher_probabilities, get_engine(), args.teacher, echo=print))
            art = train_lora(args.name, spec, data, examples=args.examples, root=root, echo=print,
                             teacher=teacher)
        else:
            from checkworthy.runs.train_setfit import SetFitSpec, train_setfit  # start-up: setfit, datasets

            setfit = SetFitSpec(examples=args.examples or 500, steps=args.steps, rank=args.rank or 16)
            art = train_setfit(args.name, setfit, data, root=root, echo=print)
        print(f"classifier:{art.name}@{art.version} ({art.manifest['training_seconds']:.0f} s of training)")
        if not args.no_dvc:
            command = " ".join(["checkworthy", *sys.argv[1:]])
            print(f"versioned: {version_with_dvc(root / art.name, command)}")
    else:
        art = train(args.name, data, c=args.c, root=root, echo=print)
        print(f"classifier:{art.name}@{art.version} (C={art.manifest['hyperparameters']['C']})")
    print(f"{'test split':<20} {'n':>5} {'ROC AUC':>8} {'F1 c1':>7} {'weighted F1':>12} {'paper_c F1':>11}")
    for split, m in art.manifest["metrics"].items():
        if "refused" in m:
            print(f"{split:<20} not evaluated: {m['refused']}")
            continue
        r = m["p_positive>=0.5"]
        print(f"{split:<20} {m['n']:>5} {m['roc_auc']:>8.3f} {r['f1_1']:>7.3f} {r['weighted_f1']:>12.3f} "
              f"{m['paper_c>=0.5']['weighted_f1']:>11.3f}")
    return 0
