"""Exceptions shared across the package.

``DataError`` exists so that a damaged input file fails loudly *and* tells the person
fixing it exactly where to look: the file, the line and the column.
"""

from __future__ import annotations

from os import PathLike


class DataError(ValueError):
    """A data file is malformed in a way a loader will not guess around.

    Parameters
    ----------
    file
        Path of the offending file (as given to the loader).
    row
        1-based physical line number where the offending record starts
        (the header is line 1); ``None`` if the problem is not tied to a line.
    field
        Column name (or a positional description) of the offending field;
        ``None`` if the problem concerns the whole record.
    problem
        What is wrong, phrased so that it can follow ``"field 'x': "``.

    Examples
    --------
    >>> str(DataError("data/x.csv", 12, "label", "must be 0 or 1, got '2'"))
    "data/x.csv, row 12, field 'label': must be 0 or 1, got '2'"
    """

    def __init__(
        self,
        file: str | PathLike[str],
        row: int | None,
        field: str | None,
        problem: str,
    ) -> None:
        self.file = str(file)
        self.row = row
        self.field = field
        self.problem = problem
        where = [self.file]
        if row is not None:
            where.append(f"row {row}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {problem}")

    def __reduce__(self):  # keep the attributes when pickled (e.g. across worker processes)
        return (type(self), (self.file, self.row, self.field, self.problem))


class UsageError(Exception):
    """A command was asked for something it cannot do (an option's value, a name in use, a run
    that does not exist): the command line prints it as one line, ``error: ...``, and exits with
    status 2, before anything is stored."""


class StoreBusy(RuntimeError):
    """Another session has held a lock the command needs for longer than it waits: nothing was
    written; the message names the lock and who holds it. Not retried (it is not a fault)."""


class StoreUnavailable(RuntimeError):
    """The database cannot be reached for a reason a person must resolve (e.g. a stale lock file
    of the embedded server); the message says what to do. Nothing was written."""


class OutputUnwritable(RuntimeError):
    """An output could not be written at the last step (a full disk, a folder gone read-only):
    what was half written is removed, so no partial output is left; the message names the output,
    the cause and, where the command stored its work first, that a rerun reuses it."""

    def __init__(self, out: str | PathLike[str], cause: OSError, stored: str = "") -> None:
        self.out, self.cause, self.stored = str(out), cause, stored
        why = cause.strerror or str(cause)
        super().__init__(f"{self.out}: could not be written ({why}); no partial output was left"
                         + (f"; {stored}" if stored else ""))

    def __reduce__(self):  # keep the attributes when pickled (e.g. across worker processes)
        return (type(self), (self.out, self.cause, self.stored))
