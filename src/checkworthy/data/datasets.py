"""Loaders for ClaimBuster, CLEF 2024 CheckThat! Task 1 (English), the CheckThat! 2021/2022
English tweets (Task 1A) and the CheckThat! tweets in Arabic, Spanish, Dutch, Bulgarian and
Turkish (2022 and 2024 train and dev files), and the splits.

The official files carry known defects (see the datasets README): a glued line, CRLF
line endings, CSV-style quoting inside a TSV, spreadsheet-damaged texts, duplicate
texts with conflicting labels. Each loader repairs what can be repaired without
guessing, drops what is lost, and *reports* every such decision in a
:class:`LoadReport`, so that the counts behind a result can be traced to the file.
Anything malformed beyond that (missing column, bad label, wrong field count,
non-UTF-8 or NUL bytes) raises :class:`~checkworthy.errors.DataError` naming the
file, line and field.

Both formats are parsed by one small quote-aware parser (RFC 4180 rules: a field
that starts with ``"`` runs to the next lone ``"``, ``""`` inside it stands for one
``"``). For valid input it gives exactly what Python's :mod:`csv` module gives (the
tests check this on the real files); unlike :mod:`csv` it reports the line *and
field* of a quoting error.
"""

from __future__ import annotations

import codecs
import hashlib
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any, NamedTuple

from checkworthy.config import DATA_DIR
from checkworthy.errors import DataError
from checkworthy.method.sampling import balanced_sample

__all__ = [
    "CLAIMBUSTER",
    "CLEF",
    "CLEF_N_PER_CLASS",
    "TWEETS",
    "TWEET_FILES",
    "KNOWN_SHA256",
    "MULTILINGUAL_TWEETS",
    "RAW_FOLDERS",
    "Claim",
    "Dropped",
    "Duplicate",
    "LanguageTweets",
    "LoadReport",
    "Repair",
    "build_splits",
    "claimbuster_split",
    "load_claimbuster",
    "load_clef",
    "load_dataset",
    "load_tweets",
    "normalise_text",
    "sha256_file",
    "shared_texts",
]

CLAIMBUSTER = "claimbuster"
CLEF = "clef2024"
TWEETS = "tweets"

#: the tweet files under ``data/raw/tweets`` by split: the two train files (L's pool, CT22 first:
#: its label wins for a tweet in both), the dev files and CT21's test (U is CT22 dev)
TWEET_FILES = {
    "ct22-train": "CT22_english_1A_checkworthy_train.tsv",
    "ct21-train": "CT21_1A_english_train_v1.tsv",
    "ct22-dev": "CT22_english_1A_checkworthy_dev.tsv",
    "ct21-dev": "CT21_1A_english_dev_v1.tsv",
    "ct21-test": "CT21_1A_english_test.tsv",
}



class LanguageTweets(NamedTuple):
    """One language's CheckThat! tweet files: ``data/raw/multilingual/<folder>/<file>`` by split."""

    language: str  # ISO 639-1
    folder: str
    files: Mapping[str, str]


#: the tweets in other languages, one dataset a language, named ``tweets-`` and its ISO 639-1 code.
#: Only train and dev files (2022, 2024) are in the project: no CheckThat! test split of 2024 or later
MULTILINGUAL_TWEETS: dict[str, LanguageTweets] = {
    "tweets-ar": LanguageTweets("ar", "arabic", {"ct24-train": "CT24_checkworthy_arabic_train.tsv"}),
    "tweets-es": LanguageTweets("es", "spanish", {
        "ct22-train": "CT22_spanish_1A_checkworthy_train.tsv",
        "ct22-dev": "CT22_spanish_1A_checkworthy_dev.tsv",
        "ct22-dev-test": "CT22_spanish_1A_checkworthy_dev_test.tsv",
    }),
    "tweets-nl": LanguageTweets("nl", "dutch", {"ct24-train": "CT24_checkworthy_dutch_train.tsv"}),
    "tweets-bg": LanguageTweets("bg", "bulgarian", {
        "ct22-train": "CT22_bulgarian_1A_checkworthy_train.tsv",
        "ct22-dev": "CT22_bulgarian_1A_checkworthy_dev.tsv",
    }),
    "tweets-tr": LanguageTweets("tr", "turkish", {
        "ct22-train": "CT22_turkish_1A_checkworthy_train.tsv",
        "ct22-dev": "CT22_turkish_1A_checkworthy_dev.tsv",
    }),
}

