"""`checkworthy calibrate` end to end on real claims, through the real store and SQL kNN."""

import csv

import numpy as np
import pytest

from checkworthy.cli.main import main
from checkworthy.data.datasets import load_clef
from tests.conftest import raw_path, table_counts

K = 5


@pytest.fixture(scope="module")
def claims():
    rows, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    rng = np.random.default_rng(3)
    # scores loosely related to the label, like a weak model's
    return [(c.source_id, c.text, round(float(np.clip(0.55 + 0.2 * c.label + rng.normal(0, 0.2), 0, 1)), 4),
             c.label) for c in rows[:100]]


def write(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


@pytest.fixture()
def files(tmp_path, claims):
    lab = write(tmp_path / "L.csv", ["id", "text", "score", "label"], claims[:70])
    unl = write(tmp_path / "U.csv", ["id", "text", "score", "label"], claims[70:])
    return lab, unl, tmp_path / "OUT.csv"


def test_calibrate_writes_one_row_per_claim_with_nnppi(use_db, files, claims, capsys):
    lab, unl, out = files
    assert main(["calibrate", "--labeled", str(lab), "--unlabeled", str(unl), "--k", str(K),
                 "--out", str(out)]) == 0
    with open(out, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["id", "score", "theta", "ci_low", "ci_high", "decision", "knn_mean", "neighbors"]
    assert [r["id"] for r in rows] == [c[0] for c in claims[70:]]
    by_id = {c[0]: c for c in claims[:70]}
    for r in rows:
        nbrs = r["neighbors"].split(";")
        assert len(nbrs) == K and set(nbrs) <= set(by_id)
        resid = np.mean([by_id[n][3] - by_id[n][2] for n in nbrs])
        assert float(r["theta"]) == pytest.approx(float(r["score"]) + resid, abs=1e-5)
        assert float(r["knn_mean"]) == pytest.approx(np.mean([by_id[n][3] for n in nbrs]), abs=1e-6)
        assert int(r["decision"]) == int(float(r["theta"]) >= 0.5)
        assert float(r["ci_low"]) <= float(r["theta"]) <= float(r["ci_high"])
    printed = capsys.readouterr().out
    assert "nnppi" in printed and "weighted F1" in printed and "coverage" in printed


def test_rerun_reuses_the_stored_run(use_db, files, capsys):
    lab, unl, out = files
    args = ["calibrate", "--labeled", str(lab), "--unlabeled", str(unl), "--k", str(K), "--out", str(out)]
    assert main(args) == 0
    before = table_counts(use_db)
    assert main(args) == 0
    assert table_counts(use_db) == before


def test_unlabelled_file_without_label_column(use_db, tmp_path, claims):
    lab = write(tmp_path / "L.csv", ["id", "text", "score", "label"], claims[:70])
    unl = write(tmp_path / "U.csv", ["id", "text", "score"], [c[:3] for c in claims[70:80]])
    out = tmp_path / "o.csv"
    assert main(["calibrate", "--labeled", str(lab), "--unlabeled", str(unl), "--k", "3", "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 11


BAD = {
    "missing column": (["id", "text", "score"], lambda rows: [r[:3] for r in rows], "L", "label", 1),
    "label not 0/1": (None, lambda rows: [rows[0], (*rows[1][:3], 2), *rows[2:]], "L", "label", 3),
    "score above 1": (None, lambda rows: [rows[0], rows[1], (rows[2][0], rows[2][1], 1.5, 1), *rows[3:]],
                      "L", "score", 4),
    "score not a number": (None, lambda rows: [(rows[0][0], rows[0][1], "high", 0), *rows[1:]], "L", "score", 2),
    "duplicate id": (None, lambda rows: [*rows[:5], (rows[0][0], *rows[5][1:]), *rows[6:]], "L", "id", 7),
    "empty text": (None, lambda rows: [*rows[:3], (rows[3][0], "   ", *rows[3][2:]), *rows[4:]], "L", "text", 5),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_names_file_row_field_and_writes_nothing(use_db, tmp_path, claims, capsys, case):
    header, mutate, which, field, line = BAD[case]
    lab = write(tmp_path / "L.csv", header or ["id", "text", "score", "label"], mutate(claims[:70]))
    unl = write(tmp_path / "U.csv", ["id", "text", "score"], [c[:3] for c in claims[70:]])
    before = table_counts(use_db)
    code = main(["calibrate", "--labeled", str(lab), "--unlabeled", str(unl), "--k", "3",
                 "--out", str(tmp_path / "o.csv")])
    err = capsys.readouterr().err
    assert code == 2
    assert str(lab) in err and f"row {line}" in err and f"field '{field}'" in err
    assert table_counts(use_db) == before
    assert not (tmp_path / "o.csv").exists()


def test_bad_unlabelled_score_is_reported_against_u(use_db, tmp_path, claims, capsys):
    lab = write(tmp_path / "L.csv", ["id", "text", "score", "label"], claims[:70])
    bad = [c[:3] for c in claims[70:75]] + [(claims[75][0], claims[75][1], "-0.1")]
    unl = write(tmp_path / "U.csv", ["id", "text", "score"], bad)
    before = table_counts(use_db)
    assert main(["calibrate", "--labeled", str(lab), "--unlabeled", str(unl), "--k", "3",
                 "--out", str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err
    assert str(unl) in err and "row 7" in err and "field 'score'" in err
    assert table_counts(use_db) == before
