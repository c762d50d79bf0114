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
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from checkworthy.cli.main import main
from checkworthy.config import ROOT
from checkworthy.data.datasets import load_claimbuster, load_clef
from checkworthy.errors import DataError
from checkworthy.runs.own_scores import read_scored_csv
from tests.conftest import raw_path, table_counts

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


CLI_CASES = ["latin-1 bytes", "NUL byte in a text", "empty file", "missing column", "unclosed quote",
             "huge field", "score not a number", "label 2", "duplicate id", "row with a missing field"]


@pytest.mark.parametrize("case", CLI_CASES)
@pytest.mark.parametrize("which", ["labeled", "unlabeled"])
def test_calibrate_cli_refuses_bad_files_and_writes_nothing(use_db, tmp_path, capsys, case, which):
    data, row, _, _ = BYO_CASES[case]
    good_l = tmp_path / "L.csv"
    good_l.write_bytes(csv_bytes(*GOOD_ROWS))
    u = _u_file(tmp_path)
    bad = tmp_path / f"bad-{which}.csv"
    if which == "unlabeled" and case == "missing column":  # U may lack label, never score
        data = csv_bytes("u1,x,1", header="id,text,label")
    bad.write_bytes(data)  # U may carry labels: every other case is malformed for U as well
    args = {"labeled": good_l, "unlabeled": u} | {which: bad}
    out = tmp_path / "OUT.csv"
    before = table_counts(use_db)
    code = main(["calibrate", "--labeled", str(args["labeled"]), "--unlabeled", str(args["unlabeled"]),
                 "--k", "2", "--out", str(out)])
    err = capsys.readouterr().err
    assert code != 0
    assert str(bad) in err and "row " in err, err
    assert table_counts(use_db) == before
    assert not out.exists()


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
}


@pytest.mark.parametrize("case", BAD_OPTIONS)
def test_calibrate_refuses_bad_options_before_anything_is_written(use_db, tmp_path, capsys, case):
    """One line naming the option; the store, the input files and the output path untouched."""
    good_l = tmp_path / "L.csv"
    good_l.write_bytes(csv_bytes(*GOOD_ROWS))
    u = _u_file(tmp_path)
    inputs = {p: p.read_bytes() for p in (good_l, u)}
    extra, option = BAD_OPTIONS[case]
    extra = [a.format(U=u, L=good_l, tmp=tmp_path) for a in extra]
    out = tmp_path / "OUT.csv"
    args = {"--k": "2", "--out": str(out)}
    argv = ["calibrate", "--labeled", str(good_l), "--unlabeled", str(u)]
    argv += [a for key, value in args.items() if not any(e.startswith(key) for e in extra) for a in (key, value)]
    before = table_counts(use_db)
    assert main(argv + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert option in err and "Traceback" not in err, err
    assert table_counts(use_db) == before
    assert {p: p.read_bytes() for p in inputs} == inputs
    assert not out.exists() and not list(tmp_path.glob("*.tmp"))


def test_score_refuses_to_overwrite_its_input(use_db, tmp_path, capsys):
    inp = tmp_path / "in.csv"
    inp.write_text("id,text\na,Prices rose 5 percent.\n", encoding="utf-8")
    before = table_counts(use_db)
    code = main(["score", "--model", "embedded:gemma3-270m", "--input", str(inp), "--out", str(inp),
                 "--params", ""])
    assert code == 2 and "--out" in capsys.readouterr().err
    assert table_counts(use_db) == before and inp.read_text(encoding="utf-8").startswith("id,text")


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


def test_labels_add_refuses_a_bad_file_and_writes_nothing(use_db, tmp_path, capsys):
    path = tmp_path / "labels.csv"
    path.write_bytes(LABEL_CASES["unclosed quote"][0])
    before = table_counts(use_db)
    assert main(["labels", "add", str(path)]) != 0
    err = capsys.readouterr().err
    assert str(path) in err and "row 3" in err and "field 'source'" in err, err
    assert table_counts(use_db) == before


#: label files that parse but name claims the store cannot take: refused before data/labels/
STORE_LABEL_CASES = {
    "unknown claim id": (b"id,dataset,label\nno-such-id,clef2024,1\n", "no-such-id"),
    "unknown dataset and no text": (b"id,dataset,label\n7,nowhere,1\n", "nowhere"),
}


@pytest.mark.parametrize("case", STORE_LABEL_CASES)
def test_labels_add_refuses_unknown_claims_before_copying(use_db, tmp_path, capsys, case):
    """Checked against the store first: nothing copied to data/labels/, versioned or stored."""
    data, named = STORE_LABEL_CASES[case]
    path = tmp_path / "labels.csv"
    path.write_bytes(data)
    labels_dir = ROOT / "data" / "labels"
    listing = sorted(p.name for p in labels_dir.rglob("*")) if labels_dir.exists() else []
    dvc_file = (ROOT / "data.dvc").read_bytes()
    before = table_counts(use_db)
    assert main(["labels", "add", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and named in err and "field 'id'" in err, err
    assert table_counts(use_db) == before and (ROOT / "data.dvc").read_bytes() == dvc_file
    assert (sorted(p.name for p in labels_dir.rglob("*")) if labels_dir.exists() else []) == listing


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


@pytest.mark.parametrize("case", ["latin-1 bytes", "NUL byte", "empty file", "missing column",
                                  "unclosed quote", "huge field", "duplicate id"])
@pytest.mark.parametrize("which", ["input", "scores"])
def test_score_cli_refuses_bad_files_and_writes_nothing(use_db, tmp_path, capsys, case, which):
    good_in = tmp_path / "in.csv"
    good_in.write_bytes(csv_bytes(*IN_ROWS, header=IN_HEADER))
    good_scores = tmp_path / "scores.csv"
    good_scores.write_bytes(_score_file_bytes(csv_bytes(*IN_ROWS, header=IN_HEADER)))
    bad = tmp_path / f"bad-{which}.csv"
    data = SCORE_INPUT_CASES[case][0]
    bad.write_bytes(data if which == "input" else _score_file_bytes(data))
    files = {"input": good_in, "scores": good_scores} | {which: bad}
    out = tmp_path / "OUT.csv"
    before = table_counts(use_db)
    code = main(["score", "--params", "", "--model", f"file:{files['scores']}",
                 "--input", str(files["input"]), "--out", str(out)])
    err = capsys.readouterr().err
    assert code != 0
    assert str(bad) in err and "row " in err, err
    assert table_counts(use_db) == before
    assert not out.exists()


def test_non_numeric_imported_scores_are_stored_failures_not_guesses():
    """By design a bad score *cell* is data: kept with its raw text, never turned into a number."""
    from checkworthy.scorers.file_scorer import parse_cell

    assert [parse_cell(c) for c in ("abc", "nan", "0,7", "", "1.2", "-0.1", "inf", "0.25")] == [
        (None, "not_a_number"), (None, "not_a_number"), (None, "not_a_number"), (None, "unparseable"),
        (None, "out_of_range"), (None, "out_of_range"), (None, "not_a_number"), (0.25, "ok")]


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
