"""What the command line checks before anything is stored: numeric options, names, run ids and
output paths.

Each check is an argparse ``type`` (or runs right after parsing), so a bad value stops the
command with one line naming the option, before the database starts or a file is written.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path

from checkworthy.data.outputs import cannot_create_in
from checkworthy.errors import UsageError

#: a lineage name a person gives (``--name``): safe in a URL and a shell, and never one of the
#: names the package makes, which all hold a ':' (``upload:<hash>:labeled``, ``clef2024:calibration:...``)
LINEAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: the largest whole number the store holds (a bigint): a run or claim id, a count, never above it
MAX_BIGINT = 2**63 - 1
#: the largest TCP port
MAX_PORT = 65535


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def open_unit(text: str) -> float:
    """A level strictly between 0 and 1 (``--alpha``)."""
    value = _number(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must lie strictly between 0 and 1, got {text}")
    return value


def closed_unit(text: str) -> float:
    """A probability in [0, 1] (``--threshold``)."""
    value = _number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {text}")
    return value


def share(text: str) -> float:
    """A share above 0 and at most 1 (``--slow-share``)."""
    value = _number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must lie above 0 and at most 1, got {text}")
    return value


def positive_int(text: str) -> int:
    """A count or an id of at least 1 (``--k``, ``--limit``, ``--run``), at most what the store
    holds (:data:`MAX_BIGINT`), so that it never reaches a query as a number out of range."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    if value > MAX_BIGINT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BIGINT}, got {text}")
    return value


def port(text: str) -> int:
    """A TCP port to listen on, 1 to 65535 (``--port``)."""
    value = positive_int(text)
    if value > MAX_PORT:
        raise argparse.ArgumentTypeError(f"a port is at most {MAX_PORT}, got {text}")
    return value


def claim_ref(text: str) -> str:
    """A claim's source id, or ``id:<claim id>`` with a claim id: ASCII digits (``str.isdigit``
    also takes '²'), at most :data:`MAX_BIGINT`."""
    digits = text[3:]
    if text.startswith("id:") and not (digits.isascii() and digits.isdigit()
                                         and len(digits) <= 19 and int(digits) <= MAX_BIGINT):
        raise argparse.ArgumentTypeError(f"id: must be followed by a claim id (digits, at most "
                                         f"{MAX_BIGINT}), got {text!r}")
    return text


def lineage_name(text: str) -> str:
    """A lineage name (``--name``): 1 to 64 letters, digits, '.', '_' or '-', starting with a
    letter or a digit."""
    if not LINEAGE_NAME.match(text):
        raise argparse.ArgumentTypeError(f"1 to 64 letters, digits, '.', '_' or '-', starting with a letter "
                                         f"or a digit, got {text!r}")
    return text


def run_ids(given: str, prefix: str = "") -> list[int]:
    """The distinct run ids, sorted, of ``--run 3,5`` (or, with ``prefix`` ``run:``, of
    ``run:3,5``); a :class:`UsageError` shows the form expected."""
    try:
        ids = sorted({int(x) for x in given.removeprefix(prefix).split(",") if x.strip()})
    except ValueError:
        raise UsageError(f"expected {prefix or '--run '}<id>[,<id>...], got {given!r}") from None
    if ids and ids[-1] > MAX_BIGINT:
        raise UsageError(f"{given}: a run id is at most {MAX_BIGINT}")
    return ids


def output_file(option: str, out: str, inputs: Sequence[str]) -> str | None:
    """Why ``out`` cannot be written as a new file (None when it can): a directory or another
    non-regular file (a device, a pipe), a missing folder, a folder where no file can be created
    (read-only, ``/proc``, ``/sys``: tried, see :func:`~checkworthy.data.outputs.cannot_create_in`),
    or one of the command's input files. Every command with an output file asks this before it
    stores anything."""
    path = Path(out)
    if path.is_dir():
        return f"{option} {out}: is a directory; name a file"
    if path.exists() and not path.is_file():
        return f"{option} {out}: exists and is not a regular file; name a file"
    folder = path.parent
    if folder.exists() and not folder.is_dir():
        return f"{option} {out}: {folder} is a file, so no file can be made under it"
    if not folder.is_dir():
        return f"{option} {out}: no such directory {folder}; create it first"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{option} {out}: the directory {folder} is not writable"
    why = cannot_create_in(folder)
    if why:
        return f"{option} {out}: no file can be created in {folder} ({why}); write the output elsewhere"
    for given in inputs:
        same_path = path.resolve() == Path(given).resolve()  # also through a symlink
        if same_path or (path.exists() and Path(given).exists() and path.samefile(given)):  # a hard link
            return f"{option} {out}: is also an input file ({given}); write the output elsewhere"
    return None


def output_dir(option: str, out: str) -> str | None:
    """Why ``out`` cannot be (or be created as) a folder to write files in (None when it can): a
    file, a folder whose own folder is missing (a mistyped path is not created), or a nearest
    existing folder where nothing can be created (read-only, ``/proc``, ``/sys``)."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        return f"{option} {out}: is a file; name a folder"
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        return f"{option} {out}: {existing} is a file, so no folder can be made under it"
    if existing not in (path, path.parent):
        return f"{option} {out}: no such directory {path.parent}; create it first"
    why = cannot_create_in(existing)
    if why:
        return f"{option} {out}: nothing can be created in {existing} ({why}); write the output elsewhere"
    return None
