"""`checkworthy predict`: the recommended path on real claims, the real fine-tuned models and the real
store."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from checkworthy.cli.main import main
from checkworthy.data.datasets import load_clef
from checkworthy.runs.own_scores import OUT_COLUMNS
from checkworthy.store.audit import table_counts
from checkworthy.testing.claims import write_csv
from checkworthy.testing.datasets import raw_path

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """40 balanced train claims as L; 16 dev-test claims (with labels) as U."""
    train, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_train.tsv"), "train")
    test, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    lab = [c for c in train if c.label == 1][:20] + [c for c in train if c.label == 0][:20]
    d = tmp_path_factory.mktemp("predict")
    return (write_csv(d / "L.csv", ["id", "text", "label"], [(c.source_id, c.text, c.label) for c in lab]),
            write_csv(d / "U.csv", ["id", "text", "label"], [(c.source_id, c.text, c.label) for c in test[:16]]),
            d)


def test_predict_scores_calibrates_and_reports_the_batch_share(use_db, files, capsys):
    lab, unl, d = files
    out = d / "OUT.csv"
    argv = ["predict", "--labeled", str(lab), "--unlabeled", str(unl), "--out", str(out), "--k", "5"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    with open(out, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == OUT_COLUMNS and len(rows) == 16
    for r in rows:
        assert 0 <= float(r["score"]) <= 1 and float(r["ci_low"]) <= float(r["ci_high"])
        assert 1 <= len(r["neighbors"].split(";")) <= 5 and r["decision"] in ("0", "1")  # auto picks k
    assert "classifier:minilm-student p_positive, correction auto, interval mondrian, k = 5" in printed
    assert "auto chose " in printed and "cross-validated positive-class F1 on the labelled file" in printed
    # the fine-tuned model separates these 40 L claims, so ppi_py's interval may be undefined
    assert "share check-worthy in this batch:" in printed
    assert "label-shift PPI" in printed or "no interval: one decision throughout" in printed
    assert "F1 c1" in printed and "ROC AUC" in printed and "true share check-worthy" in printed
    scores = np.array([float(r["score"]) for r in rows])
    assert len(set(scores.round(6))) > 1  # the model's scores, not a constant
    before = table_counts(use_db)  # a second call reuses the stored scores and the run
    assert main(argv) == 0
    assert table_counts(use_db) == before


def test_batch_prior_moves_the_threshold_on_theta(use_db, files, capsys):
    """``--prior batch``: decisions are theta >= the threshold Bayes' rule gives for the batch's
    estimated share, stored in the run's params; L's prior keeps 0.5."""
    from checkworthy.store.calibration_runs import load_results, load_run

    lab, unl, d = files
    common = ["predict", "--labeled", str(lab), "--unlabeled", str(unl), "--k", "5",
              "--model", "classifier:minilm-lr", "--score-kind", "p_positive"]
    assert main([*common, "--out", str(d / "labelled.csv"), "--prior", "labelled"]) == 0
    assert main([*common, "--out", str(d / "batch.csv"), "--prior", "batch"]) == 0
    printed = capsys.readouterr().out
    assert "prior batch" in printed and "decisions for the batch's prior: theta >= " in printed
    with use_db.connect() as conn:
        run_ids = sorted({r[0] for r in conn.exec_driver_sql(
            "SELECT id FROM calibration_runs ORDER BY id DESC LIMIT 2").all()})
        labelled, batch = (load_run(conn, i) for i in run_ids)
        assert "prior" not in labelled["params"]
        prior = batch["params"]["prior"]
        assert prior["labelled"] == 0.5 and prior["batch"] == batch["params"]["prevalence"]["estimate"]
        t = prior["threshold_on_theta"]
        for r in load_results(conn, batch["id"]):
            assert r["decision"] == (r["theta"] >= t)
        # the threshold reads L's share and L's confusion matrix: a bound certified on L is approximate
        assert batch["params"]["review"]["threshold_from_labels"]
        assert "threshold_from_labels" not in labelled["params"]["review"]
    assert "approximate: the threshold was chosen on the same labelled claims" in printed
    assert main([*common, "--out", str(d / "x.csv"), "--prior", "uniform"]) == 2
    assert "--prior" in capsys.readouterr().err
    # the paper's path builds no leave-one-out lists: its share comes from the raw score's decisions
    assert main([*common, "--out", str(d / "paper.csv"), "--correction", "paper", "--interval", "z",
                 "--prior", "labelled"]) == 0
    assert "share check-worthy in this batch:" in capsys.readouterr().out
    with use_db.connect() as conn:
        paper = load_run(conn, conn.exec_driver_sql("SELECT max(id) FROM calibration_runs").scalar())
    assert paper["params"]["prevalence"]["from"] == "raw score" and paper["params"]["correction"] == "paper"


def test_f1_prior_decides_at_the_cut_with_the_best_f1_on_the_labelled_file(use_db, files, capsys):
    """``--prior f1``: decisions are theta >= the cut of :data:`~checkworthy.method.decision_cut.CUTS`
    with the best positive-class F1 on L's leave-one-out theta, recorded with L's F1 there and at
    0.5; the decide-or-review rule is certified at that cut, and the run is read back as an f1 run."""
    from checkworthy.method.decision_cut import CUTS
    from checkworthy.store.calibration_runs import load_results, load_run
    from checkworthy.store.run_spec import RunRecord, RunSpec

    lab, unl, d = files
    assert main(["predict", "--labeled", str(lab), "--unlabeled", str(unl), "--k", "5", "--model",
                 "classifier:minilm-lr", "--score-kind", "p_positive", "--out", str(d / "f1.csv"),
                 "--prior", "f1"]) == 0
    printed = capsys.readouterr().out
    assert "prior f1" in printed
    assert "decisions at the cut with the best positive-class F1 on the labelled file" in printed
    with use_db.connect() as conn:
        run = load_run(conn, conn.exec_driver_sql("SELECT max(id) FROM calibration_runs").scalar())
        results = load_results(conn, run["id"])
    prior = run["params"]["prior"]
    t = prior["threshold_on_theta"]
    assert prior["mode"] == "f1" and t in CUTS
    assert prior["f1_labelled"] >= prior["f1_labelled_at_run_threshold"]
    share = run["params"]["prevalence"]["estimate"]  # L weighed to the batch's share where estimated
    assert prior["weighted_to_batch_share"] == share
    if share is not None:
        assert f"weighted to this batch's estimated share of check-worthy claims {share:.3f}: theta >= " in printed
    assert run["params"]["review"]["threshold"] == t and run["params"]["review"]["threshold_from_labels"]
    assert "approximate: the threshold was chosen on the same labelled claims" in printed
    for r in results:
        assert r["decision"] == (r["theta"] >= t)
    assert RunRecord.of(run).threshold_on_theta(run["threshold"]) == t
    assert RunSpec.from_row(run, run["label_set_id"], [r["claim_id"] for r in results]).methods.prior == "f1"
    with open(unl, newline="", encoding="utf-8") as fh:
        first = next(csv.DictReader(fh))["id"]
    assert main(["explain", first, "--run", str(run["id"])]) == 0
    assert f"threshold {t:.4g} (the run's 0.5, moved by its prior)" in capsys.readouterr().out


def test_auto_prior_records_what_it_decided_as_and_why(use_db, files, capsys):
    """``--prior auto``: the F1 cut where L's share lies within the batch's estimated interval,
    L's prior elsewhere; the run records both the mode (read back as ``auto``) and what it
    decided as, with the reason, and decides at the recorded threshold."""
    from checkworthy.method.decision_cut import auto_prior
    from checkworthy.method.prevalence import stored_share
    from checkworthy.store.calibration_runs import load_results, load_run
    from checkworthy.store.run_spec import RunRecord, RunSpec

    lab, unl, d = files
    assert main(["predict", "--labeled", str(lab), "--unlabeled", str(unl), "--k", "5", "--model",
                 "classifier:minilm-lr", "--score-kind", "p_positive", "--out", str(d / "auto.csv"),
                 "--prior", "auto"]) == 0
    printed = capsys.readouterr().out
    with use_db.connect() as conn:
        run = load_run(conn, conn.exec_driver_sql(  # the newest auto run: an earlier one may be reused
            "SELECT max(id) FROM calibration_runs WHERE params->'prior'->>'mode' = 'auto'").scalar())
        results = load_results(conn, run["id"])
    prior = run["params"]["prior"]
    decided_as, why = auto_prior(stored_share(run["params"]["prevalence"]))
    assert (prior["mode"], prior["decided_as"], prior["why"]) == ("auto", decided_as, why)
    assert f"prior auto, decided as {decided_as}: {why}" in printed
    t = RunRecord.of(run).threshold_on_theta(run["threshold"])
    assert ("f1_labelled" in prior) == (decided_as == "f1")
    if decided_as == "labelled":
        assert t == run["threshold"]
    assert run["params"]["review"]["threshold"] == t
    for r in results:
        assert r["decision"] == (r["theta"] >= t)
    assert RunSpec.from_row(run, run["label_set_id"], [r["claim_id"] for r in results]).methods.prior == "auto"
