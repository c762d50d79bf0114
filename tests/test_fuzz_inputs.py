"""Bad input: malformed files fed to the loaders and to `checkworthy calibrate`.

Two layers. Curated cases (wrong encoding, NUL bytes, missing or extra columns, quoting
errors, huge fields, non-numeric scores, labels outside {0,1}, duplicate ids, empty files)
must each give a ``DataError`` naming the file, the row and the field; through the CLI the
command exits non-zero and the database is unchanged. Then seeded random mutations of real
files (byte flips, stray quotes and delimiters, NULs, truncation, swapped or doubled lines)
check the property that matters whatever the bytes: a parser either returns rows that
satisfy its invariants or raises ``DataError`` with the file and a row, never anything else.

Every reader shares one record parser (``checkworthy.data.user_csv`` on ``datasets.parse_delimited``),
so every case below names its field; a case may carry an ``xfail(strict=True)`` reason when a
known gap is recorded, which flips to a failure once fixed.
"""

from __future__ import annotations

import csv
import io
import json
import random
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from checkworthy.cli.main import main
from checkworthy.config import ROOT
from checkworthy.data.datasets import load_claimbuster, load_clef
from checkworthy.errors import DataError
from checkworthy.runs.own_scores import read_scored_csv
from checkworthy.store.audit import table_counts
from checkworthy.testing.datasets import raw_path

HEADER = "id,text,score,label"
GOOD_ROWS = ["a1,The unemployment rate fell to 3.5 percent last year.,0.81,1",
             "a2,I love this town and its people.,0.12,0",
             'a3,"Taxes rose by 20%, the report says.",0.66,1',
             "a4,We will win this election.,0.30,0",
             "a5,Crime doubled since 2010 in our state.,0.72,1",
             "a6,Thank you all for coming tonight.,0.05,0"]


def csv_bytes(*rows: str, header: str = HEADER) -> bytes:
    return ("\n".join([header, *rows]) + "\n").encode()


def good_with(i: int, row: str) -> bytes:
    """The good file with data row ``i`` (0-based; file line i + 2) replaced."""
    rows = list(GOOD_ROWS)
    rows[i] = row
    return csv_bytes(*rows)



# name -> (file bytes, expected row, expected field or None for 'any', xfail reason or None)
BYO_CASES: dict[str, tuple[bytes, int, str | None, str | None]] = {
    "latin-1 bytes": (good_with(1, "a2,Caf\xe9 prices rose.,0.5,0").replace(b"\xc3\xa9", b"\xe9"),
                      3, "text", None),
    "UTF-16 file": ("\n".join([HEADER, *GOOD_ROWS]).encode("utf-16"), 1, None, None),
    "NUL byte in a text": (good_with(2, "a3,Taxes\x00 rose.,0.66,1"), 4, "text", None),
    "empty file": (b"", 1, None, None),
    "only a byte-order mark": (b"\xef\xbb\xbf", 1, None, None),
    "blank lines only": (b"\n\n   \n", 1, None, None),
    "header only": (csv_bytes(), 2, None, None),
    "missing column": (csv_bytes("a1,x,0.5", header="id,text,score"), 1, "label", None),
    "extra column": (csv_bytes("a1,x,0.5,1,9", header=HEADER + ",weight"), 1, "weight", None),
    "duplicate column": (csv_bytes("a1,x,0.5,1,a1", header=HEADER + ",id"), 1, "id", None),
    "row with a missing field": (good_with(3, "a4,We will win.,0.30"), 5, "label", None),
    "row with an extra field": (good_with(3, "a4,We will win.,0.30,0,7"), 5, None, None),
    "unclosed quote": (good_with(1, 'a2,"I love this town.,0.12,0'), 3, "text",
                       None),
    "text after a closing quote": (good_with(1, 'a2,"I love" this town,0.12,0'), 3, "text", None),
    "huge field": (good_with(0, "a1," + "x" * 1_000_000 + ",0.81,1"), 2, "text", None),
    "score not a number": (good_with(4, "a5,Crime doubled.,high,1"), 6, "score", None),
    "score empty": (good_with(4, "a5,Crime doubled.,,1"), 6, "score", None),
    "score NaN": (good_with(4, "a5,Crime doubled.,nan,1"), 6, "score", None),
    "score infinite": (good_with(4, "a5,Crime doubled.,inf,1"), 6, "score", None),
    "score with a comma decimal": (good_with(4, 'a5,Crime doubled.,"0,72",1'), 6, "score", None),
    "score above 1": (good_with(4, "a5,Crime doubled.,1.01,1"), 6, "score", None),
    "score in Arabic-Indic digits": (good_with(4, "a5,Crime doubled.,\u0660.\u0667,1"), 6, "score", None),
    "score in full-width digits": (good_with(4, "a5,Crime doubled.,\uff10.\uff17,1"), 6, "score", None),
    "score with an underscore": (good_with(4, "a5,Crime doubled.,0_7,1"), 6, "score", None),
    "score in hexadecimal": (good_with(4, "a5,Crime doubled.,0x1,1"), 6, "score", None),
    "score below 0": (good_with(4, "a5,Crime doubled.,-0.2,1"), 6, "score", None),
    "label 2": (good_with(5, "a6,Thank you.,0.05,2"), 7, "label", None),
    "label -1": (good_with(5, "a6,Thank you.,0.05,-1"), 7, "label", None),
    "label yes": (good_with(5, "a6,Thank you.,0.05,yes"), 7, "label", None),
    "label 0.5": (good_with(5, "a6,Thank you.,0.05,0.5"), 7, "label", None),
    "label empty": (good_with(5, "a6,Thank you.,0.05,"), 7, "label", None),
    "duplicate id": (good_with(5, "a1,Thank you.,0.05,0"), 7, "id", None),
    "empty id": (good_with(5, ",Thank you.,0.05,0"), 7, "id", None),
    "empty text": (good_with(5, "a6,   ,0.05,0"), 7, "text", None),
}


def _case_params(cases: dict) -> list:
    return [pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=c[-1])) if c[-1]
            else name for name, c in cases.items()]


def check_error(err: DataError, path: Path, row: int, field: str | None) -> None:
    """The error names the file, the row and the field (``field=None``: any field)."""
    assert err.file == str(path)
    assert err.row == row, str(err)
    assert err.field is not None, f"no field named: {err}"
    if field is not None:
        assert err.field == field, str(err)
    assert str(path) in str(err) and f"row {row}" in str(err) and repr(err.field) in str(err)


def assert_refused(read: Callable[[Path], object], path: Path, data: bytes, row: int, field: str | None) -> None:
    """``read`` of a file holding ``data`` raises a DataError naming the file, ``row`` and ``field``."""
    path.write_bytes(data)
    with pytest.raises(DataError) as info:
        read(path)
    check_error(info.value, path, row, field)


