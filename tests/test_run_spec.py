"""A calibration run's spec (store/run_spec.py): its run key pinned, refused when built with what
no run may use, read back from its row; and its audit trail: the code revision and each input
file's hash on every run ``calibrate`` and ``predict`` store, a blank code revision refused."""

from __future__ import annotations

import csv
from dataclasses import replace

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from checkworthy.cli.main import main
from checkworthy.data.datasets import load_clef
from checkworthy.data.hashing import sha256_file
from checkworthy.data.versioning import git_rev, package_version
from checkworthy.store.calibration_runs import insert_run, load_run
from checkworthy.store.rows import ScoreKey
from checkworthy.store.run_spec import DEFAULT_CORRECTION, RunContext, RunMethods, RunSpec, run_key
from checkworthy.testing.datasets import raw_path

KEY = ScoreKey(3, "v1", "abc", "token_prob")

#: run keys pinned (last changed when the decide-or-review rule came to be certified on the batch's
#: labelled neighbours; the batch's prior's when the margin came to be measured with each side of the
#: threshold scaled): a stored run must be reused until what it computes changes
PINNED = [
    ({}, "dcbbbc306484b5d0574a2b7bd8b8c7e93aa9eb7265aba8d2702ebe164095ba7b"),
    ({"knn": "hnsw", "ef_search": 80}, "1e2b240fa967765120e97cccca87d91d7f18e6b765bf2749064cc89ea6491c88"),
    ({"correction": "auto", "interval_method": "mondrian", "prior": "batch", "max_risk": 0.2, "delta": 0.05},
     "934b976192eb55b403d13395c4065224808d5090fcaa3a4d930c18a2bcba7a62"),
]


@pytest.mark.parametrize(("fields", "key"), PINNED)
def test_run_key_of_a_fixed_spec_is_pinned(fields, key):
    spec = RunSpec("t:test", (5, 2, 9), 7, KEY, RunMethods(10, **fields))
    assert run_key(spec, "fp0") == key


def test_spec_built_from_its_methods_is_the_same_spec():
    methods = RunMethods(10, interval_method="mondrian", correction="auto", knn="hnsw", ef_search=80)
    spec = RunSpec.of("t:test", [2, 5, 9], 7, KEY, methods)
    assert spec.methods == methods and spec.claim_ids == (2, 5, 9)
    assert spec == RunSpec("t:test", (2, 5, 9), 7, KEY, methods)


@pytest.mark.parametrize(("fields", "message"), [
    ({"interval_method": "bootstrap"}, "unknown interval 'bootstrap'"),
    ({"correction": "magic"}, "unknown correction 'magic'"),
    ({"prior": "uniform"}, "unknown prior 'uniform'"),
    ({"review_risk": "cost"}, "unknown review risk 'cost'"),
    ({"max_risk": 0.0}, "max risk must lie in (0, 1), got 0.0"),
    ({"delta": 1.5}, "delta must lie in (0, 1), got 1.5"),
    ({"knn": "annoy"}, "annoy"),
])
def test_a_spec_refuses_what_no_run_may_use_when_built(fields, message):
    for build in (lambda: RunSpec("t", (1,), 1, KEY, RunMethods(5, **fields)), lambda: RunMethods(5, **fields)):
        with pytest.raises(ValueError, match="^[^\n]*$") as err:
            build()
        assert message in str(err.value)


def test_a_spec_is_read_back_from_its_row():
    """What :meth:`RunSpec.to_row` stores, with what a complete run adds to its params, gives the
    spec back; a row that records nothing of the methods gives the defaults."""
    spec = RunSpec("t:test", (2, 5), 7, KEY, RunMethods(10, 0.1, 0.4, "mondrian", correction="auto", prior="batch",
                                                 review_risk="error", max_risk=0.2, delta=0.05, knn="hnsw",
                                                 ef_search=80))
    row = spec.to_row()
    row["params"] |= {"prior": {"mode": "batch"}, "review": {"risk": "error", "max_risk": 0.2, "delta": 0.05},
                      "knn": spec.methods.knn_path.as_dict()}
    assert RunSpec.from_row(row, 7, [5, 2]) == spec
    f1 = replace(spec, methods=replace(spec.methods, prior="f1"))
    f1_row = f1.to_row()
    f1_row["params"] |= {"prior": {"mode": "f1", "threshold_on_theta": 0.31}}
    assert RunSpec.from_row(f1_row, 7, [5, 2]).methods.prior == "f1"
    assert run_key(f1, "fp") != run_key(spec, "fp")
    bare = spec.to_row() | {"params": {}, "interval_method": "z"}
    old = RunSpec.from_row(bare, 7, (2, 5))
    assert (old.methods.correction, old.methods.prior, old.methods.knn) == (DEFAULT_CORRECTION, "labelled", "exact")


