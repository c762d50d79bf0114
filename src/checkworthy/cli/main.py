"""``checkworthy``: the command line (run the main job, calibrate your own scores, report).

Each command imports the layers it uses when it runs, so ``checkworthy --help`` and a refused
option answer at once instead of after loading Prefect, torch and the store.
"""

from __future__ import annotations

import argparse
import sys

from checkworthy.cli import (
    calibrate,
    compare,
    demonstrations,
    evaluate,
    explain,
    label_studio,
    labels,
    models,
    predict,
    report,
    review,
    run,
    score,
    serve,
)
from checkworthy.config import quiet_offline_env
from checkworthy.errors import DataError, OutputUnwritable, StoreBusy, StoreUnavailable, UsageError

#: what ``checkworthy --help`` says first (plain text: the module's docstring is for readers)
DESCRIPTION = ("Spot check-worthy claims with a cheap model calibrated on your labels: predict, serve, "
               "label, adapt; the paper's reproduction is `checkworthy run` (README.md).")
#: one module a command (or a pair: serve and keys, score and train-classifier, adapt and models),
#: each registering its own; --help lists them in this order
COMMANDS = (run, labels, review, label_studio, calibrate, predict, evaluate, compare, report, explain, serve,
            score, models, demonstrations)


class OneLineErrors(argparse.ArgumentParser):
    """argparse that reports a bad option in one line (not its usage block), like every other
    error of the command line; ``--help`` still prints the usage."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"error: {self.prog}: {message} (--help lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineErrors(prog="checkworthy", description=DESCRIPTION)
    sub = p.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Parse, run the command; a user's mistake is one line ``error: ...`` (status 2), a store
    that is busy or unavailable, or an output that could not be written, one line (status 1)."""
    quiet_offline_env()
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse has printed the usage and the option at fault
        return int(exc.code or 0)
    try:
        return args.func(args)
    except (DataError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (StoreBusy, StoreUnavailable, OutputUnwritable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
