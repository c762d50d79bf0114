"""``checkworthy``: the command line (run the main job, calibrate your own scores, report).

Each command imports the layers it uses when it runs, so ``checkworthy --help`` and a refused
option answer at once instead of after loading Prefect, torch and the store.
"""

from __future__ import annotations

import argparse
import sys

from sqlalchemy.exc import DBAPIError

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


def lost_connection(exc: BaseException) -> DBAPIError | None:
    """The first failure in ``exc``'s chain that is the store's connection going away (the server
    killed or restarted, the network cut, a refused reconnect), not an error of a statement; None
    when there is none. Its transaction was rolled back by the server."""
    cause: BaseException | None = exc
    found, seen = None, set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, DBAPIError) and (cause.connection_invalidated or _connection_failure(cause)):
            found = cause
        cause = cause.__cause__ or cause.__context__
    return found


def _connection_failure(exc: DBAPIError) -> bool:
    """A failure to connect (no SQLSTATE: the client's own), or a connection exception (class 08)
    or an operator's shutdown (57P01-57P03) from the server."""
    from sqlalchemy.exc import OperationalError

    state = getattr(exc.orig, "sqlstate", None)
    return isinstance(exc, OperationalError) and (state is None or state.startswith("08")
                                                  or state in ("57P01", "57P02", "57P03"))


def store_lost_line(exc: DBAPIError) -> str:
    """One line for a store that went away: mid-run when this process had reached it (the engine
    is made once the schema is migrated), else it could not be reached at all."""
    from checkworthy.store.engine import get_engine

    why = (str(exc.orig).strip().splitlines() or [type(exc.orig).__name__])[0]
    if exc.connection_invalidated or get_engine.cache_info().currsize:
        return f"the store was lost mid-run ({why}); nothing partial is kept: the same command again resumes"
    return (f"the store cannot be reached ({why}); nothing was written: start it (or check DATABASE_URL) "
            "and run the same command again")


def main(argv: list[str] | None = None) -> int:
    """Parse, run the command; a user's mistake is one line ``error: ...`` (status 2), a store
    that is busy, unavailable or lost mid-run, or an output that could not be written, one line
    (status 1)."""
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
    except Exception as exc:
        lost = lost_connection(exc)
        if lost is None:
            raise
        print(f"error: {store_lost_line(lost)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