#: the folders under ``data/raw`` the loaders read (a checkout lacking one has an older ``data/``)
RAW_FOLDERS = ("claimbuster", "clef2024", "tweets",
               *(f"multilingual/{t.folder}" for t in MULTILINGUAL_TWEETS.values()))

#: per-class size of the CLEF calibration set (paper: 2,406 = 2 x 1,203)
CLEF_N_PER_CLASS = 1203

#: sha256 of the official files as listed in the datasets README, keyed by file name
KNOWN_SHA256: dict[str, str] = {
    "crowdsourced.csv": "11026f911d96476daed6c9a83ba0fbf3555598c04ef9b7fa567eeadee8693843",
    "CT24_checkworthy_english_train.tsv": (
        "c86e5338b1ffe16b23334574ef6a994987e54bdf9d1dbdaeb747e6e55266a193"
    ),
    "CT24_checkworthy_english_dev-test.tsv": (
        "aaf9e9427545c1213465e8857da00fb9fe4d4a7c337bab2ae0a75150fa8c01f2"
    ),
    "CT22_english_1A_checkworthy_train.tsv": (
        "c48a9e17af37811b217da7344ce384cbafb4c0d1b3d21fc2afdc29eafe8c419d"
    ),
    "CT22_english_1A_checkworthy_dev.tsv": (
        "e341d06059ce7bc459e346a3b6dc63b0b196809593491024a651f2052e83b26d"
    ),
    "CT21_1A_english_train_v1.tsv": "c0a26bb7e35a664c072d5d7a5b159b3d48f54e5ffc5c321cfe7a7a4d518b0f0d",
    "CT21_1A_english_dev_v1.tsv": "b3bb25415a98ac2ea21538f6ecbf797c8156e8a50e6633e938e5df5307493e3d",
    "CT21_1A_english_test.tsv": "5efa8c4ba48216f3c9a452f04ad4eef232cd196265bbfe949b754d3538356668",
    "CT24_checkworthy_arabic_train.tsv": "201631e0bed24b148e767b807fa6d088854d49e0d3ce0e394af063135c65553b",
    "CT22_spanish_1A_checkworthy_train.tsv": (
        "67ce48a90038b3cc581b51683ff6f0aa542ae8f996fc3c0225eabd1429bf1977"
    ),
    "CT22_spanish_1A_checkworthy_dev.tsv": "5b374c429e9100ad3f5b920656e03d825f1f81b37ef6c3d7dff0a92e8226c90d",
    "CT22_spanish_1A_checkworthy_dev_test.tsv": (
        "444c4aa3dccec6748be43475031a5de8c861d511337b91cfd8d2e4c3fc1ee622"
    ),
    "CT24_checkworthy_dutch_train.tsv": "a72255ee369ae93b703dc2b0aaefdd5fdd115ecd24d93055e2e444240b0cfa61",
    "CT22_bulgarian_1A_checkworthy_train.tsv": (
        "aea3e634ce91dd2bc09cc7c92f2048d9263e701a4f0bfed05da0e5a0c4e047ad"
    ),
    "CT22_bulgarian_1A_checkworthy_dev.tsv": (
        "b6b9d987ec0c51517b194d97e014daad648db9c77ea64275cd8b89f0fa8f73b0"
    ),
    "CT22_turkish_1A_checkworthy_train.tsv": (
        "f492b51558142328a15cfa506fec0fcd3767e5eb68d4c7a48ae7019dbb6f8e2d"
    ),
    "CT22_turkish_1A_checkworthy_dev.tsv": "d7eb7a3ad1baa729f3f0a19be5f75091c6c1de9f50c2853789b2119ada4ac5b0",
}

#: values Excel/LibreOffice write in place of a formula they could not evaluate;
#: a text that *is* one of these has been destroyed (e.g. a sentence that began with "-")
_SPREADSHEET_ERRORS = frozenset({"#NAME?", "#VALUE!", "#REF!", "#N/A", "#DIV/0!", "#NULL!", "#NUM!"})

