"""Imported scores: a CSV ``id,text,score`` produced by any model run elsewhere (``file:<path>``).

Why it is shaped like this:

* The file is read and validated once, completely, before anything is scored: a structural problem
  (missing column, duplicate id, empty text, the same text given two different score cells, NUL
  or non-UTF-8 bytes, malformed CSV) raises :class:`~checkworthy.errors.DataError` naming the file,
  line and field.
* A score cell that is not a score is *data*, not a structural problem: it becomes a stored failure
  with the cell as raw text (empty -> ``unparseable``, ``abc``/``nan``/``0,7`` -> ``not_a_number``,
  ``1.2``/``-0.1``/``85`` -> ``out_of_range``). Nothing is rescaled or guessed.
* Texts are matched exactly, then with whitespace collapsed; a text the file lacks is an ``error``
  with an explanatory raw text, never a made-up score.
* ``params()`` holds the file's sha256 (not its path), so an edited file is a new cache key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from checkworthy.data.user_csv import id_and_text, read_rows
from checkworthy.errors import DataError
from checkworthy.scorers.base import ERROR, Score, parse_number

DEFAULT_KIND = "imported"


def _loose(text: str) -> str:
    return " ".join(text.split())


def read_score_file(path: Path, score_column: str = "score") -> tuple[dict[str, Score], str]:
    """``{text: Score}`` and the file's sha256; raise :class:`DataError` on structural problems.

    Parsing (encoding, NUL bytes, quoting, field counts, sizes) is :mod:`checkworthy.data.user_csv`'s;
    a bad score *cell* is not structural: it becomes a stored failure with the cell as raw text.
    """
    name = str(path)
    try:
        sha = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        raise DataError(name, None, None, f"cannot read the file: {exc.strerror}") from exc
    _, records = read_rows(path, ["id", "text", score_column])
    scores: dict[str, Score] = {}
    first: dict[str, tuple[int, str]] = {}
    seen_ids: dict[str, int] = {}
    for line, rec in records:
        cid, text = id_and_text(name, line, rec, seen_ids)
        cell = rec[score_column]
        if text in first and first[text][1] != cell:
            raise DataError(name, line, score_column, f"the same text has score {first[text][1]!r} "
                                                      f"on line {first[text][0]}")
        first.setdefault(text, (line, cell))
        score, status = parse_number(cell)
        scores[text] = Score(score, status, cell, {"source_id": cid, "line": line})
    return scores, sha


class FileScorer:
    """Looks scores up in an imported CSV; yields one score kind (default ``imported``)."""

    def __init__(self, path: str | Path, *, score_kind: str = DEFAULT_KIND, score_column: str = "score"
                 ) -> None:
        self.path = Path(path)
        self.spec = f"file:{path}"
        self.score_kinds = (score_kind,)
        self.score_column = score_column
        self._scores, self.sha256 = read_score_file(self.path, score_column)
        self._loose: dict[str, Score] = {}
        for text, sc in self._scores.items():
            self._loose.setdefault(_loose(text), sc)

    def params(self) -> dict[str, Any]:
        """The file's content identity (sha256), not its location."""
        return {"backend": "file", "file_name": self.path.name, "sha256": self.sha256,
                "score_column": self.score_column}

    def lookup(self, text: str) -> Score:
        """The imported score of a text, or an ``error`` saying the file has none."""
        found = self._scores.get(text) or self._loose.get(_loose(text))
        if found is None:
            return Score(None, ERROR, f"[missing] no row with this text in {self.path.name}",
                         {"missing": True})
        return found

    def score(self, texts: Sequence[str]) -> list[dict[str, Score]]:
        kind = self.score_kinds[0]
        return [{kind: self.lookup(t)} for t in texts]
