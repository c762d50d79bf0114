"""``checkworthy demonstrations``: pick the few-shot prompt's labelled sentences from the
leakage-free training texts (``scorers/guidelines/demonstrations.yaml`` by default)."""

from __future__ import annotations

import argparse
from pathlib import Path

from checkworthy.cli.checks import output_file, positive_int
from checkworthy.errors import UsageError


def register(sub: argparse._SubParsersAction) -> None:
    dm = sub.add_parser("demonstrations", help="pick the few-shot prompt's labelled sentences (leakage-free)")
    dm.add_argument("--n", type=positive_int, default=64, help="how many (half of each class; default 64)")
    dm.add_argument("--seed", type=int, help="default: params.yaml seed")
    dm.add_argument("--out", help="default: the package's guidelines/demonstrations.yaml")
    dm.set_defaults(func=cmd_demonstrations)


def cmd_demonstrations(args: argparse.Namespace) -> int:
    """Write the demonstrations file; refuse to replace any file that is not one."""
    import yaml

    from checkworthy.runs.fewshot_demonstrations import write_demonstrations
    from checkworthy.scorers.fewshot_prompt import DEFAULT_DEMONSTRATIONS, load_demonstrations
    from checkworthy.settings import load_settings

    out = args.out or str(DEFAULT_DEMONSTRATIONS)
    problem = output_file("--out", out, [])
    if problem is None and Path(out).suffix not in (".yaml", ".yml"):
        problem = f"--out {out}: name a .yaml file"
    if problem is None and Path(out).is_file():
        try:  # replace a demonstrations file, never anything else
            load_demonstrations(Path(out))
        except (ValueError, yaml.YAMLError, AttributeError, TypeError, KeyError):
            problem = f"--out {out}: exists and is not a demonstrations file; name a new file"
    if problem:
        raise UsageError(problem)
    settings = load_settings()
    seed = settings.seed if args.seed is None else args.seed
    made_by = f"checkworthy demonstrations --n {args.n} --seed {seed}"
    try:
        data = write_demonstrations(args.n, seed, settings.labelled_sizes(), Path(out), made_by=made_by)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"{len(data['shots'])} demonstrations -> {out} (none from {', '.join(data['excluded'])})")
    return 0