def test_git_rev_is_never_blank(tmp_path, monkeypatch):
    """A checkout gives its sha; a tree that is no git checkout (an image) gives
    ``$CHECKWORTHY_CODE_REV`` or else the package version marked -no-git."""
    monkeypatch.delenv("CHECKWORTHY_CODE_REV", raising=False)
    assert git_rev(tmp_path) == f"checkworthy-{package_version()}-no-git"
    monkeypatch.setenv("CHECKWORTHY_CODE_REV", "abc123")
    assert git_rev(tmp_path) == "abc123"
    monkeypatch.setenv("CHECKWORTHY_CODE_REV", "")
    assert git_rev() and git_rev() != f"checkworthy-{package_version()}-no-git"


def _write(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_calibrate_and_predict_store_the_code_and_each_input_and_a_blank_is_refused(use_db, tmp_path):
    """Every run ``calibrate`` and ``predict`` store names the code revision and each input file's
    sha256; the database refuses a run whose code revision is blank."""
    claims, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    rng = np.random.default_rng(5)
    rows = [(c.source_id, c.text, round(float(np.clip(0.5 + 0.2 * c.label + rng.normal(0, 0.2), 0, 1)), 4),
             c.label) for c in claims[200:260]]
    lab = _write(tmp_path / "L.csv", ["id", "text", "score", "label"], rows[:45])
    unl = _write(tmp_path / "U.csv", ["id", "text", "score"], [r[:3] for r in rows[45:]])
    p_lab = _write(tmp_path / "PL.csv", ["id", "text", "label"], [(r[0], r[1], r[3]) for r in rows[:45]])
    p_unl = _write(tmp_path / "PU.csv", ["id", "text"], [r[:2] for r in rows[45:]])
    scores = _write(tmp_path / "scores.csv", ["id", "text", "score"], [r[:3] for r in rows])
    with use_db.connect() as conn:
        before = conn.execute(text("SELECT coalesce(max(id), 0) FROM calibration_runs")).scalar_one()
    assert main(["calibrate", "--labeled", str(lab), "--unlabeled", str(unl), "--k", "4",
                 "--out", str(tmp_path / "c.csv")]) == 0
    assert main(["predict", "--labeled", str(p_lab), "--unlabeled", str(p_unl), "--k", "4",
                 "--model", f"file:{scores}", "--score-kind", "imported", "--correction", "paper",
                 "--interval", "z", "--out", str(tmp_path / "p.csv")]) == 0
    with use_db.connect() as conn:
        runs = conn.execute(text("SELECT id, code_rev, params->'inputs' AS inputs FROM calibration_runs "
                                 "WHERE id > :b ORDER BY id"), {"b": before}).all()
        stored = load_run(conn, runs[0].id)
    assert len(runs) == 2
    assert all(r.code_rev and r.code_rev == git_rev() for r in runs)
    assert [r.inputs for r in runs] == [
        {"labeled_sha256": sha256_file(lab), "unlabeled_sha256": sha256_file(unl)},
        {"labeled_sha256": sha256_file(p_lab), "unlabeled_sha256": sha256_file(p_unl)}]
    spec = RunSpec.from_row(stored, stored["label_set_id"], stored["claim_ids"])
    with pytest.raises(IntegrityError, match="calibration_runs_code_rev_given"), use_db.begin() as conn:
        insert_run(conn, spec, "blank-" + "0" * 58, stored["label_set_fingerprint"], {},
                   RunContext(code_rev=""))
