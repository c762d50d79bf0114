"""The HNSW kNN path on real pgvector against the exact one, and runs that take it.

Real data: the world of :mod:`tests.test_recalibrate` (CLEF 2024 claims, MiniLM vectors); its
labelled set is small, so the index must find (almost) every true neighbour.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sqlalchemy import text

from checkworthy.cli.main import build_parser, main
from checkworthy.config import load_params
from checkworthy.runs.calibration_run import compute, run_calibration
from checkworthy.runs.recalibration import find_parent, recalibrate, spec_from_run
from checkworthy.store import lineages
from checkworthy.store import rows as store
from checkworthy.store.calibration_runs import load_run, runs_in_force
from checkworthy.store.knn import EF_SEARCH, EXACT, KnnPath, leave_one_out_neighbours, nearest_labelled
from checkworthy.store.run_spec import RunMethods, RunSpec, key_of, run_key
from checkworthy.testing.worlds import assert_equals_full, build_world

HNSW = KnnPath("hnsw", 100)
#: the recall floor on this small set (the bench measures the large ones)
FLOOR = 0.97


@pytest.fixture(scope="module")
def world(engine):
    return build_world(engine, "t13-hnsw")


def test_hnsw_finds_the_exact_neighbours_at_their_exact_distances(engine, world):
    w = world
    with engine.begin() as conn:
        exact = nearest_labelled(conn, w.ls0, w.target_ids, 10, w.key)
        approx = nearest_labelled(conn, w.ls0, w.target_ids, 10, w.key, knn=HNSW)
        settings = [conn.execute(text("SELECT current_setting(:n)"), {"n": n}).scalar_one()
                    for n in ("hnsw.iterative_scan", "enable_seqscan", "enable_sort")]
        n_indexed = conn.execute(text("SELECT count(*) FROM knn_vectors")).scalar_one()
    assert settings == ["off", "on", "on"]  # the path's settings end with its statement
    assert n_indexed >= len(w.lab_ids) - 5  # the label set's texts (a few repeat)
    assert np.array_equal(approx.claim_ids, exact.claim_ids)
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx.neighbour_ids, exact.neighbour_ids)])
    assert recall >= FLOOR
    assert np.all(np.diff(approx.distances, axis=1) >= 0)  # nearest first
    d_exact = {(q, n): d for q, row, ds in zip(exact.claim_ids, exact.neighbour_ids, exact.distances)
               for n, d in zip(row, ds)}
    same = [(q, n, d) for q, row, ds in zip(approx.claim_ids, approx.neighbour_ids, approx.distances)
            for n, d in zip(row, ds) if (q, n) in d_exact]
    assert same and all(d == pytest.approx(d_exact[(q, n)], abs=1e-6) for q, n, d in same)
    labels = dict(zip(exact.neighbour_ids.ravel(), exact.labels.ravel()))
    assert all(labels.get(n, lab) == lab for n, lab in zip(approx.neighbour_ids.ravel(), approx.labels.ravel()))


def test_a_run_records_the_index_the_store_holds(engine):
    with engine.connect() as conn:
        definition, options = conn.execute(text(
            """SELECT pg_get_indexdef(c.oid), c.reloptions FROM pg_class c
               WHERE c.relname = 'knn_vectors_hnsw'""")).one()
    recorded = HNSW.as_dict()
    assert "halfvec_cosine_ops" in definition and recorded["index_vectors"] == "halfvec"
    assert sorted(options) == sorted([f"m={recorded['m']}", f"ef_construction={recorded['ef_construction']}"])
    # a run found on another build (or by another path) is not one whose lists a new run keeps
    assert HNSW.found(recorded | {"recall_at_k": 0.99}) and EXACT.found(None) and EXACT.found({"path": "exact"})
    assert not HNSW.found(recorded | {"ef_construction": 64}) and not HNSW.found(None)
    assert not EXACT.found(recorded)
    # what a run recorded reads back as its path; a run that recorded none was exact
    assert KnnPath.recorded_by(recorded) == HNSW and KnnPath.recorded_by(None) == EXACT


def test_leave_one_out_on_the_hnsw_path(engine, world):
    w = world
    with engine.begin() as conn:
        loo = leave_one_out_neighbours(conn, w.ls0, w.lab_ids, 5, w.key, knn=HNSW)
        texts = dict(conn.execute(text("SELECT id, text_hash FROM claims WHERE id = ANY(:c)"),
                                  {"c": list(w.lab_ids)}).all())
    for q, row in zip(loo.claim_ids, loo.neighbour_ids):
        assert int(q) not in set(row) and all(texts[int(n)] != texts[int(q)] for n in row)


def test_a_run_records_its_path_and_recall_and_keeps_the_exact_key(engine, world):
    w = world
    exact_spec = RunSpec(w.target, tuple(sorted(w.target_ids)), w.ls0, w.key, RunMethods(5))
    hnsw_spec = RunSpec(w.target, exact_spec.claim_ids, w.ls0, w.key, RunMethods(5, knn="hnsw", ef_search=80))
    with engine.connect() as conn:
        fp = store.label_set_fingerprint(conn, w.ls0)
    body = {k: v for k, v in exact_spec.methods.__dict__.items() if k not in ("knn", "ef_search")}
    body |= {"target": w.target, "key": w.key.__dict__, "claim_ids": sorted(exact_spec.claim_ids),
             "fingerprint": fp, "label_set_id": None}
    assert run_key(exact_spec, fp) == key_of(body)  # runs stored before the field keep their keys
    assert run_key(hnsw_spec, fp) != run_key(exact_spec, fp)
    exact_run, hnsw_run = run_calibration(engine, exact_spec), run_calibration(engine, hnsw_spec)
    with engine.connect() as conn:
        e, h = load_run(conn, exact_run)["params"], load_run(conn, hnsw_run)
    assert e["knn"] == {"path": "exact"}
    knn = h["params"]["knn"]
    assert knn["path"] == "hnsw" and knn["ef_search"] == 80 and knn["recall_sample"] == min(200, len(w.target_ids))
    assert knn["recall_at_k"] >= FLOOR and knn["k"] == 5
    assert spec_from_run(h, w.ls0, exact_spec.claim_ids) == hnsw_spec  # an auditor (and a rerun) reads it back
    assert_equals_full(engine, exact_spec, exact_run)  # the exact path is unchanged


def test_recalibration_of_an_hnsw_run_after_new_labels_is_incremental_by_hnsw(engine, world):
    w = world
    spec = RunSpec(w.target, tuple(sorted(w.target_ids)), w.ls0, w.key, RunMethods(5, knn="hnsw"))
    parent = run_calibration(engine, spec)
    exact_parent = run_calibration(engine, replace(spec, methods=replace(spec.methods, knn="exact")))
    with engine.begin() as conn:
        new_ids = store.store_claims_with_labels(conn, [store.NewClaim(w.tag, "train", c.source_id, c.text, 1)
                                                        for c in w.extra[:10]], "test")
        ls1 = store.create_label_set(conn, w.lineage, list(w.lab_ids) + list(new_ids))
        lineages.set_head(conn, w.lineage, ls1, "labels")
    new_spec = RunSpec(w.target, spec.claim_ids, ls1, w.key, RunMethods(5, knn="hnsw"))
    with engine.connect() as conn:  # each path only ever continues a run of its own path
        assert find_parent(conn, new_spec) == parent
        assert find_parent(conn, replace(new_spec, methods=replace(new_spec.methods, ef_search=40))) is None
        assert find_parent(conn, replace(new_spec, methods=replace(new_spec.methods, knn="exact"))) == exact_parent
    out = recalibrate(engine, new_spec, parent_run_id=exact_parent)  # the wrong path's run is not taken
    with engine.connect() as conn:
        run = load_run(conn, out.run_id)
        inc = {r.claim_id: (list(r.neighbour_ids), r.theta) for r in conn.execute(text(
            "SELECT claim_id, theta, neighbour_ids FROM calibrated_results WHERE run_id = :r"), {"r": out.run_id})}
        fresh = compute(conn, new_spec)  # a fresh search of the new index, not stored
    full = {int(c): (list(n), t) for c, n, t in zip(fresh.claim_ids, fresh.neighbours.neighbour_ids,
                                                      fresh.result.theta)}
    assert out.mode == "incremental" and out.parent_run_id == parent and 0 < out.n_recomputed < len(spec.claim_ids)
    knn = run["params"]["knn"]
    assert knn["path"] == "hnsw" and knn["ef_search"] == EF_SEARCH and knn["recall_at_k"] >= FLOOR
    assert knn["recall_sample"] == min(200, len(spec.claim_ids))
    assert set(inc) == set(full)  # every claim, like a fresh HNSW search of the new index
    same = [c for c in inc if inc[c][0] == full[c][0]]
    assert len(same) >= 0.95 * len(inc)
    assert all(inc[c][1] == pytest.approx(full[c][1]) for c in same)
    assert fresh.record.knn["recall_at_k"] >= FLOOR
    with engine.connect() as conn:  # both paths' runs stay in force, side by side
        in_force = {r["id"] for r in runs_in_force(conn, w.lineage) if r["target"] == w.target}
        view = set(conn.execute(text("SELECT run_id FROM calibrations_in_force WHERE target = :t"),
                                {"t": w.target}).scalars())
    assert {out.run_id, exact_parent} <= in_force and {out.run_id, exact_parent} <= view


def test_bad_knn_options_are_refused_before_anything_is_stored(tmp_path, capsys):
    for args, message in ((["--knn", "ivf"], "--knn"), (["--knn", "hnsw", "--ef-search", "5000"], "ef_search"),
                          (["--ef-search", "0"], "--ef-search")):
        code = main(["calibrate", "--labeled", "L.csv", "--unlabeled", "U.csv", "--k", "3",
                     "--out", str(tmp_path / "o.csv"), *args])
        assert code == 2 and message in capsys.readouterr().err
    assert EXACT.as_dict() == {"path": "exact"}


def test_calibrate_searches_with_the_ef_search_params_and_predict_use():
    """One default for HNSW candidates: calibrate's option, params.yaml and the store's."""
    args = build_parser().parse_args(["calibrate", "--labeled", "L.csv", "--unlabeled", "U.csv", "--k", "3",
                                      "--out", "OUT.csv"])
    assert args.ef_search == EF_SEARCH == load_params()["ef_search"] == KnnPath().ef_search
