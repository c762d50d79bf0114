"""One reader for every dataset file: it applies a :class:`~checkworthy.data.dataset_schemas.DatasetSchema`.

The official files carry known defects (see the datasets README): a glued line, CRLF line
endings, CSV-style quoting inside a TSV, spreadsheet-damaged texts and ids, duplicate texts
with conflicting labels. The reader repairs what can be repaired without guessing, drops what
is lost, and *reports* every such decision in a :class:`~checkworthy.data.records.LoadReport`.
Anything malformed beyond that (missing column, bad label, wrong field count, non-UTF-8 or NUL
bytes) raises :class:`~checkworthy.errors.DataError` naming the file, line and field.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from checkworthy.data.dataset_schemas import DatasetSchema, QuoteReport
from checkworthy.data.delimited import Record, field_count_error, parse_delimited
from checkworthy.data.hashing import PathArg
from checkworthy.data.records import Claim, Dropped, Duplicate, LoadReport, Repair
from checkworthy.data.text import normalise_text
from checkworthy.errors import DataError

__all__ = ["read_claims"]

#: values Excel/LibreOffice write in place of a formula they could not evaluate;
#: a text that *is* one of these has been destroyed (e.g. a sentence that began with "-")
_SPREADSHEET_ERRORS = frozenset({"#NAME?", "#VALUE!", "#REF!", "#N/A", "#DIV/0!", "#NULL!", "#NUM!"})
_ID = re.compile(r"\d+")
#: a tweet id a spreadsheet rounded to a float (``1.37041E+18``): the tweet can no longer be named
_ROUNDED_ID = re.compile(r"\d(\.\d+)?E\+\d+", re.IGNORECASE)

_Row = tuple[list[str], list[bool]]


def read_claims(
    path: PathArg,
    schema: DatasetSchema,
    dataset: str,
    split: str = "",
    *,
    expected_sha256: str | None = None,
) -> tuple[list[Claim], LoadReport]:
    """The claims of one file of ``dataset`` laid out as ``schema`` says, and the report.

    ``split`` is copied onto every claim unless the schema reads it from a column (then it is
    ignored); ``expected_sha256``, if given, is compared with the file's (a mismatch is noted,
    not raised: the data team may edit files on purpose).
    """
    if schema.split is None and not split:
        raise ValueError(f"split must be a non-empty name such as {schema.split_example}")
    file = str(path)
    report = LoadReport(file=file)
    header, records = parse_delimited(path, schema.delimiter, schema.required, report)
    label = next((name for name in schema.label.columns if name in header), None)
    if label is None:
        raise DataError(file, 1, schema.label.columns[0], f"no label column (one of "
                        f"{list(schema.label.columns)}); header is {header}")
    reader = _FileReader(schema, dataset, split, report, header, label)
    claims: list[Claim] = []
    for rec in records:
        if rec.fields == [""]:
            report.dropped.append(Dropped(rec.line, "blank line"))
            continue
        for fields, quoted in reader.rows(rec):
            claim = reader.claim(rec.line, fields, quoted)
            if claim is not None:
                claims.append(claim)
    report.rows_kept = len(claims)
    reader.report_quotes()
    _find_duplicates(claims, report)
    if schema.note_backslashes:
        _note_backslashes(claims, report)
    _note_splits(schema, split, claims, report)
    _check_sha(report, expected_sha256)
    return claims, report


@dataclass
class _FileReader:
    """The reading of one file: its columns, its kind of label, the quoted texts counted so far."""

    schema: DatasetSchema
    dataset: str
    split: str
    report: LoadReport
    header: list[str]
    label: str  # the file's label column
    col: dict[str, int] = field(init=False)
    kind: Mapping[str, int] | None = field(init=False)  # the file's label values, once known
    n_quoted: int = 0
    n_doubled: int = 0

    def __post_init__(self) -> None:
        self.col = {name: i for i, name in enumerate(self.header)}
        kinds = self.schema.label.kinds
        self.kind = kinds[0] if len(kinds) == 1 else None

    def rows(self, rec: Record) -> list[_Row]:
        """The rows of a record: more than one where a missing newline glued a label to the
        next row's id (``...\\tNo29286\\t...``: n + k*(n-1) fields, split while the pattern holds)."""
        glued, n = self.schema.label.glued, len(self.header)
        at_ends = self.col[self.schema.id_column] == 0 and self.col[self.label] == n - 1
        rows: list[_Row] = []
        fields, quoted = rec.fields, rec.quoted
        while (
            glued is not None
            and at_ends
            and len(fields) > n
            and (len(fields) - n) % (n - 1) == 0
            and not quoted[n - 1]
            and (m := glued.fullmatch(fields[n - 1]))
        ):
            rows.append((fields[: n - 1] + [m.group(1)], quoted[:n]))
            self.report.repairs.append(Repair(
                rec.line, self.label,
                f"split glued rows: {fields[n - 1]!r} -> label {m.group(1)!r} "
                f"+ next row starting with id {m.group(2)!r} (missing newline)",
            ))
            fields, quoted = [m.group(2)] + fields[n:], [False] + quoted[n:]
        if len(fields) != n:
            raise field_count_error(self.report.file, rec.line, self.header, len(fields))
        rows.append((fields, quoted))
        return rows

    def claim(self, line: int, fields: list[str], quoted: list[bool]) -> Claim | None:
        """The claim of one row, or ``None`` for a row dropped (reported)."""
        schema, report = self.schema, self.report
        report.rows_read += 1
        sid = fields[self.col[schema.id_column]].strip()
        if schema.rounded_ids and _ROUNDED_ID.fullmatch(sid):
            report.dropped.append(Dropped(line, f"{schema.id_column} {sid!r} is a spreadsheet's rounding of "
                                          "the id: the tweet cannot be named, nor matched across files"))
            return None
        if not _ID.fullmatch(sid):
            raise DataError(report.file, line, schema.id_column, f"must be an integer id, got {sid!r}")
        value, label = self.label_of(line, fields)
        raw_text = fields[self.col[schema.text_column]]
        self.n_quoted += quoted[self.col[schema.text_column]]
        self.n_doubled += quoted[self.col[schema.text_column]] and '"' in raw_text
        text = _clean_text(line, raw_text, report, schema.lost_text_hint.format(id=sid))
        if text is None:
            return None
        keep_label = schema.label.keep_original
        left_out = (schema.id_column, schema.text_column) + (() if keep_label else (self.label,))
        extra: dict[str, Any] = {name: fields[i] for name, i in self.col.items() if name not in left_out}
        if keep_label:
            extra[self.label] = int(value)
        extra["line"] = line
        split = schema.split.of(fields[self.col[schema.split.column]]) if schema.split else self.split
        return Claim(dataset=self.dataset, source_id=sid, text=text, label=label, split=split, extra=extra)

    def label_of(self, line: int, fields: list[str]) -> tuple[str, int]:
        """A row's label value and label; the file's first row sets its kind of values."""
        rule = self.schema.label
        value = fields[self.col[self.label]]
        if rule.strip:
            value = value.strip()
        if self.kind is None:
            self.kind = next((kind for kind in rule.kinds if value in kind), None)
        if self.kind is not None and value in self.kind:
            return value, self.kind[value]
        if len(rule.kinds) == 1:
            problem = f"must be {rule.expected}, got {value!r}"
        else:
            expected = " or ".join(sorted(self.kind)) if self.kind else rule.expected
            problem = f"must be {expected} (as the file's first row), got {value!r}"
        raise DataError(self.report.file, line, self.label, problem)

    def report_quotes(self) -> None:
        """Report the CSV-style quoted texts the parser decoded, as the schema words it."""
        quotes, column = self.schema.quotes, self.schema.text_column
        if quotes is QuoteReport.DOUBLED_NOTE:
            self.report.notes.append(
                f'{self.n_doubled:,} texts contained CSV doubled quotes (""), decoded to " '
                "by the parser (same result as Python's csv module)"
            )
        elif self.n_quoted:
            doubled = (f"{self.n_doubled:,} of them with doubled quotes" if
                       quotes is QuoteReport.UNQUOTED_AND_DOUBLED else "doubled quotes")
            self.report.repairs.append(Repair(
                None, column, f'unquoted {self.n_quoted:,} CSV-style quoted texts ({doubled} "" -> ")'))