_CLAIMBUSTER_COLUMNS = ("Sentence_id", "Text", "File_id", "Verdict")
_CLEF_COLUMNS = ("Sentence_id", "Text", "class_label")
_CLEF_LABELS = {"Yes": 1, "No": 0}
_GLUED_LABEL = re.compile(r"(Yes|No)(\d+)")
_ID = re.compile(r"\d+")
#: a tweet file's label column: CT22's and CT24's, CT21's, CT21 dev's
_TWEET_LABELS = ("class_label", "check_worthiness", "claim_worthiness")
#: a tweet file's label values, one kind a file: 2021's and 2022's, 2024's
_TWEET_LABEL_VALUES = ({"0": 0, "1": 1}, {"No": 0, "Yes": 1})
#: a tweet id a spreadsheet rounded to a float (``1.37041E+18``): the tweet can no longer be named
_ROUNDED_ID = re.compile(r"\d(\.\d+)?E\+\d+", re.IGNORECASE)

Path_ = str | PathLike[str]


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Claim:
    """One labelled sentence.

    ``label`` is 1 for check-worthy, 0 otherwise. ``split`` is the dataset's own
    partition (ClaimBuster: ``"2012"``, ``"2016"``, ``"other"``; CLEF: the file's
    split name). ``extra`` keeps the source columns that are not core fields (e.g.
    ``File_id``, ``Verdict``) plus ``line``, the file line the row came from; it is
    excluded from hashing so claims can live in sets.
    """

    dataset: str
    source_id: str
    text: str
    label: int
    split: str
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.label not in (0, 1) or isinstance(self.label, bool):
            raise ValueError(f"label must be 0 or 1, got {self.label!r}")


class Repair(NamedTuple):
    """A change made to the file's content; ``row`` is ``None`` for file-wide fixes."""

    row: int | None
    field: str
    action: str


class Dropped(NamedTuple):
    """A row left out, with the reason."""

    row: int
    reason: str


@dataclass(frozen=True)
class Duplicate:
    """Rows of one file sharing a ``source_id`` (``kind="id"``) or a normalised text
    (``kind="text"``). Kept in the data; reported so that a reader can judge them."""

    kind: str
    key: str
    rows: tuple[int, ...]
    source_ids: tuple[str, ...]
    labels: tuple[int, ...]
    splits: tuple[str, ...]

    @property
    def conflicting(self) -> bool:
        """True if the rows disagree on the label."""
        return len(set(self.labels)) > 1


@dataclass
class LoadReport:
    """What a loader read, kept, repaired and dropped, for provenance.

    ``rows_read`` counts data records after un-gluing glued lines (so it is the
    number of rows the file was meant to hold); ``rows_kept = rows_read -
    len(dropped)``.
    """

    file: str
    sha256: str = ""
    rows_read: int = 0
    rows_kept: int = 0
    repairs: list[Repair] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def conflicts(self) -> list[Duplicate]:
        """Same-text groups whose labels disagree."""
        return [d for d in self.duplicates if d.kind == "text" and d.conflicting]

    def summary(self, max_items: int = 10) -> str:
        """Multi-line human summary; long lists are cut after ``max_items`` entries."""

        def listing(title: str, items: Sequence[str]) -> list[str]:
            if not items:
                return []
            out = [f"{title} ({len(items):,}):"]
            out += [f"  - {s}" for s in items[:max_items]]
            if len(items) > max_items:
                out.append(f"  ... and {len(items) - max_items:,} more")
            return out

        def at(row: int | None) -> str:
            return "whole file" if row is None else f"line {row}"

        dup_ids = [d for d in self.duplicates if d.kind == "id"]
        dup_texts = [d for d in self.duplicates if d.kind == "text"]
        lines = [
            f"{self.file}: read {self.rows_read:,} rows, kept {self.rows_kept:,}, "
            f"dropped {len(self.dropped):,}, repairs {len(self.repairs):,}",
            f"sha256 {self.sha256}",
        ]
        lines += listing("repairs", [f"{at(r.row)}, {r.field}: {r.action}" for r in self.repairs])
        lines += listing("dropped", [f"{at(d.row)}: {d.reason}" for d in self.dropped])
        lines += listing(
            "duplicate ids",
            [f"id {d.key} on lines {list(d.rows)}, labels {list(d.labels)}" for d in dup_ids],
        )
        lines += listing(
            "duplicate texts",
            [
                f"{'CONFLICT ' if d.conflicting else ''}{d.key[:60]!r}: ids {list(d.source_ids)}, "
                f"labels {list(d.labels)}, splits {list(d.splits)}"
                for d in sorted(dup_texts, key=lambda d: not d.conflicting)
            ],
        )
        lines += listing("notes", self.notes)
        return "\n".join(lines)


# --------------------------------------------------------------------------- helpers


