"""What the command line checks before anything is stored: numeric options and output paths.

Each check is an argparse ``type`` (or runs right after parsing), so a bad value stops the
command with one line naming the option, before the database starts or a file is written.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from pathlib import Path


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


def positive_int(text: str) -> int:
    """A count of at least 1 (``--k``, ``--limit``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def claim_ref(text: str) -> str:
    """A claim's source id, or ``id:<claim id>`` with a whole number."""
    if text.startswith("id:") and not text[3:].isdigit():
        raise argparse.ArgumentTypeError(f"id: must be followed by a claim id (digits), got {text!r}")
    return text


def output_file(option: str, out: str, inputs: Sequence[str]) -> str | None:
    """Why ``out`` cannot be written as a new file (None when it can): a directory, a missing or
    read-only folder, or one of the command's input files."""
    path = Path(out)
    if path.is_dir():
        return f"{option} {out}: is a directory; name a file"
    folder = path.parent
    if not folder.is_dir():
        return f"{option} {out}: no such directory {folder}; create it first"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{option} {out}: the directory {folder} is not writable"
    for given in inputs:
        same_path = path.resolve() == Path(given).resolve()  # also through a symlink
        if same_path or (path.exists() and Path(given).exists() and path.samefile(given)):  # a hard link
            return f"{option} {out}: is also an input file ({given}); write the output elsewhere"
    return None