def with_row(rows: list[str], header: str, i: int, row: str) -> bytes:
    """A CSV of ``rows`` under ``header`` with row ``i`` replaced."""
    return csv_bytes(*rows[:i], row, *rows[i + 1:], header=header)


@pytest.mark.parametrize("case", _case_params(BYO_CASES))
def test_byo_reader_names_file_row_and_field(tmp_path, case):
    data, row, field, _ = BYO_CASES[case]
    assert_refused(lambda p: read_scored_csv(p, label_required=True), tmp_path / "L.csv", data, row, field)


# ---------------------------------------------------------------- through the CLI


def _u_file(tmp_path: Path) -> Path:
    u = tmp_path / "U.csv"
    u.write_bytes(csv_bytes("u1,Prices went up 12 percent in March.,0.7",
                            "u2,Good evening everyone.,0.1", header="id,text,score"))
    return u


@pytest.mark.parametrize("case", ["score not a number", "NUL byte in a text"])
def test_calibrate_process_exits_non_zero(db_url, tmp_path, case):
    """The real process: exit status, message on stderr, no traceback."""
    bad = tmp_path / "L.csv"
    bad.write_bytes(BYO_CASES[case][0])
    proc = subprocess.run(
        [sys.executable, "-m", "checkworthy.cli.main", "calibrate", "--labeled", str(bad), "--unlabeled",
         str(_u_file(tmp_path)), "--k", "2", "--out", str(tmp_path / "OUT.csv")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={"PATH": "/usr/bin:/bin", "DATABASE_URL": db_url, "HOME": str(tmp_path)},
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and str(bad) in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "OUT.csv").exists()


#: folders that exist and look writable to root (its permission bits say so) where no file can be
#: created: a pseudo file system with no files of ours (/proc), one that refuses new files (/sys)
UNWRITABLE = ("/proc", "/sys")
#: options that cannot give a meaningful run: refused by the parser, before the store starts
BAD_OPTIONS = {
    "alpha 0": (["--alpha", "0"], "--alpha"), "alpha 1": (["--alpha", "1"], "--alpha"),
    "alpha 1.5": (["--alpha", "1.5"], "--alpha"), "alpha -0.1": (["--alpha=-0.1"], "--alpha"),
    "alpha nan": (["--alpha", "nan"], "--alpha"), "alpha inf": (["--alpha", "inf"], "--alpha"),
    "alpha text": (["--alpha", "five"], "--alpha"),
    "threshold nan": (["--threshold", "nan"], "--threshold"),
    "threshold 1.5": (["--threshold", "1.5"], "--threshold"),
    "threshold -1": (["--threshold=-1"], "--threshold"),
    "k 0": (["--k", "0"], "--k"), "k -3": (["--k=-3"], "--k"), "k 2.5": (["--k", "2.5"], "--k"),
    "out is the unlabelled input": (["--out", "{U}"], "--out"),
    "out is the labelled input": (["--out", "{L}"], "--out"),
    "out is a directory": (["--out", "{tmp}"], "--out"),
    "out in a missing directory": (["--out", "{tmp}/no/such/OUT.csv"], "--out"),
    "out under a regular file": (["--out", "{L}/OUT.csv"], "--out"),
    "out is a device": (["--out", "/dev/null"], "--out"),
    **{f"out in {where}": (["--out", f"{where}/OUT.csv"], "--out") for where in UNWRITABLE},
}


def test_explain_refuses_a_malformed_claim_id(capsys):
    assert main(["explain", "id:abc"]) == 2
    err = capsys.readouterr().err
    assert "id:abc" in err and "Traceback" not in err


# ---------------------------------------------------------------- label files (`checkworthy labels add`)

LABEL_HEADER = "id,dataset,label,source"
LABEL_ROWS = ["101,clef2024,1,annotator:ann", "102,clef2024,0,annotator:ann", '103,clef2024,1,"ann, bob"']


def label_with(i: int, row: str) -> bytes:
    return with_row(LABEL_ROWS, LABEL_HEADER, i, row)


#: structural problems of a label file (label values are judged later, by the GX suite, all at once)
LABEL_CASES: dict[str, tuple[bytes, int, str | None, str | None]] = {
    "latin-1 bytes": (label_with(1, "102,clef2024,0,Jos\xe9").replace(b"\xc3\xa9", b"\xe9"), 3, "source", None),
    "NUL byte": (label_with(0, "101,clef\x002024,1,ann"), 2, "dataset", None),
    "empty file": (b"", 1, None, None),
    "header only": (csv_bytes(header=LABEL_HEADER), 2, None, None),
    "missing column": (csv_bytes("101,1", header="id,label"), 1, "dataset", None),
    "extra column": (csv_bytes("101,clef2024,1,x", header="id,dataset,label,note"), 1, "note", None),
    "missing field": (label_with(1, "102,clef2024"), 3, None, None),
    "unclosed quote": (label_with(1, '102,clef2024,0,"ann'), 3, "source", None),
    "huge field": (label_with(0, "101,clef2024,1," + "x" * 2_000_000), 2, "source", None),
    "empty id": (label_with(2, ",clef2024,1,ann"), 4, "id", None),
    "empty dataset": (label_with(2, "103,,1,ann"), 4, "dataset", None),
}


@pytest.mark.parametrize("case", _case_params(LABEL_CASES))
def test_label_file_names_file_row_and_field(tmp_path, case):
    from checkworthy.data.label_files import read_label_csv

    data, row, field, _ = LABEL_CASES[case]
    assert_refused(read_label_csv, tmp_path / "labels.csv", data, row, field)


#: label files that parse but name claims the store cannot take: refused before data/labels/
STORE_LABEL_CASES = {
    "unknown claim id": (b"id,dataset,label\nno-such-id,clef2024,1\n", "no-such-id"),
    "unknown dataset and no text": (b"id,dataset,label\n7,nowhere,1\n", "nowhere"),
}


# ---------------------------------------------------------------- `checkworthy score`

IN_HEADER = "id,text"
IN_ROWS = ["c1,The deficit tripled in four years.", "c2,Thank you all.", 'c3,"Jobs, jobs, jobs."']


def in_with(i: int, row: str) -> bytes:
    return with_row(IN_ROWS, IN_HEADER, i, row)


#: structural problems of an ``id,text`` file (extra columns are ignored by design)
SCORE_INPUT_CASES: dict[str, tuple[bytes, int, str | None, str | None]] = {
    "latin-1 bytes": (in_with(1, "c2,Caf\xe9.").replace(b"\xc3\xa9", b"\xe9"), 3, "text", None),
    "UTF-16 file": ("\n".join([IN_HEADER, *IN_ROWS]).encode("utf-16"), 1, None, None),
    "NUL byte": (in_with(0, "c1,The deficit\x00 tripled."), 2, "text", None),
    "empty file": (b"", 1, "id", None),
    "header only": (csv_bytes(header=IN_HEADER), 2, None, None),
    "missing column": (csv_bytes("c1", header="id"), 1, "text", None),
    "missing field": (in_with(1, "c2"), 3, "text", None),
    "extra field": (in_with(1, "c2,Thank you.,9"), 3, None, None),
    "unclosed quote": (in_with(1, 'c2,"Thank you all.'), 3, "text",
                       None),
    "text after a closing quote": (in_with(1, 'c2,"Thank" you'), 3, "text", None),
    "huge field": (in_with(0, "c1," + "x" * 2_000_000), 2, "text", None),
    "duplicate id": (in_with(2, "c1,Jobs."), 4, "id", None),
    "empty id": (in_with(2, ",Jobs."), 4, "id", None),
    "empty text": (in_with(2, "c3,  "), 4, "text", None),
}


@pytest.mark.parametrize("case", _case_params(SCORE_INPUT_CASES))
def test_score_input_names_file_row_and_field(tmp_path, case):
    from checkworthy.runs.score_file import read_input

    data, row, field, _ = SCORE_INPUT_CASES[case]
    assert_refused(read_input, tmp_path / "in.csv", data, row, field)


def _score_file_bytes(data: bytes) -> bytes:
    """An ``id,text`` case as an imported-scores file ``id,text,score``."""
    lines = data.split(b"\n")
    if lines and lines[0].startswith(b"id,text"):
        lines[0] += b",score"
        lines[1:] = [line + b",0.5" if line.strip() else line for line in lines[1:]]
    return b"\n".join(lines)


@pytest.mark.parametrize("case", _case_params({k: v for k, v in SCORE_INPUT_CASES.items()
                                                if k not in ("UTF-16 file", "extra field", "missing field")}))
def test_imported_score_file_names_file_row_and_field(tmp_path, case):
    from checkworthy.scorers.file_scorer import read_score_file

    data, row, field, _ = SCORE_INPUT_CASES[case]
    path = tmp_path / "scores.csv"
    path.write_bytes(_score_file_bytes(data))
    with pytest.raises(DataError) as info:
        read_score_file(path)
    check_error(info.value, path, row, field)


def test_non_numeric_imported_scores_are_stored_failures_not_guesses():
    """By design a bad score *cell* is data: kept with its raw text, never turned into a number."""
    from checkworthy.scorers.base import parse_number

    assert [parse_number(c) for c in ("abc", "nan", "0,7", "", "1.2", "-0.1", "inf", "0.25")] == [
        (None, "not_a_number"), (None, "not_a_number"), (None, "not_a_number"), (None, "unparseable"),
        (None, "out_of_range"), (None, "out_of_range"), (None, "not_a_number"), (0.25, "ok")]


# ---------------------------------------------------------------- every command, end to end

#: predict's labelled rows: GOOD_ROWS without their score
PL_ROWS = [",".join(r.split(",")[:2] + r.split(",")[-1:]) for r in GOOD_ROWS if '"' not in r]
#: good inputs each case starts from; a case replaces one of them (or an option)
GOOD_FILES = {
    "L": csv_bytes(*GOOD_ROWS),
    "U": csv_bytes("u1,Prices went up 12 percent in March.,0.7", "u2,Good evening everyone.,0.1",
                   header="id,text,score"),
    "IN": csv_bytes(*IN_ROWS, header=IN_HEADER),
    "SC": _score_file_bytes(csv_bytes(*IN_ROWS, header=IN_HEADER)),
    "LAB": b"id,dataset,label\n101,clef2024,1\n",
    "PL": csv_bytes(*PL_ROWS, header="id,text,label"),
    "PU": csv_bytes("u1,Prices went up 12 percent in March.", "u2,Good evening everyone.", header="id,text"),
    "REV": b"id,dataset,label\n101,clef2024,1\n",
    "RJ": b"[]",
}
#: files written with another suffix than .csv
SUFFIX = {"RJ": ".json"}
PREDICT = ["predict", "--labeled", "{PL}", "--unlabeled", "{PU}", "--k", "2", "--out", "{OUT}"]
#: predict's files: L is id,text,label and U id,text[,label]; no score column
PREDICT_FILE_CASES: dict[str, tuple[dict[str, bytes], str]] = {
    "L empty": ({"PL": b""}, "{PL}"),
    "L header only": ({"PL": csv_bytes(header="id,text,label")}, "{PL}"),
    "L without labels": ({"PL": csv_bytes("a1,x", header="id,text")}, "label"),
    "L with a score column": ({"PL": csv_bytes(*GOOD_ROWS)}, "score"),
    "L label 2": ({"PL": with_row(PL_ROWS, "id,text,label", 1, "a2,I love it.,2")}, "{PL}"),
    "L duplicate id": ({"PL": with_row(PL_ROWS, "id,text,label", 1, "a1,I love it.,0")}, "{PL}"),
    "L empty text": ({"PL": with_row(PL_ROWS, "id,text,label", 1, "a2,  ,0")}, "{PL}"),
    "L NUL byte": ({"PL": with_row(PL_ROWS, "id,text,label", 1, "a2,I lo\x00ve it.,0")}, "{PL}"),
    "L unclosed quote": ({"PL": with_row(PL_ROWS, "id,text,label", 1, 'a2,"I love it.,0')}, "{PL}"),
    "U without text": ({"PU": csv_bytes("u1", header="id")}, "text"),
    "U label yes": ({"PU": csv_bytes("u1,Prices rose.,yes", header="id,text,label")}, "{PU}"),
    "U latin-1 bytes": ({"PU": "id,text\nu1,Caf\xe9 prices rose.\n".encode("latin-1")}, "{PU}"),
}
CALIBRATE = ["calibrate", "--labeled", "{L}", "--unlabeled", "{U}", "--k", "2", "--out", "{OUT}"]
#: a U whose second row has the id of L's second row (another text: the files would mix two claims)
SAME_ID_U = csv_bytes("u1,Prices went up 12 percent in March.,0.7", "a2,Good evening everyone.,0.1",
                      header="id,text,score")
SCORE = ["score", "--params", "", "--model", "file:{SC}", "--input", "{IN}", "--out", "{OUT}"]
LABELS_ADD = ["labels", "add", "{LAB}"]
REVIEW_IMPORT = ["review", "import", "{REV}"]
REVIEW_EXPORT = ["review", "export", "--out", "{tmp}/tasks.json"]


def ls_export(sid: str, *choices: str) -> bytes:
    """A Label Studio export (full JSON format) of one task answering ``choices`` for claim ``sid``."""
    result = [{"from_name": "checkworthy", "to_name": "text", "type": "choices", "value": {"choices": list(choices)}}]
    return json.dumps([{"id": 1, "data": {"source_id": sid, "dataset": "clef2024", "text": "x"},
                        "annotations": [{"was_cancelled": False, "result": result}]}]).encode()


#: review import's Label Studio exports (written as RJ.json)
REVIEW_JSON_CASES: dict[str, tuple[bytes, str]] = {
    "not JSON": (b'[{"data": ', "{RJ}"),
    "not a list of tasks": (b'{"tasks": []}', "{RJ}"),
    "a task that is a string": (b'["task"]', "row 1"),
    "no answered task": (b'[{"data": {"source_id": "101", "dataset": "clef2024"}, "annotations": []}]', "{RJ}"),
    "unknown choice": (ls_export("101", "Maybe"), "Maybe"),
    "two choices": (ls_export("101", "Yes", "No"), "one choice"),
    "annotators disagree": (
        (b'[{"data": {"source_id": "101", "dataset": "clef2024"}, "annotations": ['
         b'{"result": [{"from_name": "checkworthy", "type": "choices", "value": {"choices": ["Yes"]}}]},'
         b'{"result": [{"from_name": "checkworthy", "type": "choices", "value": {"choices": ["No"]}}]}]}]'),
        "annotators disagree"),
    "task without its claim": (ls_export("", "Yes"), "data.source_id"),
    "claim answered twice": (b'[{"source_id": "101", "dataset": "clef2024", "checkworthy": "Yes"}, '
                             b'{"source_id": "101", "dataset": "clef2024", "checkworthy": "No"}]', "twice"),
    "unknown claim": (ls_export("no-such-id", "Yes"), "no-such-id"),
}


@dataclass(frozen=True)
class Case:
    """A command line (placeholders: the files of GOOD_FILES, OUT, tmp), the files it replaces,
    and what its one error line must name."""

    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    named: str = ""


def _with_option(argv: list[str], option: str, *values: str) -> list[str]:
    """``argv`` without ``option`` and its value, then ``values`` (``--k 3`` or ``--k=3``)."""
    out, skip = [], 0
    for a in argv:
        if skip:
            skip -= 1
            continue
        if a == option:
            skip = 1
            continue
        out.append(a)
    return out + list(values)


def _command_cases() -> dict[str, Case]:
    cases: dict[str, Case] = {}
    for name, (data, *_rest) in BYO_CASES.items():
        cases[f"calibrate L: {name}"] = Case(CALIBRATE, {"L": data}, "{L}")
        if name != "missing column":  # U need not have labels; every other case is bad for U too
            cases[f"calibrate U: {name}"] = Case(CALIBRATE, {"U": data}, "{U}")
    cases["calibrate U: no score column"] = Case(CALIBRATE, {"U": csv_bytes("u1,x,1", header="id,text,label")},
                                                 "{U}")
    cases["calibrate U: an id of L"] = Case(CALIBRATE, {"U": SAME_ID_U}, "{U}, row 3, field 'id': 'a2' is "
                                            "also the id of {L} row 3")
    for name, (extra, option) in BAD_OPTIONS.items():
        cases[f"calibrate option: {name}"] = Case(_with_option(CALIBRATE, option, *extra), named=option)
    cases["calibrate option: unknown interval"] = Case([*CALIBRATE, "--interval", "wide"], named="wide")
    cases["calibrate option: unknown correction"] = Case([*CALIBRATE, "--correction", "magic"], named="magic")
    cases["calibrate option: k above the labelled rows"] = Case(_with_option(CALIBRATE, "--k", "--k", "50"),
                                                                named="k=50")
    cases["calibrate: labelled file missing"] = Case(_with_option(CALIBRATE, "--labeled", "--labeled",
                                                                  "{tmp}/nope.csv"), named="nope.csv")
    cases["calibrate: unlabelled path is a directory"] = Case(_with_option(CALIBRATE, "--unlabeled",
                                                                           "--unlabeled", "{tmp}"), named="{tmp}")
    for name, (data, *_rest) in SCORE_INPUT_CASES.items():
        cases[f"score input: {name}"] = Case(SCORE, {"IN": data}, "{IN}")
        if name not in ("UTF-16 file", "extra field", "missing field"):
            cases[f"score file: {name}"] = Case(SCORE, {"SC": _score_file_bytes(data)}, "{SC}")
    for name, (args, named) in {
        "out is the input": (_with_option(SCORE, "--out", "--out", "{IN}"), "--out"),
        "out is a directory": (_with_option(SCORE, "--out", "--out", "{tmp}"), "--out"),
        "out in a missing directory": (_with_option(SCORE, "--out", "--out", "{tmp}/no/OUT.csv"), "--out"),
        "chunk size 0": ([*SCORE, "--chunk-size", "0"], "--chunk-size"),
        "params file missing": (_with_option(SCORE, "--params", "--params", "{tmp}/none.yaml"), "--params"),
        "unknown model kind": (_with_option(SCORE, "--model", "--model", "nosuch:model"), "nosuch"),
        "model file missing": (_with_option(SCORE, "--model", "--model", "file:{tmp}/none.csv"), "none.csv"),
        "option without a value": ([*SCORE, "--opt", "temperature"], "temperature"),
        "input missing": (_with_option(SCORE, "--input", "--input", "{tmp}/none.csv"), "none.csv"),
        **{f"out in {where}": (_with_option(SCORE, "--out", "--out", f"{where}/OUT.csv"), f"{where}/OUT.csv")
           for where in UNWRITABLE},
    }.items():
        cases[f"score option: {name}"] = Case(args, named=named)
    for name, (data, named) in PREDICT_FILE_CASES.items():
        cases[f"predict: {name}"] = Case(PREDICT, data, named)
    cases["predict: U with an id of L"] = Case(PREDICT, {"PU": csv_bytes("a2,Prices rose.", header="id,text")},
                                               "{PU}, row 2, field 'id': 'a2' is also the id of {PL} row 3")
    for name, (extra, named) in {
        "alpha 0": (["--alpha", "0"], "--alpha"), "threshold nan": (["--threshold", "nan"], "--threshold"),
        "k 0": (["--k", "0"], "--k"), "k above the labelled rows": (["--k", "50"], "k=50"),
        "out is the labelled input": (["--out", "{PL}"], "--out"),
        "out in /proc": (["--out", "/proc/OUT.csv"], "--out /proc/OUT.csv"),
        "unknown correction": (["--correction", "magic"], "magic"),
        "unknown interval": (["--interval", "wide"], "wide"),
        "unknown model kind": (["--model", "nosuch:model"], "nosuch"),
        "model without the recommended score kind": (["--model", "file:{SC}"], "p_positive"),
        "params file missing": (["--params", "{tmp}/none.yaml"], "--params"),
    }.items():
        cases[f"predict option: {name}"] = Case(_with_option(PREDICT, extra[0], *extra), named=named)
    for name, (data, *_rest) in LABEL_CASES.items():
        cases[f"labels add: {name}"] = Case(LABELS_ADD, {"LAB": data}, "{LAB}")
    for name, (data, named) in STORE_LABEL_CASES.items():
        cases[f"labels add: {name}"] = Case(LABELS_ADD, {"LAB": data}, named)
    for name, (data, *_rest) in LABEL_CASES.items():
        if name != "extra column":  # review CSVs may carry any other columns (text, theta, reason)
            cases[f"review import: {name}"] = Case(REVIEW_IMPORT, {"REV": data}, "{REV}")
    cases["review import: label 2"] = Case(REVIEW_IMPORT, {"REV": b"id,dataset,label\n101,clef2024,2\n"}, "label")
    for name, (data, named) in REVIEW_JSON_CASES.items():
        cases[f"review import: {name}"] = Case(["review", "import", "{RJ}"], {"RJ": data}, named)
    for name, (args, named) in {
        "neither .json nor .csv": (["review", "import", "{tmp}/answers.txt"], "answers.txt"),
        "no such file": (["review", "import", "{tmp}/none.json"], "none.json"),
        "a directory": (["review", "import", "{tmp}"], "{tmp}"),
    }.items():
        cases[f"review import: {name}"] = Case(args, named=named)
    for name, (extra, named) in {
        "limit 0": (["--limit", "0"], "--limit"), "limit text": (["--limit", "ten"], "--limit"),
        "unknown format": (["--format", "xml"], "--format"), "unknown order": (["--order", "best"], "--order"),
        "csv into .json": (["--format", "csv"], "--out"),
        "out is a directory": (["--out", "{tmp}"], "--out"),
        "out in a missing directory": (["--out", "{tmp}/no/tasks.json"], "--out"),
        **{f"out in {where}": (["--out", f"{where}/tasks.json"], f"--out {where}/tasks.json")
           for where in UNWRITABLE},
        "unknown target": (["--target", "no-such:target"], "no-such:target"),
        "unknown target, random": (["--order", "random", "--target", "no-such:target"], "no-such:target"),
    }.items():
        cases[f"review export: {name}"] = Case(_with_option(REVIEW_EXPORT, extra[0], *extra), named=named)
    cases["labels add: no such file"] = Case(["labels", "add", "{tmp}/none.csv"], named="none.csv")
    cases["labels add: a directory"] = Case(["labels", "add", "{tmp}"], named="{tmp}")
    for where in UNWRITABLE:  # checked before the store is asked for the report or the runs
        cases[f"report: out in {where}"] = Case(["report", "run:1", "--out", f"{where}/reports"],
                                                named=f"--out {where}/reports: nothing can be created")
        cases[f"evaluate: out in {where}"] = Case(["evaluate", "--out", f"{where}/held-out"],
                                                  named=f"--out {where}/held-out: nothing can be created")
    cases["report: out is a file"] = Case(["report", "run:1", "--out", "{L}"], named="--out {L}: is a file")
    cases["report: out under a file"] = Case(["report", "nosuch", "--out", "{L}/reports"],
                                             named="--out {L}/reports: {L} is a file")
    return cases


COMMAND_CASES = _command_cases()


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and modification time."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_command_suite_covers_every_command():
    """At least 80 distinct bad inputs and options across the commands that take them."""
    by_command = Counter(name.split(" ")[0].rstrip(":") for name in COMMAND_CASES)
    assert len(COMMAND_CASES) >= 80 and set(by_command) == {"calibrate", "predict", "score", "labels", "review",
                                                            "report", "evaluate"}, by_command


@pytest.mark.parametrize("case", COMMAND_CASES)
def test_every_command_refuses_bad_input_before_writing(use_db, tmp_path, capsys, case):
    """Exit 2 with one line naming the file and row, or the option; the store's row counts,
    data/, data.dvc and the input files unchanged; no output, no temporary file."""
    spec = COMMAND_CASES[case]
    paths = {}
    for key, data in (GOOD_FILES | spec.files).items():
        paths[key] = tmp_path / f"{key}{SUFFIX.get(key, '.csv')}"
        paths[key].write_bytes(data)
    subs = {k: str(v) for k, v in paths.items()} | {"OUT": str(tmp_path / "OUT.csv"), "tmp": str(tmp_path)}
    argv = [a.format(**subs) for a in spec.argv]
    before = (table_counts(use_db), _tree(ROOT / "data"), (ROOT / "data.dvc").read_bytes(), _tree(tmp_path))
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, (code, err)
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert spec.named.format(**subs) in err, err
    after = (table_counts(use_db), _tree(ROOT / "data"), (ROOT / "data.dvc").read_bytes(), _tree(tmp_path))
    assert after == before


# ---------------------------------------------------------------- refused in one line, not a traceback

#: a claim stored for explain's case (its dataset is this test's own)
EXPLAINED = "tb-explained-1"
#: command lines (placeholders: the files of GOOD_FILES and ONE_LINE_FILES, OUT, tmp) that once gave a
#: traceback, and what their one error line names
ONE_LINE_CASES: dict[str, tuple[list[str], str]] = {
    "explain id:\u00b2": (["explain", "id:\u00b2"], "id:\u00b2"),
    "explain --run beyond a bigint": (["explain", EXPLAINED, "--run", "9999999999999999999999999"], "--run"),
    "explain id: beyond a bigint": (["explain", "id:99999999999999999999"], "id:99999999999999999999"),
    "serve --port 70000": (["serve", "--port", "70000"], "--port"),
    "label-studio-backend --port 70000": (["label-studio-backend", "--project", "1", "--port", "70000"], "--port"),
    "predict --params not YAML": ([*PREDICT, "--params", "{BADYAML}"], "{BADYAML}, row 3: not valid YAML"),
    "predict --params a list": ([*PREDICT, "--params", "{LISTYAML}"], "{LISTYAML}: not a params file"),
    "review import of JSON nested 100,000 deep": (["review", "import", "{DEEP}"], "{DEEP}: "),
}
ONE_LINE_FILES = {"BADYAML.yaml": b"predict:\n  k: [1\n  alpha: 0.1\n", "LISTYAML.yaml": b"- k\n- alpha\n",
                  "DEEP.json": b"[" * 100_000 + b"]" * 100_000}


@pytest.mark.parametrize("case", ONE_LINE_CASES)
def test_refused_in_one_line_not_a_traceback(use_db, tmp_path, capsys, case):
    """A character that is a digit to Python but no number, an id no bigint holds, a port above
    65535, a params file that is not YAML (or not a mapping), JSON nested past the parser's
    recursion: exit 2 with one line naming the option or the file, the store unchanged."""
    from checkworthy.store import rows as store

    with use_db.begin() as conn:
        store.upsert_claims(conn, [store.NewClaim("tb-one-line", "U", EXPLAINED, "A claim explain finds.")])
    argv, named = ONE_LINE_CASES[case]
    paths = {k: tmp_path / f"{k}{SUFFIX.get(k, '.csv')}" for k in GOOD_FILES}
    for k, path in paths.items():
        path.write_bytes(GOOD_FILES[k])
    for name, data in ONE_LINE_FILES.items():
        paths[name.split(".")[0]] = tmp_path / name
        (tmp_path / name).write_bytes(data)
    subs = {k: str(v) for k, v in paths.items()} | {"OUT": str(tmp_path / "OUT.csv"), "tmp": str(tmp_path)}
    before = table_counts(use_db)
    code = main([a.format(**subs) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, (code, err)
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert named.format(**subs) in err, err
    assert table_counts(use_db) == before


@pytest.mark.parametrize("kind", ["label file", "Label Studio export"])
def test_a_dataset_not_pulled_yet_is_named_not_a_traceback(use_db, tmp_path, capsys, monkeypatch, kind):
    """A label naming a claim of clef2024 by id alone, in a clone whose raw data is not pulled:
    one line naming the file, the row and the dataset, and saying how to get the data."""
    from checkworthy.data import datasets
    from checkworthy.runs.label_updates import _raw_claims

    monkeypatch.setattr(datasets, "DATA_DIR", tmp_path / "data")  # data/ as a fresh clone has it: absent
    _raw_claims.cache_clear()
    if kind == "label file":
        path = tmp_path / "labels.csv"
        path.write_bytes(b"id,dataset,label\ntb-unpulled-1,clef2024,1\n")
        argv, named = ["labels", "add", str(path)], f"{path}, row 2, field 'dataset': "
    else:
        path = tmp_path / "export.json"
        path.write_bytes(ls_export("tb-unpulled-1", "Yes"))
        argv, named = ["review", "import", str(path)], f"{path}, row 1"
    before = table_counts(use_db)
    try:
        code = main(argv)
    finally:
        _raw_claims.cache_clear()
    err = capsys.readouterr().err.strip()
    assert code == 2, (code, err)
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert named in err and "raw data of 'clef2024' is not there" in err and "dvc pull" in err, err
    assert table_counts(use_db) == before


# ---------------------------------------------------------------- outputs that cannot be written

#: what each command says of an output it cannot write (``{why}``: the system's words for it)
NO_FILE = "error: --out {out}: no file can be created in {folder} ({why}); write the output elsewhere"
NO_FOLDER = "error: --out {out}: nothing can be created in {folder} ({why}); write the output elsewhere"
OUTPUT_LINES: dict[str, tuple[list[str], str]] = {
    **{f"calibrate into {w}": (_with_option(CALIBRATE, "--out", "--out", f"{w}/o.csv"), NO_FILE) for w in UNWRITABLE},
    "calibrate into a device": (_with_option(CALIBRATE, "--out", "--out", "/dev/null"),
                                "error: --out /dev/null: exists and is not a regular file; name a file"),
    "calibrate under a file": (_with_option(CALIBRATE, "--out", "--out", "{L}/o.csv"),
                               "error: --out {L}/o.csv: {L} is a file, so no file can be made under it"),
    "predict into /proc": (_with_option(PREDICT, "--out", "--out", "/proc/o.csv"), NO_FILE),
    "score into /sys": (_with_option(SCORE, "--out", "--out", "/sys/o.csv"), NO_FILE),
    "review export into /proc": (["review", "export", "--out", "/proc/tasks.json"], NO_FILE),
    "report into /proc": (["report", "run:1", "--out", "/proc/reports"], NO_FOLDER),
    "evaluate into /sys": (["evaluate", "--out", "/sys/held-out"], NO_FOLDER),
}


@pytest.mark.parametrize("case", OUTPUT_LINES)
def test_an_output_that_cannot_be_written_is_refused_first(use_db, tmp_path, capsys, case):
    """Root may write anywhere the permission bits say, yet not in /proc or /sys: the output is
    tried (a file made and removed there) before anything is stored, and refused in one line."""
    argv, line = OUTPUT_LINES[case]
    paths = {k: tmp_path / f"{k}{SUFFIX.get(k, '.csv')}" for k in GOOD_FILES}
    for k, path in paths.items():
        path.write_bytes(GOOD_FILES[k])
    argv = [a.format(**{k: str(v) for k, v in paths.items()}) for a in argv]
    out = argv[argv.index("--out") + 1]
    before = table_counts(use_db)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    expected = re.escape(line.format(out=out, folder=str(Path(out).parent), why="WHY",
                                     L=paths["L"])).replace("WHY", "[^()]+")
    assert re.fullmatch(expected, err), err
    assert table_counts(use_db) == before


def _private_mounts() -> bool:
    """Whether a process here may mount a file system of its own (a private mount namespace:
    root and util-linux's unshare), to fill it without touching the machine's."""
    return bool(shutil.which("unshare")) and subprocess.run(
        ["unshare", "-m", "true"], capture_output=True).returncode == 0


#: run "$@" with its output folder "$1" on a full disk: a 64 KiB tmpfs filled by a ballast file, in
#: a mount namespace of its own (gone with the process); print the exit status and what is left
ON_A_FULL_DISK = """
mount -t tmpfs -o size=64k tmpfs "$1" || exit 99
head -c 1000000 /dev/zero > "$1/ballast" 2>/dev/null
folder=$1
shift
"$@"
echo "exit $?"
echo "left $(ls -A "$folder" | tr '\n' ' ')"
"""


def _on_a_full_disk(folder: Path, argv: list[str], db_url: str, home: Path) -> tuple[int, str, str]:
    """``checkworthy argv`` writing into ``folder`` on a full disk: (exit status, the last line of
    stderr, files left)."""
    folder.mkdir()
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", ON_A_FULL_DISK, "sh", str(folder),
         sys.executable, "-m", "checkworthy.cli.main", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DATABASE_URL": db_url, "HOME": str(home)})
    tail = dict(line.split(" ", 1) for line in proc.stdout.splitlines()[-2:])
    assert "Traceback" not in proc.stderr, proc.stderr
    return int(tail["exit"]), proc.stderr.strip().splitlines()[-1], tail["left"].strip()


def test_a_full_disk_at_the_final_write_leaves_no_partial_output(use_db, db_url, tmp_path, capsys):
    """The disk fills after the checks passed: the last write fails, the half-written file is
    removed, one line says so and that the work is stored; the same command again writes it
    without computing anything anew."""
    if not _private_mounts():
        pytest.skip("needs a private mount namespace (root and unshare) to fill a file system")
    claims = _real_claims(50)
    lab, unl = tmp_path / "L.csv", tmp_path / "U.csv"
    lab.write_bytes(_claims_csv(claims[:40], labels=True))
    unl.write_bytes(_claims_csv(claims[40:], labels=False))
    full = tmp_path / "full"
    argv = ["calibrate", "--labeled", str(lab), "--unlabeled", str(unl), "--k", "3"]
    code, err, left = _on_a_full_disk(full, [*argv, "--out", f"{full}/OUT.csv"], db_url, tmp_path)
    stored = re.search(r"; run (\d+) is stored", err)
    run_id = int(stored[1]) if stored else None
    assert (code, left) == (1, "ballast"), err
    assert err == (f"error: {full}/OUT.csv: could not be written (No space left on device); no partial "
                   f"output was left; run {run_id} is stored: the same command again writes it without "
                   "recomputing"), err
    before = table_counts(use_db)
    assert main([*argv, "--out", str(tmp_path / "OUT.csv")]) == 0
    assert f"(run {run_id}," in capsys.readouterr().out
    assert table_counts(use_db) == before  # the stored run, reused
    assert len((tmp_path / "OUT.csv").read_text().splitlines()) == 11

    scores = tmp_path / "scores.csv"
    scores.write_bytes(_score_file_bytes(_claims_csv(claims[40:], labels=False, scored=False)))
    code, err, left = _on_a_full_disk(tmp_path / "full-2", ["score", "--params", "", "--model", f"file:{scores}",
                                                           "--input", str(unl), "--out", f"{tmp_path}/full-2/S.csv"],
                                      db_url, tmp_path)
    assert (code, left) == (1, "ballast"), err
    assert err == (f"error: {tmp_path}/full-2/S.csv: could not be written (No space left on device); no "
                   "partial output was left; the scores are stored: the same command again writes them "
                   "without scoring"), err


def _real_claims(n: int) -> list:
    claims, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    return claims[:n]


def _claims_csv(claims: list, labels: bool, scored: bool = True) -> bytes:
    """``id,text[,score][,label]`` of real claims, with scores loosely following the label."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", "text"] + (["score"] if scored else []) + (["label"] if labels else []))
    for i, c in enumerate(claims):
        w.writerow([c.source_id, c.text] + ([f"{0.3 + 0.4 * c.label + (i % 5) / 25:.2f}"] if scored else [])
                   + ([c.label] if labels else []))
    return buf.getvalue().encode()


def test_a_report_folder_is_written_whole_or_not_at_all(tmp_path):
    """A report folder fails mid-way (a name the file system refuses): the old folder is left as it
    was and nothing half-written stays beside it."""
    from checkworthy.data.outputs import write_tree
    from checkworthy.errors import OutputUnwritable

    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "report.md").write_text("the old report\n")
    with pytest.raises(OutputUnwritable, match="File name too long"):
        write_tree(folder, {"report.md": b"new", f"figures/{'x' * 300}.png": b"png"})
    assert [p.name for p in tmp_path.iterdir()] == ["report"]
    assert [p.name for p in folder.iterdir()] == ["report.md"]
    assert (folder / "report.md").read_text() == "the old report\n"
    write_tree(folder, {"report.md": b"new", "figures/a.png": b"png"})
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) == ["figures", "figures/a.png",
                                                                            "report.md"]
    assert [p.name for p in tmp_path.iterdir()] == ["report"]


# ---------------------------------------------------------------- the dataset loaders

CLEF_HEADER = "Sentence_id\tText\tclass_label"
CLEF_ROWS = ["101\tThe deficit tripled in four years.\tYes", "102\tThank you, Chris.\tNo",
             '103\t"Now, let\'s talk about ""jobs""."\tNo', "104\tWe lost 700,000 jobs a month.\tYes"]


def clef_bytes(*rows: str, header: str = CLEF_HEADER) -> bytes:
    return ("\n".join([header, *rows]) + "\n").encode()


def clef_with(i: int, row: str) -> bytes:
    rows = list(CLEF_ROWS)
    rows[i] = row
    return clef_bytes(*rows)



CLEF_CASES: dict[str, tuple[bytes, int, str | None, str | None]] = {
    "latin-1 bytes": (clef_with(1, "102\tCaf\xe9.\tNo").replace(b"\xc3\xa9", b"\xe9"), 3, "Text", None),
    "UTF-16 file": ("\n".join([CLEF_HEADER, *CLEF_ROWS]).encode("utf-16"), 1, None, None),
    "NUL byte": (clef_with(0, "101\tThe deficit\x00 tripled.\tYes"), 2, "Text", None),
    "empty file": (b"", 1, None, None),
    "header only": (clef_bytes(), 2, None, None),
    "missing column": (clef_bytes("101\tx", header="Sentence_id\tText"), 1, "class_label", None),
    "duplicate column": (clef_bytes("101\tx\tYes\ty", header=CLEF_HEADER + "\tText"), 1, "Text", None),
    "comma-separated instead of tabs": (b"Sentence_id,Text,class_label\n1,a,Yes\n", 1, None, None),
    "missing field": (clef_with(1, "102\tThank you, Chris."), 3, "class_label", None),
    "extra field": (clef_with(1, "102\tThank you.\tNo\t9"), 3, None, None),
    "unclosed quote": (clef_with(1, '102\t"Thank you, Chris.\tNo'), 3, "Text", None),
    "text after a closing quote": (clef_with(1, '102\t"Thank" you\tNo'), 3, "Text", None),
    "huge field": (clef_with(0, "101\t" + "x" * 2_000_000 + "\tYes"), 2, "Text", None),
    "label outside Yes/No": (clef_with(3, "104\tWe lost jobs.\tyes"), 5, "class_label", None),
    "label 1 instead of Yes": (clef_with(3, "104\tWe lost jobs.\t1"), 5, "class_label", None),
    "non-numeric id": (clef_with(2, "x103\tNow.\tNo"), 4, "Sentence_id", None),
    "empty id": (clef_with(2, "\tNow.\tNo"), 4, "Sentence_id", None),
}


@pytest.mark.parametrize("case", _case_params(CLEF_CASES))
def test_clef_loader_names_file_row_and_field(tmp_path, case):
    data, row, field, _ = CLEF_CASES[case]
    assert_refused(lambda p: load_clef(p, "train"), tmp_path / "clef.tsv", data, row, field)


CB_HEADER = "Sentence_id,Text,Speaker,File_id,Verdict"
CB_ROWS = ["16,I think we've seen a deterioration.,George Bush,1988-09-25.txt,-1",
           '17,"We cut taxes by 20%, he said.",Bill,2012-10-03.txt,1',
           "18,Thank you.,Jim,2016-09-26.txt,0"]


def cb_with(i: int, row: str) -> bytes:
    rows = list(CB_ROWS)
    rows[i] = row
    return ("\n".join([CB_HEADER, *rows]) + "\n").encode()


CB_CASES: dict[str, tuple[bytes, int, str | None, str | None]] = {
    "latin-1 bytes": (cb_with(2, "18,Merci \xe9.,Jim,2016-09-26.txt,0").replace(b"\xc3\xa9", b"\xe9"),
                      4, "Text", None),
    "NUL byte": (cb_with(2, "18,Thank\x00 you.,Jim,2016-09-26.txt,0"), 4, "Text", None),
    "missing column": (b"Sentence_id,Text,File_id\n16,x,2012.txt\n", 1, "Verdict", None),
    "missing field": (cb_with(1, '17,"We cut taxes.",Bill,2012-10-03.txt'), 3, "Verdict", None),
    "unclosed quote": (cb_with(1, '17,"We cut taxes by 20%, he said.,Bill,2012-10-03.txt,1'), 3, "Text",
                       None),
    "verdict outside -1/0/1": (cb_with(2, "18,Thank you.,Jim,2016-09-26.txt,2"), 4, "Verdict", None),
    "verdict not a number": (cb_with(2, "18,Thank you.,Jim,2016-09-26.txt,high"), 4, "Verdict", None),
    "non-numeric id": (cb_with(0, "x16,I think.,George Bush,1988-09-25.txt,-1"), 2, "Sentence_id", None),
}


@pytest.mark.parametrize("case", _case_params(CB_CASES))
def test_claimbuster_loader_names_file_row_and_field(tmp_path, case):
    data, row, field, _ = CB_CASES[case]
    assert_refused(load_claimbuster, tmp_path / "crowdsourced.csv", data, row, field)


def test_loaders_keep_and_report_duplicate_ids(tmp_path):
    """Duplicate ids are a documented defect of the official files: kept, and reported."""
    path = tmp_path / "clef.tsv"
    path.write_bytes(clef_with(2, "101\tAnother text under the same id.\tNo"))
    claims, report = load_clef(path, "train")
    assert [d.source_ids for d in report.duplicates if d.kind == "id"] == [("101", "101")]
    assert [d.rows for d in report.duplicates if d.kind == "id"] == [(2, 4)]


# ---------------------------------------------------------------- random mutations

SPECIALS = ['"', ",", "\t", "\n", "\r", "\x00", "\ufeff", "é", '""', "\\", " ", "1e999", "-"]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to three random edits of the kinds real files suffer from."""
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(7)
        pos = rng.randrange(len(data) + 1)
        if op == 0 and data:  # flip a byte
            i = min(pos, len(data) - 1)
            data = data[:i] + bytes([rng.randrange(256)]) + data[i + 1:]
        elif op == 1:  # insert a troublesome character
            data = data[:pos] + rng.choice(SPECIALS).encode("utf-8") + data[pos:]
        elif op == 2:  # delete a span
            data = data[:pos] + data[pos + rng.randint(1, 8):]
        elif op == 3:  # truncate
            data = data[:pos]
        else:  # swap, double or drop lines
            lines = data.split(b"\n")
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            if op == 4:
                lines[i], lines[j] = lines[j], lines[i]
            elif op == 5:
                lines.insert(i, lines[j])
            else:
                del lines[i]
            data = b"\n".join(lines)
    return data


def _head(path: Path, n: int) -> bytes:
    """The first n lines of a real file (keeps its quoting and line endings)."""
    with open(path, "rb") as fh:
        return b"".join(fh.readline() for _ in range(n))


def _scored_seed(columns: int = 4) -> bytes:
    """12 real claims as ``id,text,score,label`` (or the first ``columns`` of those)."""
    claims, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    rows = [[c.source_id, c.text, f"{(i * 37 % 100) / 100:.2f}", str(c.label)]
            for i, c in enumerate(claims[:12])]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([r[:columns] for r in [HEADER.split(","), *rows]])
    return buf.getvalue().encode()


def _check_byo(path: Path) -> None:
    rows = read_scored_csv(path, label_required=True)
    assert rows and len({r.id for r in rows}) == len(rows)
    assert all(0.0 <= r.score <= 1.0 and r.label in (0, 1) and r.text.strip() for r in rows)


def _check_score_input(path: Path) -> None:
    from checkworthy.runs.score_file import read_input

    rows = read_input(path)
    assert rows and len({i for i, _ in rows}) == len(rows) and all(t.strip() for _, t in rows)


def _check_score_file(path: Path) -> None:
    from checkworthy.scorers.file_scorer import read_score_file

    scores, sha = read_score_file(path)
    assert scores and len(sha) == 64
    assert all(s.score is None or 0.0 <= s.score <= 1.0 for s in scores.values())


def _check_clef(path: Path) -> None:
    claims, report = load_clef(path, "train")
    assert all(c.label in (0, 1) and c.text and c.source_id.isdigit() for c in claims)
    assert report.rows_kept == len(claims)


def _check_claimbuster(path: Path) -> None:
    claims, report = load_claimbuster(path)
    assert all(c.label in (0, 1) and c.text and c.source_id.isdigit() for c in claims)


PARSERS: dict[str, tuple[Callable[[], bytes], Callable[[Path], None], str]] = {
    "byo": (_scored_seed, _check_byo, "L.csv"),
    "score input": (lambda: _scored_seed(columns=2), _check_score_input, "in.csv"),
    "score file": (_scored_seed, _check_score_file, "scores.csv"),
    "clef": (lambda: _head(raw_path("clef2024", "CT24_checkworthy_english_train.tsv"), 15), _check_clef,
             "clef.tsv"),
    "claimbuster": (lambda: _head(raw_path("claimbuster", "crowdsourced.csv"), 15), _check_claimbuster,
                    "cb.csv"),
}
N_MUTANTS = 250


@pytest.mark.parametrize("parser", list(PARSERS))
def test_random_mutations_give_valid_rows_or_a_data_error(tmp_path, parser):
    seed_file, check, name = PARSERS[parser]
    seed = seed_file()
    path = tmp_path / name
    path.write_bytes(seed)
    check(path)  # the unmutated file is valid
    rng = random.Random(f"checkworthy-fuzz-{parser}")
    outcomes = {"ok": 0, "error": 0}
    for i in range(N_MUTANTS):
        data = mutate(seed, rng)
        path.write_bytes(data)
        try:
            check(path)
            outcomes["ok"] += 1
        except DataError as err:
            outcomes["error"] += 1
            n_lines = data.count(b"\n") + 1
            assert err.file == str(path), (i, data[:200])
            assert err.row is not None and 1 <= err.row <= n_lines + 1, (i, str(err), data[:300])
        except Exception as exc:  # noqa: BLE001 - anything else is the bug this test looks for
            raise AssertionError(
                f"mutant {i} of {parser}: {type(exc).__name__}: {exc}\n{data[:300]!r}") from exc
    assert outcomes["error"] > N_MUTANTS // 10 and outcomes["ok"] > 0, outcomes