def _note_splits(schema: DatasetSchema, split: str, claims: Sequence[Claim], report: LoadReport) -> None:
    """Count each split's rows and check-worthy rows (and, for splits read from a column, the
    rows of conflicting-label groups)."""
    if schema.split is None:
        report.notes.append(f"split {split}: {len(claims):,} rows kept, {sum(c.label for c in claims):,} "
                            f"{schema.positive}")
        return
    for name in schema.split.names:
        part = [c for c in claims if c.split == name]
        n_conf = sum(1 for d in report.conflicts for s in d.splits if s == name)
        report.notes.append(
            f"split {name}: {len(part):,} rows, {sum(c.label for c in part):,} check-worthy; "
            f"{n_conf} rows in conflicting-label groups"
        )


def _find_duplicates(claims: Sequence[Claim], report: LoadReport) -> None:
    """Record same-id and same-text groups (kept; reported only)."""
    for kind, keyf in (("id", lambda c: c.source_id), ("text", lambda c: normalise_text(c.text))):
        groups: dict[str, list[Claim]] = defaultdict(list)
        for c in claims:
            groups[keyf(c)].append(c)
        for key, grp in groups.items():
            if len(grp) > 1 and key:
                report.duplicates.append(
                    Duplicate(
                        kind=kind,
                        key=key,
                        rows=tuple(int(c.extra["line"]) for c in grp),
                        source_ids=tuple(c.source_id for c in grp),
                        labels=tuple(c.label for c in grp),
                        splits=tuple(c.split for c in grp),
                    )
                )
    ids = [d for d in report.duplicates if d.kind == "id"]
    texts = [d for d in report.duplicates if d.kind == "text"]
    conflicts = [d for d in texts if d.conflicting]
    report.notes.append(f"duplicate ids: {len(ids)} (rows {sum(len(d.rows) for d in ids)}); kept")
    report.notes.append(
        f"duplicate texts (normalised): {len(texts)} texts on {sum(len(d.rows) for d in texts)} "
        f"rows, {len(conflicts)} with conflicting labels "
        f"({sum(len(d.rows) for d in conflicts)} rows); all kept, none relabelled"
    )


