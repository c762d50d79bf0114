"""What a dataset loader returns: labelled claims, and the report of what loading read, kept,
repaired and dropped (so that the counts behind a result can be traced to the file)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["Claim", "Dropped", "Duplicate", "LoadReport", "Repair"]


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
