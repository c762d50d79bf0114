"""Incremental recalibration equals a full recomputation and recomputes exactly the affected claims.

Real data: CLEF 2024 dev-test claims are the target, a class-balanced sample of CLEF train is the
calibration set, real MiniLM embeddings, imported scores (a weak model's, loosely tied to the label).
"""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import text

from checkworthy.data.records import Claim
from checkworthy.runs import recalibration as recalibrate_module
from checkworthy.runs.calibration_run import run_calibration
from checkworthy.runs.recalibration import find_parent, recalibrate
from checkworthy.store import rows as store
from checkworthy.store.calibration_runs import load_results
from checkworthy.testing.worlds import World, assert_equals_full, build_world, results, spec, truly_affected

K = 5




















def newest_set(conn, w: World) -> int:
    return conn.execute(text("SELECT max(id) FROM label_sets WHERE name = :n"), {"n": w.lineage}).scalar()


@pytest.fixture(scope="module")
def world(engine) -> World:
    return build_world(engine, "t3-recal")


def relabel(engine, w: World, add: list[Claim], flip: list[int], base_ids: list[int]) -> tuple[int, list]:
    """Append labels (new claims + corrections) and freeze the next label set of the lineage."""
    with engine.begin() as conn:
        add_ids = store.store_claims_with_labels(
            conn, [store.NewClaim(w.tag, "train", c.source_id, c.text, c.label) for c in add], "t3:new")
        cur = store.current_labels(conn, flip)
        store.append_labels(conn, flip, [1 - cur[i] for i in flip], "t3:correction")
        ls = store.create_label_set(conn, w.lineage, base_ids + add_ids)
    return ls, add_ids


def test_added_and_corrected_labels_recompute_exactly_the_affected_claims(engine, world):
    w = world
    parent = run_calibration(engine, spec(w, w.ls0))
    flip = w.lab_ids[:6]
    ls1, add_ids = relabel(engine, w, w.extra[:40], flip, w.lab_ids)
    s1 = spec(w, ls1)
    out = recalibrate(engine, s1)
    assert out.mode == "incremental" and out.parent_run_id == parent
    assert out.changes == {"added": 40, "removed": 0, "changed": 6}
    new = assert_equals_full(engine, s1, out.run_id)
    with engine.connect() as conn:
        old = results(conn, parent)
        recomputed = {r.claim_id for r in conn.execute(text(
            "SELECT claim_id FROM calibrated_results WHERE run_id = :r AND computed_in_run IS NULL"),
            {"r": out.run_id})}
        copied_from = set(conn.execute(text(
            "SELECT DISTINCT computed_in_run FROM calibrated_results WHERE run_id = :r AND computed_in_run "
            "IS NOT NULL"), {"r": out.run_id}).scalars())
        run = conn.execute(text("SELECT mode, parent_run_id, params FROM calibration_runs WHERE id = :r"),
                           {"r": out.run_id}).mappings().one()
    expected = truly_affected(old, new, set(flip))
    assert recomputed == set(out.recomputed) == expected
    assert 0 < len(recomputed) < len(new)  # some, not all
    assert copied_from == {parent}
    assert run["mode"] == "incremental" and run["parent_run_id"] == parent
    assert run["params"]["n_recomputed"] + run["params"]["n_copied"] == len(new)
    # same inputs again: the stored run is reused, and so is it by a full run of the same spec
    assert recalibrate(engine, s1).mode == "reused"
    assert run_calibration(engine, s1) == out.run_id
    with engine.connect() as conn:  # metrics were stored like a full run's
        n_metrics = conn.execute(text("SELECT count(*) FROM evaluation_metrics WHERE run_id = :r"),
                                 {"r": out.run_id}).scalar_one()
    assert n_metrics > 20


def test_removed_labels_and_new_targets_go_through_sql_knn(engine, world):
    w = world
    with engine.connect() as conn:
        head_id = newest_set(conn, w)
        members = store.label_set_claims(conn, head_id)
    parent = recalibrate(engine, spec(w, head_id)).run_id
    with engine.connect() as conn:
        used = {n for r in load_results(conn, parent) for n in r["neighbour_ids"]}
    drop = sorted(used)[:8]  # labelled claims some targets rely on
    extra_targets = [i for i in w.lab_ids[-20:] if i not in drop][:5]  # leave the set, become targets
    with engine.begin() as conn:
        ls2 = store.create_label_set(conn, w.lineage, [i for i in members if i not in drop + extra_targets])
    s2 = spec(w, ls2, target_ids=w.target_ids + extra_targets)
    with engine.connect() as conn:
        assert find_parent(conn, s2) is not None
    out = recalibrate(engine, s2, parent_run_id=parent)
    assert out.mode == "incremental" and out.changes["removed"] == len(drop) + len(extra_targets)
    new = assert_equals_full(engine, s2, out.run_id)
    with engine.connect() as conn:
        old = results(conn, parent)
    lost = {c for c, r in old.items() if set(r["neighbour_ids"]) & set(drop + extra_targets)}
    assert set(extra_targets) | lost <= set(out.recomputed)
    assert set(out.recomputed) == truly_affected(old, new, set()) | lost


@pytest.mark.parametrize("k", [3, 10])
def test_equal_to_full_for_other_k(engine, world, k):
    w = world
    parent = run_calibration(engine, spec(w, w.ls0, k=k))
    with engine.connect() as conn:
        head_id = newest_set(conn, w)
    s = spec(w, head_id, k=k)
    out = recalibrate(engine, s, parent_run_id=parent)
    assert out.mode in ("incremental", "reused")
    assert_equals_full(engine, s, out.run_id)


def test_plan_hands_over_the_unaffected_claims_block_by_block(engine, world, monkeypatch):
    """Read in small blocks, the plan hands over (for copying while it reads on) exactly the claims
    it would otherwise keep, checks the same candidates on a second connection while it reads,
    recomputes the same claims, and the run still equals a full one."""
    w = world
    monkeypatch.setattr(recalibrate_module, "PARENT_BLOCK", 37)
    parent = run_calibration(engine, spec(w, w.ls0, k=4))
    with engine.connect() as conn, engine.connect() as other:
        s = spec(w, newest_set(conn, w), k=4)
        whole = recalibrate_module.plan(conn, s, parent)
        handed: list[np.ndarray] = []
        blockwise = recalibrate_module.plan(conn, s, parent, on_kept=handed.append, check_conn=other)
    assert len(handed) > 1 and whole.n_copied_early == 0 and len(whole.entering) > 0

    def entering(p):
        return sorted(p.entering.itertuples(index=False, name=None))

    assert entering(blockwise) == entering(whole)
    assert blockwise.recomputed == whole.recomputed and blockwise.merge == whole.merge
    assert sorted(np.concatenate(handed).tolist() + blockwise.keep) == whole.keep
    assert blockwise.n_copied == whole.n_copied == len(whole.keep)
    out = recalibrate(engine, s, parent_run_id=parent)
    assert out.mode == "incremental" and out.n_copied == whole.n_copied
    assert_equals_full(engine, s, out.run_id)