def sha256_file(path: Path_, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes (streamed; identifies the exact data used)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_size):
            h.update(chunk)
    return h.hexdigest()


_NON_WORD = re.compile(r"[^\w\s]+")


def normalise_text(text: str) -> str:
    """Comparison key for texts: NFKC, case-folded, punctuation dropped, spaces collapsed.

    Deliberately loose, because it is used to *find* duplicates and leakage: two
    sentences that differ only in case, quotes or a final full stop count as one.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_NON_WORD.sub(" ", folded).split())


def shared_texts(
    calibration: Iterable[Claim], test: Iterable[Claim]
) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Texts present on both sides of a split (leakage guard).

    Returns
    -------
    dict
        ``normalise_text(text) -> (calibration source_ids, test source_ids)`` for every
        normalised text found in both; empty when the split is clean. Texts that
        normalise to ``""`` (pure punctuation) are ignored.
    """

    def index(claims: Iterable[Claim]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for c in claims:
            key = normalise_text(c.text)
            if key:
                out[key].append(c.source_id)
        return out

    left, right = index(calibration), index(test)
    return {k: (tuple(left[k]), tuple(right[k])) for k in sorted(left.keys() & right.keys())}


class _ParseError(Exception):
    def __init__(self, line: int, field_index: int, problem: str) -> None:
        super().__init__(problem)
        self.line, self.field_index, self.problem = line, field_index, problem


_QUOTED = re.compile(r'"((?:[^"]|"")*+)"')


class _Record(NamedTuple):
    line: int
    fields: list[str]
    quoted: list[bool]


def _records(text: str, delimiter: str) -> Iterator[_Record]:
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
        yield _Record(start, fields, quoted)


def _read_text(path: Path_, report: LoadReport) -> str:
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
    path: Path_, delimiter: str, required: Sequence[str], report: LoadReport
) -> tuple[list[str], Iterator[_Record]]:
    """Header and data records of a delimited file; checks header and characters."""
    file = str(path)
    text = _read_text(path, report)
    records = _records(text, delimiter)

    def checked(it: Iterator[_Record], header: Sequence[str]) -> Iterator[_Record]:
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
    name = header[n] if n < len(header) else _column_name(header, len(header))
    return DataError(file, line, name, f"expected {len(header)} fields, got {n}")


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


# --------------------------------------------------------------------------- loaders


def claimbuster_split(file_id: str) -> str:
    """ClaimBuster partition by debate year: ``"2012"``, ``"2016"`` or ``"other"``."""
    for year in ("2012", "2016"):
        if file_id.startswith(year):
            return year
    return "other"


def load_claimbuster(path: Path_, *, expected_sha256: str | None = None) -> tuple[list[Claim], LoadReport]:
    """Load ClaimBuster ``crowdsourced.csv``.

    Label: check-worthy (1) iff ``Verdict == 1``; ``Verdict`` -1 (non-factual) and 0
    (unimportant factual) both map to 0, the original verdict stays in
    ``extra["Verdict"]``. Split: ``"2012"`` / ``"2016"`` by ``File_id`` prefix, else
    ``"other"``.

    Defect handling: CSV doubled quotes are decoded by the parser; CRLF and a BOM
    are normalised; whitespace around texts is stripped; empty and spreadsheet-error
    texts (``#NAME?``) are dropped; duplicate ids/texts, including texts with
    conflicting labels, are kept and reported (dropping them would move the split
    counts away from the paper's). Every decision goes to the report.

    Parameters
    ----------
    path
        The CSV file.
    expected_sha256
        If given, the file's sha256 is compared with it and a mismatch is noted in the
        report (not raised: the data team may edit files on purpose).

    Raises
    ------
    DataError
        Missing column, wrong field count, bad ``Verdict``, empty or non-integer
        ``Sentence_id``, quoting error, NUL or non-UTF-8 bytes.
    """
    file = str(path)
    report = LoadReport(file=file)
    header, records = parse_delimited(path, ",", _CLAIMBUSTER_COLUMNS, report)
    col = {name: i for i, name in enumerate(header)}
    claims: list[Claim] = []
    n_quoted_with_quotes = 0
    for rec in records:
        fields = rec.fields
        if fields == [""]:
            report.dropped.append(Dropped(rec.line, "blank line"))
            continue
        if len(fields) != len(header):
            raise field_count_error(file, rec.line, header, len(fields))
        report.rows_read += 1
        sid = fields[col["Sentence_id"]].strip()
        if not _ID.fullmatch(sid):
            raise DataError(file, rec.line, "Sentence_id", f"must be an integer id, got {sid!r}")
        verdict_raw = fields[col["Verdict"]].strip()
        if verdict_raw not in ("-1", "0", "1"):
            raise DataError(file, rec.line, "Verdict", f"must be -1, 0 or 1, got {verdict_raw!r}")
        if rec.quoted[col["Text"]] and '"' in fields[col["Text"]]:
            n_quoted_with_quotes += 1
        text = _clean_text(rec.line, fields[col["Text"]], report)
        if text is None:
            continue
        verdict = int(verdict_raw)
        extra: dict[str, Any] = {
            name: fields[i] for name, i in col.items() if name not in ("Sentence_id", "Text")
        }
        extra["Verdict"] = verdict
        extra["line"] = rec.line
        claims.append(
            Claim(
                dataset=CLAIMBUSTER,
                source_id=sid,
                text=text,
                label=int(verdict == 1),
                split=claimbuster_split(fields[col["File_id"]]),
                extra=extra,
            )
        )
    report.rows_kept = len(claims)
    report.notes.append(
        f'{n_quoted_with_quotes:,} texts contained CSV doubled quotes (""), decoded to " '
        "by the parser (same result as Python's csv module)"
    )
    _find_duplicates(claims, report)
    _note_backslashes(claims, report)
    for split in ("2012", "2016", "other"):
        part = [c for c in claims if c.split == split]
        n_conf = sum(1 for d in report.conflicts for s in d.splits if s == split)
        report.notes.append(
            f"split {split}: {len(part):,} rows, {sum(c.label for c in part):,} check-worthy; "
            f"{n_conf} rows in conflicting-label groups"
        )
    _check_sha(report, expected_sha256)
    return claims, report


