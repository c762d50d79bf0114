"""Every kind of label-validation failure blocks calibration, is stored with its rows, loses nothing.

The leakage and the contradictory labels are real: CLEF 2024 train holds sentences that are also
in dev-test ("I'll give you an example.") and sentences labelled both ways.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from checkworthy.data import validation
from checkworthy.data.hashing import sha256_file
from checkworthy.data.text import normalise_text
from checkworthy.runs import label_gate
from checkworthy.runs import label_updates as labels
from checkworthy.runs.calibration_run import run_calibration
from checkworthy.store import lineages, validations
from checkworthy.store import rows as store
from checkworthy.store.audit import ATTEMPT_RECORDS, table_counts
from checkworthy.store.calibration_runs import runs_in_force
from checkworthy.store.run_spec import RunMethods, RunSpec
from checkworthy.testing.claims import clef, write_labels
from checkworthy.testing.worlds import build_world

HEADER = ("id", "dataset", "label", "source", "text")


@pytest.fixture(scope="module")
def world(engine):
    w = build_world(engine, "t3-valid")
    run_calibration(engine, RunSpec(w.target, tuple(sorted(w.target_ids)), w.ls0, w.key, RunMethods(5)))
    return w


def real_conflict():
    """Two CLEF train sentences with the same text and different labels."""
    train, _ = clef()
    by_text: dict[str, list] = {}
    for c in train:
        by_text.setdefault(normalise_text(c.text), []).append(c)
    for group in by_text.values():
        if {c.label for c in group} == {0, 1}:
            return next(c for c in group if c.label == 0), next(c for c in group if c.label == 1)
    raise AssertionError("CLEF train has no contradictory labels any more")


def real_leak():
    train, _ = clef()
    return next(c for c in train if c.source_id == "7316")  # its text is also a dev-test sentence


def cases(w):
    """check name -> (rows of the label file, bounds, (dataset, id) of the rows that must be reported)."""
    sid = {c.source_id: c for c in w.extra}
    e = [c.source_id for c in w.extra]
    zero, one = real_conflict()
    leak = real_leak()
    pos = [c.source_id for c in w.extra if c.label == 1]
    return {
        "label_in_0_1": ([[e[0], w.tag, "2", "", ""]], {}, [e[0]]),
        "text_not_blank": ([["blank-1", w.tag, "1", "", "   "]], {}, ["blank-1"]),
        "ids_unique": ([[e[1], w.tag, sid[e[1]].label, "", ""], [e[1], w.tag, sid[e[1]].label, "", ""]], {},
                       [e[1], e[1]]),
        "one_label_per_text": ([[f"cf-{zero.source_id}", w.tag, 0, "", zero.text],
                                [f"cf-{one.source_id}", w.tag, 1, "", one.text]], {},
                               [f"cf-{zero.source_id}", f"cf-{one.source_id}"]),
        "no_leakage": ([[f"lk-{leak.source_id}", w.tag, leak.label, "", leak.text]], {},
                       [f"lk-{leak.source_id}"]),
        "class_balance": ([[p, w.tag, 1, "", ""] for p in pos[:20]], {"max_positive_rate": 0.55}, []),
        "row_count": ([[x, w.tag, sid[x].label, "", ""] for x in e[:10]], {"max_rows": 125}, []),
    }


@pytest.mark.parametrize("check", ["label_in_0_1", "text_not_blank", "ids_unique", "one_label_per_text",
                                   "no_leakage", "class_balance", "row_count"])
def test_each_failure_blocks_the_update_and_is_stored(engine, world, tmp_path, check):
    w = world
    rows, bounds, reported = cases(w)[check]
    before = table_counts(engine, ignore=ATTEMPT_RECORDS)
    with engine.connect() as conn:
        head = lineages.lineage_head(conn, w.lineage)
        in_force = [r["id"] for r in runs_in_force(conn, w.lineage)]
    path = write_labels(tmp_path / f"{check}.csv", rows, HEADER)
    out = labels.apply_label_file(engine, path, validation.Bounds(min_rows=20, **bounds))
    assert out.status == "rejected" and out.new_heads == {} and out.n_appended == 0
    # nothing already stored changed, the calibration in force stays
    assert table_counts(engine, ignore=ATTEMPT_RECORDS) == before
    with engine.connect() as conn:
        assert lineages.lineage_head(conn, w.lineage) == head
        assert [r["id"] for r in runs_in_force(conn, w.lineage)] == in_force
        (vid,) = out.validation_run_ids
        results = validations.load_results(conn, vid)
        update = conn.execute(text("SELECT status, file_sha256 FROM label_updates WHERE id = :u"),
                              {"u": out.update_id}).one()
    assert update.status == "rejected" and update.file_sha256 == sha256_file(path)
    assert sorted(c for c, r in results.items() if not r["success"]) == [check]
    bad = results[check]
    assert sorted(r["source_id"] for r in bad["unexpected_rows"]) == sorted(reported)
    assert all(r["line"] for r in bad["unexpected_rows"])  # rows of the file are named by their line
    if check == "class_balance":
        assert bad["observed"] == pytest.approx(80 / 140)
    if check == "row_count":
        assert bad["observed"] == 130
    # a rejected file is not retried: fixing it means a new file
    assert labels.apply_label_file(engine, path, validation.Bounds(**bounds)).reused


def test_text_present_and_stored_label_sets(engine, world):
    """A missing text (only possible outside the store) and a stored set that leaks are both caught."""
    w = world
    with engine.connect() as conn:
        rows = validations.label_set_rows(conn, w.ls0)
    rows[0] = rows[0] | {"text": None}
    outcome = validation.run_suite(validation.build_frame(rows, {}), validation.Bounds(min_rows=20))
    assert [c.check_name for c in outcome.failures] == ["text_present"]
    assert outcome.failures[0].unexpected_claim_ids == [rows[0]["claim_id"]]
    leak = real_leak()
    with engine.begin() as conn:
        (leak_id,) = store.store_claims_with_labels(
            conn, [store.NewClaim(w.tag, "train", f"lk2-{leak.source_id}", leak.text, leak.label)], "t")
        bad_set = store.create_label_set(conn, w.lineage, store.label_set_claims(conn, w.ls0) + [leak_id])
    verdict = label_gate.validate_label_set(engine, bad_set, validation.Bounds(min_rows=20))
    assert not verdict.success and verdict.failures == ["no_leakage"]
    again = label_gate.validate_label_set(engine, bad_set, validation.Bounds(min_rows=20))
    assert again.validation_run_id == verdict.validation_run_id  # same set, suite and targets: stored once
    with engine.connect() as conn:
        row = conn.execute(text("SELECT unexpected_claim_ids, observed FROM validation_results "
                                "WHERE validation_run_id = :v AND check_name = 'no_leakage'"),
                           {"v": verdict.validation_run_id}).one()
    assert row.unexpected_claim_ids == [leak_id]