def _check_sha(report: LoadReport, expected: str | None) -> None:
    """Note whether the file is the documented release (a mismatch is noted, not raised)."""
    if expected is None:
        return
    if report.sha256 == expected.strip().lower():
        report.notes.append("sha256 matches the expected value")
    else:
        report.notes.append(
            f"sha256 MISMATCH: expected {expected}, got {report.sha256} "
            "(file differs from the documented release; counts may differ)"
        )


def _clean_text(file_line: int, text: str, report: LoadReport, recoverable_from: str = "") -> str | None:
    """Strip whitespace (reported) and return ``None`` for texts that are lost."""
    if text.strip() in _SPREADSHEET_ERRORS:
        report.dropped.append(
            Dropped(
                file_line,
                f"Text is the spreadsheet error {text!r}: the sentence was destroyed "
                f"by a spreadsheet round-trip{recoverable_from}",
            )
        )
        return None
    stripped = text.strip()
    if not stripped:
        report.dropped.append(Dropped(file_line, "Text is empty"))
        return None
    if stripped != text:
        report.repairs.append(Repair(file_line, "Text", "stripped leading/trailing whitespace"))
    return stripped


def _note_backslashes(claims: Sequence[Claim], report: LoadReport) -> None:
    """Note texts holding a backslash: debris of a lost escaped quote (``said, \\President``).

    Kept verbatim: the intended quotes cannot be restored without guessing, and the
    texts are what the benchmark's figures were computed on.
    """
    hits = [c for c in claims if "\\" in c.text]
    if hits:
        where = ", ".join(f"line {c.extra['line']} (id {c.source_id})" for c in hits)
        report.notes.append(
            f"{len(hits)} texts contain a backslash, debris of a lost escaped quote; kept verbatim: {where}"
        )