def load_clef(
    path: Path_, split: str, *, expected_sha256: str | None = None
) -> tuple[list[Claim], LoadReport]:
    """Load one CLEF 2024 CheckThat! Task 1 English TSV (``Sentence_id, Text, class_label``).

    Label: 1 iff ``class_label == "Yes"``. ``split`` names the file's partition
    (e.g. ``"train"``, ``"dev"``, ``"dev-test"``) and is copied onto every claim.

    Defect handling (each reported):

    - glued rows: a ``class_label`` field reading ``Yes``/``No`` immediately followed
      by digits, with more fields after it, is a missing newline; the line is split
      into its rows (train line 16877: ids 24098 and 29286);
    - CRLF line endings and a BOM are normalised;
    - CSV-style quoted texts (``"Now, let's ..."``, ``""`` inside) are unquoted;
    - texts that are a spreadsheet error (``#NAME?``) are dropped: the sentence is
      lost (ClaimBuster ``crowdsourced.csv`` holds it under the same id);
    - whitespace around texts is stripped; empty texts are dropped;
    - duplicate ids and duplicate texts (including conflicting labels) are kept
      and reported.

    Raises
    ------
    DataError
        Missing column, wrong field count, label other than ``Yes``/``No``, empty or
        non-integer ``Sentence_id``, quoting error, NUL or non-UTF-8 bytes.
    """
    if not split:
        raise ValueError("split must be a non-empty name such as 'train' or 'dev-test'")
    file = str(path)
    report = LoadReport(file=file)
    header, records = parse_delimited(path, "\t", _CLEF_COLUMNS, report)
    col = {name: i for i, name in enumerate(header)}
    ncols = len(header)
    first_ok, last_ok = col["Sentence_id"] == 0, col["class_label"] == ncols - 1
    claims: list[Claim] = []
    n_unquoted = n_doubled = 0

    for rec in records:
        if rec.fields == [""]:
            report.dropped.append(Dropped(rec.line, "blank line"))
            continue
        rows: list[tuple[list[str], list[bool]]] = []
        fields, quoted = rec.fields, rec.quoted
        # a missing newline glues the label of one row to the id of the next:
        # "...\tNo29286\t..." -> n + k*(n-1) fields; split while the pattern holds
        while (
            first_ok
            and last_ok
            and len(fields) > ncols
            and (len(fields) - ncols) % (ncols - 1) == 0
            and not quoted[ncols - 1]
            and (m := _GLUED_LABEL.fullmatch(fields[ncols - 1]))
        ):
            rows.append((fields[: ncols - 1] + [m.group(1)], quoted[:ncols]))
            report.repairs.append(
                Repair(
                    rec.line,
                    "class_label",
                    f"split glued rows: {fields[ncols - 1]!r} -> label {m.group(1)!r} "
                    f"+ next row starting with id {m.group(2)!r} (missing newline)",
                )
            )
            fields = [m.group(2)] + fields[ncols:]
            quoted = [False] + quoted[ncols:]
        if len(fields) != ncols:
            raise field_count_error(file, rec.line, header, len(fields))
        rows.append((fields, quoted))

        for fields, quoted in rows:
            report.rows_read += 1
            sid = fields[col["Sentence_id"]].strip()
            if not _ID.fullmatch(sid):
                raise DataError(file, rec.line, "Sentence_id", f"must be an integer id, got {sid!r}")
            label_raw = fields[col["class_label"]]
            if label_raw not in _CLEF_LABELS:
                raise DataError(file, rec.line, "class_label", f"must be 'Yes' or 'No', got {label_raw!r}")
            if quoted[col["Text"]]:
                n_unquoted += 1
                n_doubled += '"' in fields[col["Text"]]
            text = _clean_text(
                rec.line,
                fields[col["Text"]],
                report,
                recoverable_from=f"; ClaimBuster crowdsourced.csv has id {sid}",
            )
            if text is None:
                continue
            extra: dict[str, Any] = {name: fields[i] for name, i in col.items() if name not in _CLEF_COLUMNS}
            extra["line"] = rec.line
            claims.append(
                Claim(
                    dataset=CLEF,
                    source_id=sid,
                    text=text,
                    label=_CLEF_LABELS[label_raw],
                    split=split,
                    extra=extra,
                )
            )

    report.rows_kept = len(claims)
    if n_unquoted:
        report.repairs.append(
            Repair(
                None,
                "Text",
                f"unquoted {n_unquoted:,} CSV-style quoted texts "
                f'({n_doubled:,} of them with doubled quotes "" -> ")',
            )
        )
    _find_duplicates(claims, report)
    _note_backslashes(claims, report)
    report.notes.append(f"split {split}: {len(claims):,} rows kept, {sum(c.label for c in claims):,} Yes")
    _check_sha(report, expected_sha256)
    return claims, report


