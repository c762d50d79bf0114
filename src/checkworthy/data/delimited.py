"""One small quote-aware parser for the delimited files every reader takes (CSV and TSV).

RFC 4180 rules: a field that starts with ``"`` runs to the next lone ``"``, ``""`` inside it
stands for one ``"``. For valid input it gives exactly what Python's :mod:`csv` module gives
(the tests check this on the real files); unlike :mod:`csv` it reports the line *and field* of
a quoting error. A BOM and CRLF line endings are normalised and reported; NUL and non-UTF-8
bytes raise :class:`~checkworthy.errors.DataError` naming the file, line and field.
"""

from __future__ import annotations

import codecs
import hashlib
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from checkworthy.data.hashing import PathArg
from checkworthy.data.records import LoadReport, Repair
from checkworthy.errors import DataError

__all__ = ["MAX_FIELD_CHARS", "Record", "field_count_error", "parse_delimited"]


class _ParseError(Exception):
    def __init__(self, line: int, field_index: int, problem: str) -> None:
        super().__init__(problem)
        self.line, self.field_index, self.problem = line, field_index, problem


_QUOTED = re.compile(r'"((?:[^"]|"")*+)"')


class Record(NamedTuple):
    """One data record: the file line it starts on, its fields, and which of them were quoted."""

    line: int
    fields: list[str]
    quoted: list[bool]


def _records(text: str, delimiter: str) -> Iterator[Record]:
    """Split ``text`` (``\\n`` line ends only) into records, RFC 4180 style.

    A quote inside an unquoted field is literal (as in :mod:`csv`); a quoted field
    may span lines; after a closing quote only a delimiter or line end may follow.
    A trailing newline does not produce an empty record.
    """
    plain = re.compile(f"[^{re.escape(delimiter)}\n]*")
    pos, line, end = 0, 1, len(text)
    while pos < end:
        start = line
        fields: list[str] = []
        quoted: list[bool] = []
        while True:
            if text.startswith('"', pos):
                m = _QUOTED.match(text, pos)
                if m is None:
                    raise _ParseError(start, len(fields), "opening quote is never closed")
                value = m.group(1)
                line += value.count("\n")
                fields.append(value.replace('""', '"'))
                quoted.append(True)
                pos = m.end()
                if pos < end and text[pos] not in (delimiter, "\n"):
                    raise _ParseError(
                        start,
                        len(fields) - 1,
                        f"unexpected {text[pos]!r} after the closing quote "
                        "(a quote inside a quoted field must be doubled)",
                    )
            else:
                m = plain.match(text, pos)
                assert m is not None  # the pattern matches the empty string
                fields.append(m.group())
                quoted.append(False)
                pos = m.end()
            if pos < end and text[pos] == delimiter:
                pos += 1
                continue
            pos += 1  # newline (or past the end)
            line += 1
            break
        yield Record(start, fields, quoted)


def _read_text(path: PathArg, report: LoadReport) -> str:
    """Read and decode a file, normalising what is harmless (BOM, CRLF) and reporting it.

    Undecodable bytes are kept as surrogates (``surrogateescape``) so that the record
    parser can later name the line and field that hold them.
    """
    raw = Path(path).read_bytes()
    report.sha256 = hashlib.sha256(raw).hexdigest()
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8) :]
        report.repairs.append(Repair(None, "*", "removed UTF-8 byte-order mark"))
    text = raw.decode("utf-8", errors="surrogateescape")
    n_crlf = text.count("\r\n")
    if n_crlf:
        text = text.replace("\r\n", "\n")
        report.repairs.append(Repair(None, "*", f"converted {n_crlf:,} CRLF line endings to LF"))
    return text


_SURROGATE = re.compile("[\udc80-\udcff]")


def _check_chars(file: str, line: int, name: str, value: str) -> None:
    """Reject NUL and non-UTF-8 bytes: both mean a wrong or corrupt file, not a bad row."""
    if "\x00" in value:
        raise DataError(file, line, name, "contains a NUL byte (binary or UTF-16 file?)")
    m = _SURROGATE.search(value)
    if m:
        byte = ord(m.group()) - 0xDC00
        raise DataError(file, line, name, f"not valid UTF-8 (byte 0x{byte:02x})")


def _column_name(header: Sequence[str], i: int) -> str:
    return header[i] if i < len(header) else f"#{i + 1} (beyond the last column {header[-1]!r})"


#: a longer field is damage (a lost closing quote swallowing the file), not a sentence
MAX_FIELD_CHARS = 100_000


def parse_delimited(
    path: PathArg, delimiter: str, required: Sequence[str], report: LoadReport
) -> tuple[list[str], Iterator[Record]]:
    """Header and data records of a delimited file; checks header and characters."""
    file = str(path)
    text = _read_text(path, report)
    records = _records(text, delimiter)

    def checked(it: Iterator[Record], header: Sequence[str]) -> Iterator[Record]:
        n = 0
        try:
            for rec in it:
                for i, value in enumerate(rec.fields):
                    _check_chars(file, rec.line, _column_name(header, i), value)
                    if len(value) > MAX_FIELD_CHARS:
                        raise DataError(file, rec.line, _column_name(header, i),
                                        f"longer than {MAX_FIELD_CHARS:,} characters")
                n += not (len(rec.fields) == 1 and not rec.fields[0].strip())  # blank lines aside
                yield rec
        except _ParseError as e:
            raise DataError(file, e.line, _column_name(header, e.field_index), e.problem) from None
        if n == 0:
            raise DataError(file, 2, required[0], "no data rows after the header")

    try:
        first = next(records, None)
    except _ParseError as e:
        raise DataError(file, e.line, f"header field #{e.field_index + 1}", e.problem) from None
    if first is None or first.fields == [""]:
        raise DataError(file, 1, required[0],
                        f"file is empty (no header line; expected {', '.join(required)})")
    header = first.fields
    for i, name in enumerate(header):
        _check_chars(file, 1, f"header field #{i + 1}", name)
    dupes = sorted(n for n, c in Counter(header).items() if c > 1)
    if dupes:
        raise DataError(file, 1, dupes[0], "column appears more than once in the header")
    for name in required:
        if name not in header:
            raise DataError(file, 1, name, f"required column missing; header is {header}")
    return header, checked(records, header)


def field_count_error(file: str, line: int, header: Sequence[str], n: int) -> DataError:
    """The error for a record of ``n`` fields under ``header``, naming the first missing or extra field."""
    name = header[n] if n < len(header) else _column_name(header, len(header))
    return DataError(file, line, name, f"expected {len(header)} fields, got {n}")

