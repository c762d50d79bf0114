"""Imported scores (``file:<path>``): lookups by text, failures kept with their raw cell, strict
structure checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkworthy.errors import DataError
from checkworthy.scorers.base import ERROR, NOT_A_NUMBER, OK, OUT_OF_RANGE, UNPARSEABLE, parse_number
from checkworthy.scorers.file_scorer import FileScorer
from checkworthy.scorers.registry import make_scorer


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return path


GOOD = (
    "id,text,score,label\n"
    "1,The debt doubled since 2008.,0.91,1\n"
    '2,"She said ""no"", twice.",0.2,0\n'
    "3,Thanks for having me.,0,0\n"
    "4,Taxes rose 3%.,1,1\n"
)


def test_scores_are_looked_up_by_text(tmp_path):
    s, prompt = make_scorer(f"file:{write(tmp_path / 'gpt.csv', GOOD)}")
    assert prompt[0] == "none" and s.score_kinds == ("imported",)
    out = s.score(['She said "no", twice.', "The debt doubled since 2008.", "  Thanks  for having\nme. ",
                   "Not in the file."])
    got = [(o["imported"].score, o["imported"].status) for o in out]
    assert got == [(0.2, OK), (0.91, OK), (0.0, OK), (None, ERROR)]
    assert out[1]["imported"].raw == "0.91"
    assert out[3]["imported"].raw.startswith("[missing]")


@pytest.mark.parametrize(("cell", "expected"), [
    ("0.5", (0.5, OK)), (" 0.25 ", (0.25, OK)), ("1e-1", (0.1, OK)), ("1.0", (1.0, OK)),
    ("", (None, UNPARSEABLE)), ("   ", (None, UNPARSEABLE)),
    ("abc", (None, NOT_A_NUMBER)), ("nan", (None, NOT_A_NUMBER)), ("inf", (None, NOT_A_NUMBER)),
    ("0,7", (None, NOT_A_NUMBER)), ("70%", (None, NOT_A_NUMBER)), ("True", (None, NOT_A_NUMBER)),
    ("1.2", (None, OUT_OF_RANGE)), ("-0.1", (None, OUT_OF_RANGE)), ("85", (None, OUT_OF_RANGE)),
    ("1e400", (None, NOT_A_NUMBER)),
])
def test_score_cells(cell, expected):
    assert parse_number(cell) == expected


def test_bad_cells_are_failures_with_raw_text(tmp_path):
    path = write(tmp_path / "s.csv", 'id,text,score\na,One,1.5\nb,Two,"0,7"\nc,Three,\nd,Four,high\n')
    s = FileScorer(path)
    out = [o["imported"] for o in s.score(["One", "Two", "Three", "Four"])]
    assert [(x.score, x.status, x.raw) for x in out] == [
        (None, OUT_OF_RANGE, "1.5"), (None, NOT_A_NUMBER, "0,7"), (None, UNPARSEABLE, ""),
        (None, NOT_A_NUMBER, "high")]


def test_params_are_content_not_location(tmp_path):
    a = FileScorer(write(tmp_path / "a.csv", GOOD))
    (tmp_path / "sub").mkdir()
    b = FileScorer(write(tmp_path / "sub" / "a.csv", GOOD))
    c = FileScorer(write(tmp_path / "c.csv", GOOD.replace("0.91", "0.92")))
    assert a.params() == b.params() and a.params()["sha256"] != c.params()["sha256"]
    assert str(tmp_path) not in str(a.params())
    custom = FileScorer(a.path, score_kind="gpt52_verbalised")
    assert custom.score_kinds == ("gpt52_verbalised",) and "gpt52_verbalised" in custom.score(["x"])[0]


@pytest.mark.parametrize(("content", "line", "what"), [
    ("id,text\n1,a\n", 1, "required column missing"),
    ("id,text,score\n1,a,0.1\n1,b,0.2\n", 3, "duplicate id"),
    ("id,text,score\n1, ,0.1\n", 2, "empty text"),
    ("id,text,score\n1,a,0.1\n2,a,0.3\n", 3, "the same text has score"),
    ("id,text,score\n1,a,0.1,extra\n", 2, "expected 3 fields"),
    ("id,text,score\n", 2, "no data rows"),
    (b"id,text,score\n1,caf\xe9,0.1\n", 2, "not valid UTF-8"),
    (b"id,text,score\n1,a\x00b,0.1\n", 2, "NUL"),
    ('id,text,score\n1,"unclosed,0.1\n', 2, "quote is never closed"),
])
def test_structural_problems_raise_with_line(tmp_path, content, line, what):
    with pytest.raises(DataError, match=what) as info:
        FileScorer(write(tmp_path / "bad.csv", content))
    if line is not None:
        assert f"row {line}" in str(info.value)


def test_same_text_same_score_twice_is_fine(tmp_path):
    s = FileScorer(write(tmp_path / "d.csv", "id,text,score\n1,a,0.1\n2,a,0.1\n"))
    assert s.score(["a"])[0]["imported"].score == 0.1