def load_tweets(
    path: Path_, split: str, *, expected_sha256: str | None = None, dataset: str = TWEETS
) -> tuple[list[Claim], LoadReport]:
    """Load one CheckThat! tweet file (2021, 2022 Task 1A; 2024 Task 1), in any language:
    ``tweet_id``, ``tweet_text`` and the label, ``class_label`` (2022, 2024), ``check_worthiness``
    (2021) or ``claim_worthiness`` (2021 dev), 0/1 (2021, 2022) or Yes/No (2024), one kind a file.
    The tweet id is the claim's id; ``split`` (e.g. ``"ct22-train"``) is copied onto every claim
    and ``dataset`` (``tweets``, or ``tweets-es`` and the like: :data:`MULTILINGUAL_TWEETS`) names
    it; the other columns (topic, URL, CT21's ``claim``) go to ``extra``.

    CSV-style quoted texts are unquoted and whitespace around texts is stripped (both reported);
    empty texts are dropped (reported); a tweet id a spreadsheet rounded to a float (CT22 English
    train lines 1225 and 1355, CT24 Arabic train four rows, CT22 Turkish train one:
    ``1.37041E+18``, the URL too) is lost, so its row is dropped (reported); duplicate ids and
    texts are kept and reported, like the other loaders.

    Raises
    ------
    DataError
        Missing column, wrong field count, a label other than 0/1 or Yes/No (or both kinds in
        one file), a non-integer tweet id, quoting error, NUL or non-UTF-8 bytes.
    """
    if not split:
        raise ValueError("split must be a non-empty name such as 'ct22-train'")
    file = str(path)
    report = LoadReport(file=file)
    header, records = parse_delimited(path, "\t", ("tweet_id", "tweet_text"), report)
    label = next((name for name in _TWEET_LABELS if name in header), None)
    if label is None:
        raise DataError(file, 1, _TWEET_LABELS[0], f"no label column (one of {list(_TWEET_LABELS)}); "
                        f"header is {header}")
    col = {name: i for i, name in enumerate(header)}
    claims: list[Claim] = []
    values: dict[str, int] | None = None  # the file's kind of label, set by its first row
    n_unquoted = 0
    for rec in records:
        if rec.fields == [""]:
            report.dropped.append(Dropped(rec.line, "blank line"))
            continue
        if len(rec.fields) != len(header):
            raise field_count_error(file, rec.line, header, len(rec.fields))
        report.rows_read += 1
        sid = rec.fields[col["tweet_id"]].strip()
        if _ROUNDED_ID.fullmatch(sid):
            report.dropped.append(Dropped(rec.line, f"tweet_id {sid!r} is a spreadsheet's rounding of the "
                                          "id: the tweet cannot be named, nor matched across files"))
            continue
        if not _ID.fullmatch(sid):
            raise DataError(file, rec.line, "tweet_id", f"must be an integer id, got {sid!r}")
        value = rec.fields[col[label]].strip()
        if values is None:
            values = next((kind for kind in _TWEET_LABEL_VALUES if value in kind), None)
        if values is None or value not in values:
            expected = " or ".join(sorted(values)) if values else "0 or 1 (2021, 2022) or Yes or No (2024)"
            raise DataError(file, rec.line, label, f"must be {expected} (as the file's first row), "
                            f"got {value!r}")
        n_unquoted += rec.quoted[col["tweet_text"]]
        text = _clean_text(rec.line, rec.fields[col["tweet_text"]], report)
        if text is None:
            continue
        extra: dict[str, Any] = {name: rec.fields[i] for name, i in col.items()
                                 if name not in ("tweet_id", "tweet_text", label)}
        extra["line"] = rec.line
        claims.append(Claim(dataset=dataset, source_id=sid, text=text, label=values[value], split=split,
                            extra=extra))
    report.rows_kept = len(claims)
    if n_unquoted:
        report.repairs.append(Repair(None, "tweet_text", f"unquoted {n_unquoted:,} CSV-style quoted texts "
                                     '(doubled quotes "" -> ")'))
    _find_duplicates(claims, report)
    report.notes.append(f"split {split}: {len(claims):,} rows kept, {sum(c.label for c in claims):,} "
                        "check-worthy")
    _check_sha(report, expected_sha256)
    return claims, report


