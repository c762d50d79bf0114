"""Method comparison: pure computation, storage, CLI, report section.

The pure part runs on synthetic exchangeable data, where the conformal guarantees must show;
the stored part on small real runs (CLEF claims, imported scores, real MiniLM embeddings, SQL
kNN), where the comparison must reproduce the run's own stored figures.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from checkworthy.cli.main import main
from checkworthy.data.datasets import load_clef
from checkworthy.method import metrics
from checkworthy.method.intervals import INTERVAL_METHODS
from checkworthy.report.files import rerender, save_report
from checkworthy.runs import comparisons
from checkworthy.runs.analyses import AnalysisOptions, ensure_analyses
from checkworthy.runs.calibration_run import run_calibration
from checkworthy.runs.comparisons import CompareInputs, CompareOptions, MetricRow, compare, targets_met
from checkworthy.runs.embedding import ensure_embeddings
from checkworthy.scorers.base import OK, Score
from checkworthy.store import rows as store
from checkworthy.store.comparisons import comparison_heads, comparison_rows
from checkworthy.store.metrics import load_metrics
from checkworthy.store.reports import stored_report
from checkworthy.store.run_spec import RunMethods, RunSpec
from checkworthy.testing.datasets import raw_path
from checkworthy.testing.worlds import synthetic

# ------------------------------------------------------------------------------ pure part




@pytest.fixture(scope="module")
def synth():
    inp = synthetic()
    return inp, compare(inp)


def index(rows):
    return {(r.family, r.method, r.k, r.metric, r.cls): r.value for r in rows}


def test_every_family_and_method_is_compared(synth):
    inp, out = synth
    idx = index(out.rows)
    fams = {(r.family, r.method) for r in out.rows}
    assert {("interval", m) for m in INTERVAL_METHODS} <= fams
    assert {("interval-cv", m) for m in INTERVAL_METHODS} <= fams
    assert {("correction", m) for m in ("raw", "knn", "paper", "ppi++", "shrink", "weighted")} <= fams
    assert {("calibrator", m) for m in ("platt", "isotonic", "temperature")} <= fams
    assert {("sets", m) for m in comparisons.SET_METHODS} <= fams
    cv = out.info["cv_choice"]
    assert ("cv", cv["method"], cv["k"], "weighted_f1", "all") in idx and cv["k"] in (3, 5, 10)
    # the paper's baseline is the raw score thresholded at 0.5
    raw = metrics.classification_report(inp.y, (inp.c >= 0.5).astype(int))
    assert idx[("correction", "raw", 5, "weighted_f1", "all")] == pytest.approx(raw["weighted_f1"])
    assert idx[("correction", "raw", 5, "f1", "1")] == pytest.approx(raw["f1_1"])
    assert 0 <= out.info["correction_params"]["ppi++"]["lam"] <= 1


def test_conformal_methods_keep_their_promise_on_exchangeable_data(synth):
    _, out = synth
    idx = index(out.rows)
    for fam in ("interval", "interval-cv"):
        k = 5 if fam == "interval" else out.info["cv_choice"]["k"]
        for m in comparisons.CONFORMAL:
            assert idx[(fam, m, k, "coverage", "all")] >= 0.92, (fam, m)
        for m in ("mondrian", "mondrian-split"):  # class-conditional: each class
            assert min(idx[(fam, m, k, "coverage", c)] for c in "01") >= 0.90, (fam, m)
    assert idx[("interval", "z", 5, "coverage", "all")] < 0.8  # the paper's interval undercovers
    assert min(idx[("sets", "mondrian-sets", None, "coverage", c)] for c in "01") >= 0.90


def test_cv_choice_ignores_the_targets_labels():
    inp = synthetic(m=400, n=300, seed=3)
    a = compare(inp)
    flipped = CompareInputs(**{**inp.__dict__, "y": 1 - inp.y})
    b = compare(flipped)
    assert a.info["cv_choice"] == b.info["cv_choice"]
    assert a.info["correction_params"] == b.info["correction_params"]


def test_prior_aware_choice_uses_the_pool_prevalence_only():
    inp = synthetic(m=400, n=400, seed=4)
    skewed = CompareInputs(**{**inp.__dict__, "pool_prevalence": 0.25})
    out = compare(skewed, CompareOptions(intervals=("z",), sets=()))
    idx = index(out.rows)
    ch = out.info["cv_prior_choice"]
    assert ch["pool_prevalence"] == 0.25 and ch["threshold"] in CompareOptions().prior_thresholds
    assert idx[("cv-prior", ch["method"], ch["k"], "threshold", "all")] == ch["threshold"]
    assert ("calibrator-prior", "platt", None, "weighted_f1", "all") in idx
    flipped = compare(CompareInputs(**{**skewed.__dict__, "y": 1 - inp.y}), CompareOptions(intervals=("z",),
                                                                                          sets=()))
    assert flipped.info["cv_prior_choice"] == ch
    assert "cv_prior_choice" not in compare(inp, CompareOptions(intervals=("z",), sets=())).info


def test_temperature_only_for_token_probabilities():
    out = compare(synthetic(m=300, n=100, seed=1, kind="verbalised"),
                  CompareOptions(intervals=("z",), sets=()))
    assert not any(r.method == "temperature" for r in out.rows)
    assert any(r.method == "platt" for r in out.rows)


def test_targets_met():
    rows = [MetricRow("interval", "mondrian", 5, "coverage", v, c) for c, v in (("all", .95), ("0", .93),
                                                                               ("1", .97))]
    rows += [MetricRow("interval", "conformal", 5, "coverage", v, c) for c, v in (("all", .95), ("0", .99),
                                                                                 ("1", .91))]
    rows += [MetricRow("interval", "z", 5, "coverage", .5)]
    met = targets_met(rows)
    assert met == {("interval", "mondrian", 5): True, ("interval", "conformal", 5): False}


def with_embeddings(inp: CompareInputs, seed: int = 0) -> CompareInputs:
    """Synthetic inputs with 16-d embeddings that track the score (so the head and ``auto`` run)."""
    m = inp.cal.m
    emb = np.random.default_rng(seed).normal(0, 1, (m + len(inp.c), 16))
    emb[:, 0] += 3 * np.concatenate([inp.cal.c, inp.c])
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    return CompareInputs(**{**inp.__dict__, "emb_cal": emb[:m], "emb": emb[m:], "pool_prevalence": 0.3})


def test_a_pass_fits_each_once_and_changes_no_figure():
    base = with_embeddings(synthetic(m=160, n=80, seed=5))
    fits, seen = comparisons.ComparisonFits(), []
    for k in (3, 5):
        inp = CompareInputs(**{**base.__dict__, "k": k})
        before = set(fits.entries)
        shared = compare(inp, fits=fits, progress=lambda done, total: seen.append((done, total)))
        alone = compare(inp)
        assert shared.rows == alone.rows and shared.info == alone.info  # the same figures, to the bit
        added = [key[1:] for key in fits.entries if key not in before]
        fitted = [key for key in added if key[0] == "fit"]
        assert len(fitted) == len(set(fitted)) and all(key[2] == k for key in fitted)  # once per (run, k)
        # what does not read k is fitted for the first run only: the CV choices on L and on the head
        assert sum(key[0] == "cv" for key in added) == (3 if k == 3 else 0)
    assert seen == [(i, 7) for i in range(1, 8)] * 2  # every step, on the head's and auto's runs too
    # the fits are the calibration service's: the auto correction is the one a run fits
    fc, fitted_auto = fits.entries[(comparisons.labelled_digest(inp), "fit", "auto", 5, inp.threshold, 0)]
    assert shared.info["auto"]["chosen"] == fitted_auto["auto_choice"]["chosen"]


def test_comparison_progress_says_where_it_is():
    lines: list[str] = []
    progress = comparisons.comparison_progress(7, lines.append)
    progress(2, 7)
    assert len(lines) == 1 and lines[0].startswith("  compared methods on run 7: 2/7 steps (")
    assert lines[0].endswith(" min left)") and "/s, ~" in lines[0]


# ---------------------------------------------------------------------------- stored runs

N_LAB, N_ALL = 100, 150
TARGET = "compare-test:test"


@pytest.fixture(scope="module")
def world(engine):
    claims, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    claims = claims[100:100 + N_ALL]
    rng = np.random.default_rng(23)
    y = np.array([c.label for c in claims])
    verbal = np.clip(0.6 + 0.2 * y + rng.normal(0, 0.2, len(y)), 0, 1).round(1)
    token = expit(0.3 + 1.2 * y + rng.normal(0, 1.0, len(y))).round(5)
    with engine.begin() as conn:
        ids = store.store_claims_with_labels(
            conn, [store.NewClaim("compare-test", "pool" if i < N_LAB else "test", c.source_id, c.text,
                                  c.label) for i, c in enumerate(claims)], "test")
        hashes = [store.sha256_text(c.text) for c in claims]
        ensure_embeddings(conn, hashes)
        ls = store.create_label_set(conn, "compare-test:L", ids[:N_LAB])
        model = store.ensure_model(conn, "file:compare-test", "file")
        params = {"source": "compare-test"}
        store.insert_predictions(conn, model, "none", params, [
            (h, {"verbalised": Score(float(v), OK, f"{v}"), "token_prob": Score(float(t), OK, f"{t}")})
            for h, v, t in zip(hashes, verbal, token)])
        keys = {kind: store.ScoreKey(model, "none", store.params_hash(params), kind)
                for kind in ("verbalised", "token_prob")}
    runs = {(kind, k): run_calibration(engine, RunSpec(TARGET, tuple(ids[N_LAB:]), ls, keys[kind], RunMethods(k)))
            for kind in keys for k in (3, 5)}
    return runs


def test_stored_comparison_reproduces_the_run_and_is_append_only(engine, owner_engine, world):
    rid = world[("verbalised", 5)]
    with engine.begin() as conn:
        cid = comparisons.ensure_comparison(conn, rid, code_rev="test")
    with engine.begin() as conn:
        assert comparisons.ensure_comparison(conn, rid, code_rev="test") == cid  # reused
        rows = comparison_rows(conn, [cid])
        head = comparison_heads(conn, [cid])[cid]
        stored = load_metrics(conn, rid)
    info = head["params"]["info"]
    assert info["neighbours_as_stored"] is True
    # L was drawn from split 'pool' alone, which holds no target: its prevalence may be used
    assert info["cv_prior_choice"]["pool_prevalence"] == pytest.approx(info["labelled_positive_rate"])
    idx = {(r["family"], r["method"], r["k"], r["metric"], r["class"]): r["value"] for r in rows}
    for method, ours in (("nnppi", "paper"), ("baseline", "raw"), ("knn", "knn")):
        for metric, cls in (("weighted_f1", "all"), ("f1", "0"), ("f1", "1"), ("accuracy", "all")):
            assert idx[("correction", ours, 5, metric, cls)] == pytest.approx(stored[(method, metric, cls)])
    for cls in ("all", "0", "1"):
        assert idx[("interval", "z", 5, "coverage", cls)] == pytest.approx(stored[("nnppi", "coverage", cls)])
    width = stored[("nnppi", "mean_width", "all")]
    assert idx[("interval", "z", 5, "mean_width", "all")] == pytest.approx(width)
    assert not any(r["method"] == "temperature" for r in rows)  # verbalised score
    # the embedding head got the stored MiniLM vectors of L and of the targets
    assert ("head", "minilm-head", None, "weighted_f1", "all") in idx and info["head"]["C"] > 0
    with pytest.raises(DBAPIError, match="append-only"), owner_engine.begin() as conn:  # even the owner
        conn.execute(text("UPDATE method_comparison SET value = 0 WHERE comparison_id = :c"), {"c": cid})
    with pytest.raises(DBAPIError, match="append-only"), owner_engine.begin() as conn:
        conn.execute(text("DELETE FROM method_comparisons WHERE id = :c"), {"c": cid})


def test_old_reports_rerender_unchanged_after_comparisons_exist(engine, world, tmp_path):
    rid = world[("token_prob", 3)]
    with engine.begin() as conn:
        save_report(conn, "cmp-before", [rid], tmp_path, ensure_analyses(conn, [rid], AnalysisOptions(
            k_sweep=(1, 3), sizes=(50,), seeds=(0,), size_ks=(3,), k_big=5)))
        before = stored_report(conn, "cmp-before")
        assert "Methods compared" not in before["markdown"] and before["comparison_ids"] is None
        comparisons.ensure_comparison(conn, rid, code_rev="test")
    with engine.connect() as conn:
        assert rerender(conn, before).markdown == before["markdown"]


def test_cli_compare_stores_prints_and_reports(engine, world, use_db, tmp_path, capsys):
    ids = [world[("verbalised", 3)], world[("token_prob", 5)]]
    assert main(["compare", "--run", ",".join(map(str, ids)), "--report", "cmp-report",
                 "--reports-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for word in ("mondrian-split", "interval-cv", "platt", "temperature", "CV chose", "report:"):
        assert word in out, word
    md = (tmp_path / "cmp-report" / "report.md").read_text(encoding="utf-8")
    assert "## Methods compared" in md and "coverage_vs_width.png" in md
    assert len(list((tmp_path / "cmp-report" / "figures").glob("*coverage_vs_width.png"))) == 2
    assert (tmp_path / "cmp-report" / "plots" / "coverage_vs_width").is_dir()
    section = md.split("## Methods compared", 1)[1]
    assert "Cross-validated choice" in section and ("| met" in section or "| missed" in section)
    with engine.connect() as conn:
        stored = stored_report(conn, "cmp-report")
        n = conn.execute(text("SELECT count(*) FROM method_comparisons WHERE run_id = ANY(:r)"),
                         {"r": ids}).scalar_one()
    assert stored["comparison_ids"] and n == 2
    # re-rendered byte for byte, Markdown, HTML and every file
    assert main(["report", "cmp-report"]) == 0
    assert capsys.readouterr().out == md
    assert main(["report", "cmp-report", "--out", str(tmp_path / "again")]) == 0
    capsys.readouterr()
    d = tmp_path / "cmp-report"
    for p in d.rglob("*"):
        if p.is_file():
            assert (tmp_path / "again" / "cmp-report" / p.relative_to(d)).read_bytes() == p.read_bytes(), p
    # a second compare reuses the stored comparisons
    assert main(["compare", "--run", str(ids[0])]) == 0
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM method_comparisons WHERE run_id = ANY(:r)"),
                            {"r": ids}).scalar_one() == 2


def test_compare_refuses_a_missing_run(use_db, capsys):
    assert main(["compare", "--run", "999999"]) == 2
    assert "no calibration run" in capsys.readouterr().err
