"""`calibrate`'s results flow straight from the run that computed them: a fresh run's rows and review
queue are the outcome it stored, equal to what the store then holds; the same command again reuses
the run, reads it from the store and writes the same bytes."""

import numpy as np
import pytest

from checkworthy.cli.main import main
from checkworthy.data.datasets import load_clef
from checkworthy.runs.calibration_run import RunOutcome, run_or_reuse
from checkworthy.runs.own_scores import UserFile, read_scored_files, run_results, store_files
from checkworthy.scorers.base import OK, Score
from checkworthy.store import rows as store
from checkworthy.store.audit import table_counts
from checkworthy.store.languages import claim_languages
from checkworthy.store.run_spec import RunMethods, RunSpec
from checkworthy.testing.claims import write_csv
from checkworthy.testing.datasets import raw_path

K = 5
REVIEW = ["--review-risk", "error", "--max-risk", "0.2", "--delta", "0.2"]


def claims(seed: int) -> list[tuple[str, str, float, int]]:
    """100 real claims with a weak model's scores, drawn by ``seed`` (another seed: another run)."""
    rows, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    rng = np.random.default_rng(seed)
    return [(c.source_id, c.text, round(float(np.clip(0.55 + 0.2 * c.label + rng.normal(0, 0.2), 0, 1)), 4),
             c.label) for c in rows[:100]]


def write_files(tmp_path, seed: int):
    got = claims(seed)
    lab = write_csv(tmp_path / "L.csv", ["id", "text", "score", "label"], got[:70])
    unl = write_csv(tmp_path / "U.csv", ["id", "text", "score", "label"], got[70:])
    return lab, unl


def test_a_fresh_run_gives_the_rows_and_queue_the_store_then_holds(use_db, tmp_path):
    lab_path, unl_path = write_files(tmp_path, seed=41)
    methods = RunMethods(K, max_risk=0.2, delta=0.2)
    lab, unl = read_scored_files(lab_path, unl_path, K)
    files = store_files(use_db, UserFile.of(lab_path), lab, UserFile.of(unl_path), unl)
    with use_db.begin() as conn:
        model_id = store.ensure_model(conn, "file:straight", "file")
        store.insert_predictions(conn, model_id, "none", files.params,
                                 [(store.sha256_text(r.text), {"imported": Score(r.score, OK, repr(r.score))})
                                  for r in lab + unl])
    key = store.ScoreKey(model_id, "none", store.params_hash(files.params), "imported")
    spec = RunSpec.of(files.target, files.u_ids, files.label_set_id, key, methods)
    run = run_or_reuse(use_db, spec)
    assert run.computed is not None
    with use_db.connect() as conn:
        langs = claim_languages(conn, files.u_ids)
        fresh = run_results(conn, run, langs)
        stored = run_results(conn, RunOutcome(run.run_id), langs)
    assert set(fresh.rows) == set(files.u_ids) and fresh.queued
    assert fresh.rows == stored.rows and fresh.queued == stored.queued
    assert run_or_reuse(use_db, spec) == RunOutcome(run.run_id)  # reused: nothing computed


@pytest.mark.parametrize("extra", [[], REVIEW])
def test_the_same_calibrate_again_reads_the_run_and_writes_the_same_bytes(use_db, tmp_path, extra, capsys):
    lab, unl = write_files(tmp_path, seed=43 + len(extra))
    outs = [tmp_path / "first.csv", tmp_path / "again.csv"]
    printed, counts = [], [table_counts(use_db)]
    for out in outs:
        assert main(["calibrate", "--labeled", str(lab), "--unlabeled", str(unl), "--k", str(K),
                     "--out", str(out), *extra]) == 0
        printed.append(capsys.readouterr().out.replace(str(out), "OUT"))
        counts.append(table_counts(use_db))
    assert counts[1] != counts[0] and counts[2] == counts[1]  # the first computed, the second reused
    assert outs[0].read_bytes() == outs[1].read_bytes() and printed[0] == printed[1]
