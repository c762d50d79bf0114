"""The data team's files: label updates (``id,dataset,label[,source][,text]``) and newly arrived
claims (``id,dataset,text``), read into rows or rejected naming the file, line and field.

Label values are not judged here: the validation suite (:mod:`checkworthy.data.validation`)
reports every bad value at once.
"""

from __future__ import annotations

import filecmp
import shutil
from dataclasses import dataclass
from pathlib import Path

from checkworthy.data.user_csv import read_rows, require_filled
from checkworthy.errors import DataError

REQUIRED = ("id", "dataset", "label")
OPTIONAL = ("source", "text")
CLAIM_COLUMNS = ("id", "dataset", "text")


@dataclass(frozen=True)
class LabelRow:
    """One row of a label file; ``label`` stays a string when it is not 0 or 1 (validation says so)."""

    line: int
    id: str
    dataset: str
    label: int | str
    source: str | None = None
    text: str | None = None


@dataclass(frozen=True)
class IncomingClaim:
    """One row of a file of newly arrived claims."""

    line: int
    id: str
    dataset: str
    text: str


def read_label_csv(path: Path) -> list[LabelRow]:
    """Read a label file; structural problems raise :class:`DataError` (file, line, field)."""
    name = str(path)
    _, records = read_rows(Path(path), REQUIRED, OPTIONAL)  # the one parser of user CSVs
    rows = []
    for line, rec in records:
        require_filled(name, line, rec, ("id", "dataset"))
        value = rec["label"].strip()
        rows.append(LabelRow(
            line, rec["id"].strip(), rec["dataset"].strip(),
            int(value) if value in ("0", "1") else value,
            (rec.get("source") or "").strip() or None,
            rec.get("text") if rec.get("text") else None,
        ))
    if not rows:
        raise DataError(name, 2, None, "no data rows")
    check_one_label_per_claim(name, rows)
    return rows


def check_one_label_per_claim(name: str, rows: list[LabelRow]) -> None:
    """A file gives each claim one label: two rows of the same claim with different labels
    contradict each other (the same label twice is one answer)."""
    first: dict[tuple[str, str], LabelRow] = {}
    for r in rows:
        prev = first.setdefault((r.dataset, r.id), r)
        if prev.label != r.label:
            raise DataError(name, r.line, "label", f"claim {r.id!r} of {r.dataset!r} is labelled "
                            f"{prev.label!r} at line {prev.line} and {r.label!r} at line {r.line}: a file "
                            "gives each claim one label")


def read_claims_csv(path: Path) -> list[IncomingClaim]:
    """Read a file of new claims (every column filled; ids and datasets stripped, texts kept)."""
    name = str(path)
    _, records = read_rows(Path(path), CLAIM_COLUMNS, None)
    rows = []
    for line, rec in records:
        require_filled(name, line, rec, CLAIM_COLUMNS)
        rows.append(IncomingClaim(line, rec["id"].strip(), rec["dataset"].strip(), rec["text"]))
    return rows


def set_aside(path: Path, repo: Path) -> Path:
    """Move a refused label file from ``data/labels/`` to ``data/labels/rejected/`` (a name of its
    own if one is taken; dropped if the same bytes are there under its name, refused before), so
    no later run considers it again; return where it went."""
    folder = repo / "data" / "labels" / "rejected"
    folder.mkdir(parents=True, exist_ok=True)
    dest, n = folder / path.name, 1
    if dest.is_file() and filecmp.cmp(path, dest, shallow=False):
        path.unlink()
        return dest
    while dest.exists():
        dest, n = folder / f"{path.stem}-{n}{path.suffix}", n + 1
    return Path(shutil.move(path, dest))


def in_label_folder(path: Path, repo: Path) -> bool:
    """Whether ``path`` is a file of ``<repo>/data/labels/``, where a refused file does not stay."""
    return Path(path).resolve().parent == (repo / "data" / "labels").resolve()


def label_files_in(repo: Path) -> list[Path]:
    """The CSV files under ``<repo>/data/labels/``, oldest first."""
    return sorted((repo / "data" / "labels").glob("*.csv"), key=lambda p: (p.stat().st_mtime, p.name))
