"""Incremental recalibration equals a full recomputation and recomputes exactly the affected claims.

Real data: CLEF 2024 dev-test claims are the target, a class-balanced sample of CLEF train is the
calibration set, real MiniLM embeddings, imported scores (a weak model's, loosely tied to the label).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import pytest
from sqlalchemy import text

from checkworthy.data.datasets import Claim, load_clef, normalise_text
from checkworthy.runs import recalibration as recalibrate_module
from checkworthy.runs.calibration_run import RunSpec, compute, run_calibration, run_key
from checkworthy.runs.recalibration import fast_run_key, find_parent, recalibrate, spec_from_run
from checkworthy.scorers.base import OK, Score
from checkworthy.store import lineages
from checkworthy.store import rows as store
from checkworthy.store.calibration_runs import load_results
from checkworthy.store.embeddings import ensure_embeddings
from checkworthy.testing.datasets import raw_path

K = 5


@dataclass
class World:
    """A small real calibration setting stored under its own dataset name."""

    tag: str
    lineage: str
    target: str
    key: store.ScoreKey
    ls0: int
    target_ids: list[int]
    lab_ids: list[int]
    extra: list[Claim]
    extra_ids: list[int] = field(default_factory=list)
    train: list[Claim] = field(default_factory=list)
    dev: list[Claim] = field(default_factory=list)


def fake_score(text_: str, label: int) -> float:
    """A deterministic weak model: label-leaning, with text-hash noise."""
    u = int(hashlib.sha256(text_.encode()).hexdigest()[:8], 16) / 2**32
    return round(float(np.clip(0.35 + 0.25 * label + 0.5 * (u - 0.5), 0, 1)), 4)


@cache
def clef() -> tuple[list[Claim], list[Claim]]:
    train, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_train.tsv"), "train")
    dev, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    return train, dev


def build_world(engine, tag: str, n_per_class: int = 60, n_extra: int = 60, seed: int = 11) -> World:
    """Store targets, a labelled set and spare labelled claims under dataset ``tag``; embed and score them."""
    train, dev = clef()
    dev_texts = {normalise_text(c.text) for c in dev}
    by_text: dict[str, set[int]] = {}
    for c in train:
        by_text.setdefault(normalise_text(c.text), set()).add(c.label)
    clean = [c for c in train
             if normalise_text(c.text) not in dev_texts and len(by_text[normalise_text(c.text)]) == 1]
    rng = np.random.default_rng(seed)
    n = n_per_class + n_extra
    pos = [clean[i] for i in rng.permutation([i for i, c in enumerate(clean) if c.label == 1])[:n]]
    neg = [clean[i] for i in rng.permutation([i for i, c in enumerate(clean) if c.label == 0])[:n]]
    lab = pos[:n_per_class] + neg[:n_per_class]
    extra = [c for pair in zip(pos[n_per_class:], neg[n_per_class:]) for c in pair][:n_extra]
    lineage, target = f"{tag}:calibration", f"{tag}:test"
    with engine.begin() as conn:
        lab_ids = store.store_claims_with_labels(
            conn, [store.NewClaim(tag, "train", c.source_id, c.text, c.label) for c in lab], f"{tag}:file")
        t_ids = store.store_claims_with_labels(
            conn, [store.NewClaim(tag, "dev-test", c.source_id, c.text, c.label) for c in dev], f"{tag}:file")
        extra_ids = store.store_claims_with_labels(  # stored unlabelled: the data team labels them later
            conn, [store.NewClaim(tag, "train", c.source_id, c.text) for c in extra], f"{tag}:file")
        model = store.ensure_model(conn, f"file:{tag}", "file")
        params = {"source": f"{tag}-scores"}
        store.insert_predictions(conn, model, "none", params, [
            (store.sha256_text(c.text), {"imported": Score(fake_score(c.text, c.label), OK, "imported")})
            for c in lab + dev + extra])
        ensure_embeddings(conn, [store.sha256_text(c.text) for c in lab + dev + extra])
        ls0 = store.create_label_set(conn, lineage, lab_ids)
        lineages.register_target(conn, target, lineage, t_ids)
        lineages.set_head(conn, lineage, ls0, "initial")
    key = store.ScoreKey(model, "none", store.params_hash(params), "imported")
    return World(tag, lineage, target, key, ls0, t_ids, lab_ids, extra, extra_ids, train, dev)


def spec(w: World, label_set_id: int, k: int = K, target_ids=None) -> RunSpec:
    return RunSpec(w.target, tuple(sorted(target_ids or w.target_ids)), label_set_id, w.key, k)


def results(conn, run_id):
    return {r["claim_id"]: r for r in load_results(conn, run_id)}


def assert_equals_full(engine, s: RunSpec, run_id: int) -> dict:
    """The stored run equals a from-scratch computation of the same spec (same SQL kNN, same NN-PPI)."""
    with engine.connect() as conn:
        ids, res, nb, _ = compute(conn, s)
        got = results(conn, run_id)
    assert sorted(got) == sorted(int(i) for i in ids)
    for i, cid in enumerate(ids):
        r = got[int(cid)]
        assert list(r["neighbor_ids"]) == [int(x) for x in nb.neighbor_ids[i]]
        assert list(r["neighbor_distances"]) == [float(x) for x in nb.distances[i]]
        assert (r["theta"], r["ci_low"], r["ci_high"], r["knn_mean"], r["decision"]) == (
            float(res.theta[i]), float(res.ci_low[i]), float(res.ci_high[i]), float(res.knn_mean[i]),
            bool(res.decision[i]))
    return got


def truly_affected(old: dict, new: dict, changed: set[int]) -> set[int]:
    """Claims whose neighbour list differs, or whose (same) neighbours include a relabelled claim."""
    return {c for c in new if c not in old or list(old[c]["neighbor_ids"]) != list(new[c]["neighbor_ids"])
            or set(new[c]["neighbor_ids"]) & changed}


def assert_incremental_equals_full(engine, run_id: int, parent_id: int, label_set_id: int,
                                   targets, flipped: set[int]) -> tuple[int, int]:
    """A stored incremental run: complete, on ``label_set_id``, child of ``parent_id``; row for row a
    full recomputation; and it recomputed exactly the claims the change affects (the rest copied).
    Returns (claims recomputed, claims in the run)."""
    with engine.connect() as conn:
        run = conn.execute(text("SELECT * FROM calibration_runs WHERE id = :i"), {"i": run_id}).mappings().one()
        old_res = {x["claim_id"]: x for x in load_results(conn, parent_id)}
    assert (run["mode"], run["status"], run["parent_run_id"], run["label_set_id"]) == (
        "incremental", "complete", parent_id, label_set_id)
    new_res = assert_equals_full(engine, spec_from_run(run, label_set_id, targets), run_id)
    with engine.connect() as conn:
        recomputed = set(conn.execute(text("SELECT claim_id FROM calibrated_results WHERE run_id = :r "
                                           "AND computed_in_run IS NULL"), {"r": run_id}).scalars())
    assert recomputed == truly_affected(old_res, new_res, flipped)
    assert 0 < len(recomputed) < len(new_res)
    return len(recomputed), len(new_res)


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
    with engine.connect() as conn:
        fp = conn.execute(text("SELECT fingerprint FROM label_sets WHERE id = :i"), {"i": ls1}).scalar_one()
    assert fast_run_key(s1, fp) == run_key(s1, fp)
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
        used = {n for r in load_results(conn, parent) for n in r["neighbor_ids"]}
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
    lost = {c for c, r in old.items() if set(r["neighbor_ids"]) & set(drop + extra_targets)}
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
