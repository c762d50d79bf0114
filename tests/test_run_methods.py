"""Calibration runs honour ``interval_method`` and ``correction``.

Real claims (CLEF dev-test), imported scores, real MiniLM embeddings, the real store and SQL kNN.
The default (z + paper) must be the paper's NN-PPI exactly as before; every other pair is
checked against numbers worked out independently from the stored neighbours.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
from sqlalchemy import text

from checkworthy.cli.main import main
from checkworthy.data.datasets import load_clef
from checkworthy.flows.tasks import TaskContext, calibrate_task
from checkworthy.method import nnppi
from checkworthy.method.calibrators import CALIBRATORS, fitted_params
from checkworthy.method.corrections import estimate_lambda, select_by_cv
from checkworthy.method.embedding_head import fit_head
from checkworthy.method.intervals import INTERVAL_METHODS, conformal_quantile
from checkworthy.method.predictor_choice import (
    AUTO_CANDIDATES,
    CV_KS,
    auto_columns,
    choose_correction,
    cv_ks,
)
from checkworthy.runs.calibration import labelled_pool
from checkworthy.runs.calibration_run import compute, run_calibration
from checkworthy.runs.embedding import ensure_embeddings
from checkworthy.runs.flow_types import FlowContext
from checkworthy.runs.pipeline_steps import run_spec
from checkworthy.scorers.base import OK, Score
from checkworthy.store import rows as store
from checkworthy.store.audit import table_counts
from checkworthy.store.calibration_runs import load_results, load_run
from checkworthy.store.embeddings import load_embeddings
from checkworthy.store.run_spec import RunMethods, RunSpec
from checkworthy.testing.datasets import raw_path

N_LAB, N_ALL, K = 90, 130, 5
TARGET = "methods-test:test"


@pytest.fixture(scope="module")
def world(engine):
    claims, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    claims = claims[-N_ALL:]
    rng = np.random.default_rng(17)
    labels = np.array([c.label for c in claims])
    scores = np.clip(0.5 + 0.2 * labels + rng.normal(0, 0.2, len(claims)), 0, 1).round(3)
    with engine.begin() as conn:
        ids = store.store_claims_with_labels(
            conn, [store.NewClaim("methods-test", "x", c.source_id, c.text, c.label) for c in claims], "test")
        hashes = [store.sha256_text(c.text) for c in claims]
        ensure_embeddings(conn, hashes)
        ls = store.create_label_set(conn, "methods-test:L", ids[:N_LAB])
        model = store.ensure_model(conn, "file:methods-test", "file")
        params = {"source": "methods-test"}
        store.insert_predictions(conn, model, "none", params, [
            (h, {"imported": Score(float(s), OK, f"{s}")}) for h, s in zip(hashes, scores)])
        key = store.ScoreKey(model, "none", store.params_hash(params), "imported")
        emb = load_embeddings(conn, hashes)
    vecs = np.stack([emb[h] for h in hashes]).astype(np.float64)
    return dict(ids=ids, ls=ls, key=key, labels=labels, scores=scores, vecs=vecs,
                by_id={cid: i for i, cid in enumerate(ids)})


def spec(w, **kw) -> RunSpec:
    return RunSpec(TARGET, tuple(w["ids"][N_LAB:]), w["ls"], w["key"], RunMethods(kw.pop("k", K), **kw))


def rows_of(engine, run_id):
    with engine.connect() as conn:
        return load_results(conn, run_id), load_run(conn, run_id)


def nbr_arrays(w, rows):
    """Labels and scores of each stored neighbour (from the test's own arrays, not the store)."""
    pos = [[w["by_id"][n] for n in r["neighbour_ids"]] for r in rows]
    return np.array([[w["labels"][p] for p in ps] for ps in pos]), np.array([[w["scores"][p] for p in ps]
                                                                             for ps in pos])


def test_default_is_the_papers_nnppi_and_records_its_methods(engine, world):
    w = world
    rid = run_calibration(engine, spec(w))
    assert run_calibration(engine, spec(w, interval_method="z", correction="paper")) == rid
    rows, run = rows_of(engine, rid)
    y_nbr, c_nbr = nbr_arrays(w, rows)
    c = np.array([r["score"] for r in rows])
    res = nnppi.nnppi(c, y_nbr, c_nbr)
    np.testing.assert_allclose([r["theta"] for r in rows], res.theta, atol=1e-12)
    np.testing.assert_allclose([r["ci_low"] for r in rows], res.ci_low, atol=1e-12)
    assert run["interval_method"] == "z" and run["params"]["correction"] == "paper"
    assert "k_used" not in run["params"]
    with engine.connect() as conn:
        out = compute(conn, spec(w))
    assert len(out.claim_ids) == len(rows) and out.record.n_calibrated == len(rows)


@pytest.mark.parametrize("method", sorted(INTERVAL_METHODS))
def test_every_interval_method_runs_around_the_same_theta(engine, world, method):
    w = world
    base, _ = rows_of(engine, run_calibration(engine, spec(w)))
    rid = run_calibration(engine, spec(w, interval_method=method))
    rows, run = rows_of(engine, rid)
    assert run["status"] == "complete" and run["interval_method"] == method
    assert [r["claim_id"] for r in rows] == [r["claim_id"] for r in base]
    np.testing.assert_allclose([r["theta"] for r in rows], [r["theta"] for r in base], atol=1e-12)
    assert [r["neighbour_ids"] for r in rows] == [r["neighbour_ids"] for r in base]
    lo, hi = np.array([r["ci_low"] for r in rows]), np.array([r["ci_high"] for r in rows])
    assert (lo <= hi).all()
    if method in ("conformal-split", "mondrian-split"):
        assert run["params"]["neighbour_columns"] > K  # extra columns fetched for the reference half


def test_conformal_half_width_is_the_quantile_of_loo_scores_computed_by_hand(engine, world):
    """Independent check: brute-force leave-one-out kNN in numpy, quantile of |Y - theta| on L."""
    w = world
    lab = w["vecs"][:N_LAB]
    dist = 1.0 - lab @ lab.T
    np.fill_diagonal(dist, np.inf)
    ids_l = np.array(w["ids"][:N_LAB])
    order = np.lexsort((np.broadcast_to(ids_l, dist.shape), dist), axis=1)[:, :K]
    y, c = w["labels"][:N_LAB], w["scores"][:N_LAB]
    theta_l = c + (y[order] - c[order]).mean(axis=1)
    q = conformal_quantile(np.abs(y - theta_l), 0.05)
    rows, _ = rows_of(engine, run_calibration(engine, spec(w, interval_method="conformal")))
    lo, hi = np.array([r["ci_low"] for r in rows]), np.array([r["ci_high"] for r in rows])
    theta = np.array([r["theta"] for r in rows])
    assert 0 < q < 1
    for label in (0, 1):  # the interval holds label y exactly when |y - theta| <= q
        inside = (lo <= label) & (label <= hi)
        assert (inside == (np.abs(label - theta) <= q + 1e-12)).all()
    free = (lo > 0) | (hi < 1)  # bounds not widened to reach a label: exactly theta +/- q
    np.testing.assert_allclose(np.where(free & (lo > 0), theta - lo, q), q, atol=1e-6)


@pytest.mark.parametrize("correction", ["raw", "knn", "clipped", "ppi++", "shrink", "global", "weighted",
                                        "adaptive-k"])
def test_corrections_match_their_formulas(engine, world, correction):
    w = world
    rid = run_calibration(engine, spec(w, interval_method="t", correction=correction))
    rows, run = rows_of(engine, rid)
    assert run["params"]["correction"] == correction and run["params"]["k_used"] == K
    y_nbr, c_nbr = nbr_arrays(w, rows)
    c = np.array([r["score"] for r in rows])
    theta = np.array([r["theta"] for r in rows])
    paper = c + (y_nbr - c_nbr).mean(axis=1)
    if correction == "raw":
        np.testing.assert_allclose(theta, c)
    elif correction == "knn":
        np.testing.assert_allclose(theta, y_nbr.mean(axis=1))
    elif correction == "clipped":
        np.testing.assert_allclose(theta, np.clip(paper, 0, 1))
    elif correction in ("ppi++", "shrink"):
        name = "lam" if correction == "ppi++" else "kappa"
        lam = run["params"]["correction_params"][name]
        assert 0 <= lam <= 1
        with engine.connect() as conn:
            pool = labelled_pool(conn, w["ls"], w["key"], K)
        assert lam == pytest.approx(estimate_lambda(pool.cal, K, form=correction))
        ybar, cbar = y_nbr.mean(axis=1), c_nbr.mean(axis=1)
        expect = ybar + lam * (c - cbar) if correction == "ppi++" else c + lam * (ybar - cbar)
        np.testing.assert_allclose(theta, expect, atol=1e-12)
    elif correction == "global":
        shift = np.mean(w["labels"][:N_LAB] - w["scores"][:N_LAB])
        np.testing.assert_allclose(theta, c + shift, atol=1e-12)
    else:  # weighted / adaptive-k: a residual mean of some of the neighbours, between their extremes
        r = y_nbr - c_nbr
        assert ((theta >= c + r.min(axis=1) - 1e-12) & (theta <= c + r.max(axis=1) + 1e-12)).all()
        if correction == "weighted":  # tau = 0.05 makes the nearest count visibly more
            assert not np.allclose(theta, paper)
    assert [int(r["decision"]) for r in rows] == [int(t >= 0.5) for t in theta]


def test_cv_chooses_on_the_label_set_and_records_its_choice(engine, world):
    w = world
    rid = run_calibration(engine, spec(w, k=10, correction="cv", interval_method="mondrian"))
    rows, run = rows_of(engine, rid)
    choice = run["params"]["cv_choice"]
    assert choice["k"] in cv_ks(10) == CV_KS and run["params"]["k_used"] == choice["k"]
    with engine.connect() as conn:
        pool = labelled_pool(conn, w["ls"], w["key"], 10)
    best = select_by_cv(pool.cal, ks=CV_KS).best
    assert (best.method, best.k) == (choice["method"], choice["k"])
    assert choice["cv_weighted_f1"] == pytest.approx(best.cv_score)
    assert all(len(r["neighbour_ids"]) == choice["k"] for r in rows)
    assert [int(r["decision"]) for r in rows] == [int(r["theta"] >= 0.5) for r in rows]
    # a different correction is a different run; the same one is reused
    assert run_calibration(engine, spec(w, k=10, correction="cv", interval_method="mondrian")) == rid
    assert run_calibration(engine, spec(w, k=10, correction="paper", interval_method="mondrian")) != rid


def test_unknown_method_is_refused_before_anything_is_written(engine, world, use_db, tmp_path, capsys):
    w = world
    before = table_counts(engine)
    with pytest.raises(ValueError, match="unknown interval"):
        run_calibration(engine, spec(w, interval_method="bootstrap"))
    with pytest.raises(ValueError, match="unknown correction"):
        run_calibration(engine, spec(w, correction="magic"))
    assert table_counts(engine) == before
    assert main(["calibrate", "--labeled", "x.csv", "--unlabeled", "y.csv", "--k", "3", "--out",
                 str(tmp_path / "o.csv"), "--correction", "magic"]) == 2
    assert "unknown correction" in capsys.readouterr().err


def test_cli_calibrate_with_interval_and_correction(use_db, world, tmp_path, capsys):
    w = world
    claims, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    claims = claims[-N_ALL:]

    def write(path, rows):
        with open(path, "w", newline="", encoding="utf-8") as fh:
            wr = csv.writer(fh)
            wr.writerow(["id", "text", "score", "label"])
            wr.writerows(rows)
        return path

    data = [(c.source_id, c.text, s, c.label) for c, s in zip(claims, w["scores"])]
    lab, unl, out = write(tmp_path / "L.csv", data[:N_LAB]), write(tmp_path / "U.csv", data[N_LAB:]), \
        tmp_path / "out.csv"
    assert main(["calibrate", "--labeled", str(lab), "--unlabeled", str(unl), "--k", "5", "--out", str(out),
                 "--interval", "mondrian", "--correction", "ppi++"]) == 0
    printed = capsys.readouterr().out
    assert "interval mondrian, correction ppi++" in printed and "weighted F1" in printed
    with open(out, newline="", encoding="utf-8") as fh:
        got = list(csv.DictReader(fh))
    assert len(got) == N_ALL - N_LAB
    assert all(float(r["ci_low"]) <= float(r["ci_high"]) for r in got)


def test_pipeline_passes_interval_and_correction(engine, db_url, world):
    """The flows' calibrate task stores params.yaml's interval and correction with the run."""
    w = world
    params = {"alpha": 0.05, "threshold": 0.5, "interval": "conformal", "correction": "shrink"}
    spec = run_spec("methods-test:test", list(w["ids"][N_LAB:]), w["ls"], w["key"], 3, params)
    out = calibrate_task.fn(spec, TaskContext(FlowContext(db_url=db_url), None, None))
    with engine.connect() as conn:
        run = conn.execute(text("SELECT interval_method, params FROM calibration_runs WHERE id = :i"),
                           {"i": out.run_id}).one()
    assert run.interval_method == "conformal" and run.params["correction"] == "shrink"
    assert "kappa" in run.params["correction_params"]


@pytest.mark.parametrize("correction", ["platt", "platt-score", "isotonic", "temperature", "venn-abers"])
def test_calibrator_runs_store_the_calibrated_probability(engine, world, correction):
    """A score calibrator fitted on L replaces the score; the stored score stays the model's."""
    w = world
    rows, run = rows_of(engine, run_calibration(engine, spec(w, interval_method="conformal-split",
                                                             correction=correction)))
    model = CALIBRATORS[correction]().fit(w["scores"][:N_LAB], w["labels"][:N_LAB])
    c = np.array([r["score"] for r in rows])
    np.testing.assert_allclose(c, [w["scores"][w["by_id"][r["claim_id"]]] for r in rows])
    np.testing.assert_allclose([r["theta"] for r in rows], model.predict_proba(c)[:, 1], atol=1e-9)
    assert run["params"]["predictor"] == {"name": correction, "params": pytest.approx(fitted_params(model))}
    assert [int(r["decision"]) for r in rows] == [int(r["theta"] >= 0.5) for r in rows]
    assert all(r["ci_low"] <= r["theta"] <= r["ci_high"] or r["ci_low"] <= 0 for r in rows)


@pytest.mark.parametrize("correction", ["head", "head+nnppi", "head-cv"])
def test_head_runs_match_a_head_fitted_by_hand(engine, world, correction):
    """The embedding head on L's real MiniLM vectors: alone, under NN-PPI with out-of-fold residuals,
    or under the CV choice made on L with pairwise cross-fitted neighbour scores."""
    w = world
    rows, run = rows_of(engine, run_calibration(engine, spec(w, interval_method="conformal",
                                                             correction=correction)))
    lab = sorted(w["ids"][:N_LAB])  # the pool's order (claim id)
    pos = [w["by_id"][i] for i in lab]
    head = fit_head(w["vecs"][pos], w["scores"][pos], w["labels"][pos], seed=0)
    assert run["params"]["predictor"] == {"name": "head", "params": {"C": head.C}}
    targets = [w["by_id"][r["claim_id"]] for r in rows]
    p = head.predict(w["vecs"][targets], w["scores"][targets])
    theta = np.array([r["theta"] for r in rows])
    if correction == "head":
        np.testing.assert_allclose(theta, p, atol=1e-6)
    elif correction == "head+nnppi":
        oof = dict(zip(lab, head.oof))
        r_nbr = np.array([[w["labels"][w["by_id"][n]] - oof[n] for n in r["neighbour_ids"]] for r in rows])
        assert r_nbr.shape == (len(rows), K)
        np.testing.assert_allclose(theta, p + r_nbr.mean(axis=1), atol=1e-6)
    else:
        choice = run["params"]["cv_choice"]
        assert choice["k"] in cv_ks(K) and run["params"]["k_used"] == choice["k"]
        with engine.connect() as conn:
            pool = labelled_pool(conn, w["ls"], w["key"], K)
        best = select_by_cv(head.labelled_set(pool.cal), ks=cv_ks(K)).best
        assert (best.method, best.k) == (choice["method"], choice["k"])
    assert [int(r["decision"]) for r in rows] == [int(t >= 0.5) for t in theta]


def test_auto_run_applies_the_correction_it_chose_on_L(engine, world):
    """``auto`` records each candidate's cross-validated positive-class F1 on L and decides exactly as
    a run of the candidate it chose."""
    w = world
    rows, run = rows_of(engine, run_calibration(engine, spec(w, interval_method="mondrian", correction="auto")))
    with engine.connect() as conn:
        pool = labelled_pool(conn, w["ls"], w["key"], auto_columns(K))
    vecs = w["vecs"][[w["by_id"][i] for i in pool.claim_ids]]
    chosen, figures = choose_correction(pool.cal, vecs, K, 0.5)
    assert run["params"]["auto_choice"] == {"chosen": chosen, "cv_f1_positive": figures}
    assert set(figures) == set(AUTO_CANDIDATES)
    same, _ = rows_of(engine, run_calibration(engine, spec(w, interval_method="mondrian", correction=chosen)))
    np.testing.assert_allclose([r["theta"] for r in rows], [r["theta"] for r in same], atol=1e-9)
    assert [r["decision"] for r in rows] == [r["decision"] for r in same]


def test_cli_calibrate_with_the_head(use_db, world, tmp_path, capsys):
    w = world
    claims, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    claims = claims[-N_ALL:]
    lab, unl, out = tmp_path / "L.csv", tmp_path / "U.csv", tmp_path / "out.csv"
    for path, part in ((lab, slice(0, N_LAB)), (unl, slice(N_LAB, N_ALL))):
        with open(path, "w", newline="", encoding="utf-8") as fh:
            csv.writer(fh).writerows([["id", "text", "score", "label"]] + [
                [c.source_id, c.text, s, c.label] for c, s in zip(claims[part], w["scores"][part])])
    assert main(["calibrate", "--labeled", str(lab), "--unlabeled", str(unl), "--k", "5", "--out", str(out),
                 "--interval", "conformal-split", "--correction", "head-cv"]) == 0
    assert "interval conformal-split, correction head-cv" in capsys.readouterr().out
    with open(out, newline="", encoding="utf-8") as fh:
        assert len(list(csv.DictReader(fh))) == N_ALL - N_LAB