# --------------------------------------------------------------------------- splits


class _Plan(NamedTuple):
    """Where a dataset's calibration pool and test split come from."""

    pool_splits: tuple[str, ...]  # in order of precedence: the first holding an id keeps it
    test_split: str
    n_per_class: int | None  # None: all of the minority class
    ids_name_tweets: bool = False  # the same id in two files is the same tweet (deduplicated, leak-checked)


_SPLIT_PLAN = {
    CLAIMBUSTER: _Plan(("2012",), "2016", None),
    CLEF: _Plan(("train",), "dev-test", CLEF_N_PER_CLASS),
    TWEETS: _Plan(("ct22-train", "ct21-train"), "ct22-dev", None, ids_name_tweets=True),
    **{name: _Plan(("ct22-train",), "ct22-dev", None, ids_name_tweets=True)
       for name, tweets in MULTILINGUAL_TWEETS.items() if "ct22-dev" in tweets.files},
}


def build_splits(
    dataset: str,
    claims: Sequence[Claim],
    seed: int,
    *,
    n_per_class: int | None = None,
) -> dict[str, list[Claim]]:
    """The paper's calibration and test sets, leakage-free by construction.

    - ClaimBuster: ``calibration`` = class-balanced sample of the 2012 debates (all
      657 check-worthy + 657 sampled others = 1,314); ``test`` = the 2016 debates
      (2,745).
    - CLEF 2024 (``claims`` must hold both the train and the dev-test file):
      ``calibration`` = 1,203 per class from train (2,406); ``test`` = dev-test (318).
    - Tweets (``claims`` must hold CT22 train and dev and CT21 train): the pool is CT22
      train and CT21 train, one row per tweet id (CT22's where a tweet is in both);
      ``calibration`` = every check-worthy tweet of it and as many others; ``test`` =
      CT22 dev (195).
    - Spanish, Bulgarian and Turkish tweets (``tweets-es``, ``-bg``, ``-tr``): the same from
      their CT22 train file, ``test`` = their CT22 dev. Arabic and Dutch (``tweets-ar``,
      ``-nl``) have a train file only (CT24's) and no split: refused.

    Before sampling, pool rows whose normalised text also occurs in the test split
    are set aside (returned as ``excluded``), and for the tweets those whose tweet id
    does: a test sentence must not be its own neighbour. ClaimBuster 2012/2016 share
    no text, so nothing is excluded there; CLEF train shares 3 short texts with
    dev-test (6 train rows, all "No"); CT21 train holds 19 tweets of CT22 dev.

    Returns
    -------
    dict
        ``calibration``, ``test``, ``pool`` (the calibration pool after exclusion,
        for |L| ablations) and ``excluded``; every list keeps file order.

    Parameters
    ----------
    dataset
        ``"claimbuster"``, ``"clef2024"``, ``"tweets"``, ``"tweets-es"``, ``"tweets-bg"`` or
        ``"tweets-tr"``.
    claims
        Output of the loader(s); claims of other datasets are ignored.
    seed
        Seed of the balanced sample (see :func:`checkworthy.method.sampling.balanced_sample`).
    n_per_class
        Override of the per-class size (default: the paper's).

    Raises
    ------
    ValueError
        Unknown dataset, empty pool or test split, too few items in a class.
    """
    if dataset in MULTILINGUAL_TWEETS and dataset not in _SPLIT_PLAN:
        raise ValueError(f"{dataset}: only a train file, no test split to calibrate for (the lab's "
                         "2024 dev and test files are not in the project); use it as labelled data")
    if dataset not in _SPLIT_PLAN:
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {sorted(_SPLIT_PLAN)}")
    plan = _SPLIT_PLAN[dataset]
    mine = [c for c in claims if c.dataset == dataset]
    test = [c for c in mine if c.split == plan.test_split]
    full_pool, seen = [], set()
    for split in plan.pool_splits:
        part = [c for c in mine if c.split == split]
        if not part:
            raise ValueError(f"{dataset}: no claims with split {split!r} (load that file too)")
        if plan.ids_name_tweets:  # a tweet in an earlier file keeps that file's label
            part = [c for c in part if c.source_id not in seen]
            seen |= {c.source_id for c in part}
        full_pool += part
    if not test:
        raise ValueError(f"{dataset}: no claims with split {plan.test_split!r} (load that file too)")
    leaked = shared_texts(full_pool, test)
    test_ids = {c.source_id for c in test} if plan.ids_name_tweets else set()

    def leaks(c: Claim) -> bool:
        return normalise_text(c.text) in leaked or c.source_id in test_ids

    pool = [c for c in full_pool if not leaks(c)]
    excluded = [c for c in full_pool if leaks(c)]
    idx = balanced_sample(
        [c.label for c in pool],
        n_per_class if n_per_class is not None else plan.n_per_class,
        seed=seed,
    )
    calibration = [pool[i] for i in idx]
    assert not shared_texts(calibration, test)
    return {"calibration": calibration, "test": test, "pool": pool, "excluded": excluded}


