"""Read a user-supplied CSV into rows, or fail naming the file, the line and the column.

One reader for every CSV a person hands us (``calibrate``'s L and U, ``score``'s input,
imported score files), built on the dataset loaders' record parser
(:func:`checkworthy.data.delimited.parse_delimited`), so a wrong encoding, a NUL byte, a quoting
error, a wrong field count or an oversized field is reported the same way everywhere.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from checkworthy.data.delimited import field_count_error, parse_delimited
from checkworthy.data.language import EMPTY_AFTER_NORMALISATION, unreadable, visible
from checkworthy.data.records import LoadReport
from checkworthy.errors import DataError

#: a plain decimal number in ASCII digits: not ``nan``, ``inf``, ``1_0`` or ``٠.٥``, all of
#: which Python's float() accepts
DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


def parse_decimal(cell: str) -> float | None:
    """The cell as a float if it is a plain decimal number (``-0`` becomes 0.0), else None."""
    value = cell.strip()
    return float(value) + 0.0 if DECIMAL.fullmatch(value) else None


def read_rows(
    path: Path, required: Sequence[str], allowed: Sequence[str] | None = None
) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """Header and ``(line, {column: value})`` rows; blank lines are skipped.

    ``allowed`` (if given) are the only columns accepted besides ``required``.
    """
    name = str(path)
    try:
        header, records = parse_delimited(path, ",", required, LoadReport(file=name))
    except OSError as exc:
        raise DataError(name, None, None, f"cannot read the file: {exc.strerror}") from exc
    if allowed is not None:
        extra = [c for c in header if c not in set(required) | set(allowed)]
        if extra:
            ok = ", ".join(sorted(set(required) | set(allowed)))
            raise DataError(name, 1, extra[0], f"unexpected column (allowed: {ok})")
    rows: list[tuple[int, dict[str, str]]] = []
    for rec in records:  # characters, sizes and emptiness are checked by the parser
        if len(rec.fields) == 1 and not rec.fields[0].strip():
            continue  # a blank line
        if len(rec.fields) != len(header):
            raise field_count_error(name, rec.line, header, len(rec.fields))
        rows.append((rec.line, dict(zip(header, rec.fields))))
    return header, rows


def require_filled(file: str, line: int, rec: dict[str, str], columns: Sequence[str]) -> None:
    """Each of ``columns`` holds more than white space, else an error naming the first empty one."""
    for col in columns:
        if not rec[col].strip():
            raise DataError(file, line, col, f"empty {col}")


def id_and_text(file: str, line: int, rec: dict[str, str], seen: dict[str, int]) -> tuple[str, str]:
    """A row's id (stripped, non-empty, unique within the file: ``seen`` records it) and text (with
    something to read: :func:`checkworthy.data.language.visible`)."""
    require_filled(file, line, rec, ("id",))
    cid = rec["id"].strip()
    if cid in seen:
        raise DataError(file, line, "id", f"duplicate id {cid!r} (first on line {seen[cid]})")
    seen[cid] = line
    require_filled(file, line, rec, ("text",))
    if not visible(rec["text"]):
        raise DataError(file, line, "text", EMPTY_AFTER_NORMALISATION)
    problem = unreadable(rec["text"])
    if problem:
        raise DataError(file, line, "text", problem)
    return cid, rec["text"]