def load_dataset(name: str) -> tuple[list[Claim], list[LoadReport]]:
    """All claims of a dataset (the files under ``data/raw`` its splits need; every file of a
    language's tweets) and what loading repaired or dropped."""
    raw = DATA_DIR / "raw"
    if name == CLAIMBUSTER:
        claims, report = load_claimbuster(raw / "claimbuster" / "crowdsourced.csv",
                                          expected_sha256=KNOWN_SHA256["crowdsourced.csv"])
        return claims, [report]
    if name == CLEF:
        out: list[Claim] = []
        reports = []
        for split, fname in (("train", "CT24_checkworthy_english_train.tsv"),
                             ("dev-test", "CT24_checkworthy_english_dev-test.tsv")):
            claims, report = load_clef(raw / "clef2024" / fname, split,
                                       expected_sha256=KNOWN_SHA256.get(fname))
            out += claims
            reports.append(report)
        return out, reports
    if name == TWEETS:
        loaded = [load_tweets(raw / "tweets" / fname, split, expected_sha256=KNOWN_SHA256.get(fname))
                  for split, fname in TWEET_FILES.items()]
        return [c for claims, _ in loaded for c in claims], [report for _, report in loaded]
    if name in MULTILINGUAL_TWEETS:
        tweets = MULTILINGUAL_TWEETS[name]
        folder = raw / "multilingual" / tweets.folder
        loaded = [load_tweets(folder / fname, split, expected_sha256=KNOWN_SHA256.get(fname), dataset=name)
                  for split, fname in tweets.files.items()]
        return [c for claims, _ in loaded for c in claims], [report for _, report in loaded]
    known = ", ".join([CLAIMBUSTER, CLEF, TWEETS, *MULTILINGUAL_TWEETS])
    raise ValueError(f"unknown dataset {name!r} (known: {known})")
