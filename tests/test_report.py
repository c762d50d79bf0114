"""Reports of small stored runs (real claims, imported scores, real MiniLM embeddings, real Postgres).

Two stored worlds:

- ``hand``: 5 labelled claims and 8 targets, k = 5, so every target's neighbours are the whole
  labelled set and every figure can be worked out on paper (the comments show how). A second
  score key differs only in its sampling temperature.
- ``world``: 100 labelled claims and 50 targets, k in {3, 5, 10}, for the sweeps, the files,
  DVC, the HTML page in Chromium (the headline on its first screen) and byte-identical
  re-rendering; its k = 10 run is compared (every method), so the headline has every row.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from sqlalchemy import text

from checkworthy.cli.main import main
from checkworthy.config import DVC_REPORT, ROOT
from checkworthy.data.datasets import load_clef
from checkworthy.data.versioning import data_hash, data_version
from checkworthy.report.artifact import publish_artifact
from checkworthy.report.files import save_report
from checkworthy.report.formatting import fmt
from checkworthy.report.render import HEADLINE
from checkworthy.runs.analyses import AnalysisOptions, ensure_analyses, load_runs
from checkworthy.runs.calibration_run import run_calibration
from checkworthy.runs.comparisons import ensure_comparison, latest_comparisons
from checkworthy.runs.embedding import ensure_embeddings
from checkworthy.scorers.base import OK, Score
from checkworthy.store import rows as store
from checkworthy.store.calibration_runs import load_run
from checkworthy.store.comparisons import comparison_rows
from checkworthy.store.data_versions import record_data_version
from checkworthy.store.knn import neighbour_lists, pool_of
from checkworthy.store.label_updates import labels_as_of
from checkworthy.store.metrics import load_metrics
from checkworthy.store.review_queue import entries_of_run
from checkworthy.store.run_spec import RunContext, RunMethods, RunSpec
from checkworthy.testing.datasets import raw_path
from checkworthy.testing.pages import assert_headline_on_first_screen, in_chromium, section, table

TARGET = "clef2024:test"  # so the paper's CLEF figures apply
HAND_OPTIONS = AnalysisOptions(k_sweep=(1, 3, 5), sizes=(3, 4), seeds=(0, 1), size_ks=(3, 5),
                                      k_big=5, n_examples=2)
WORLD_OPTIONS = AnalysisOptions(k_sweep=(1, 3, 5, 10, 20), sizes=(10, 20, 40, 70), seeds=(0, 1, 2),
                                       size_ks=(3, 5, 10), k_big=25, n_examples=2)

# hand world: (label, score at T=0.8, score at T=0.1)
HAND_L = [(1, 0.9, 0.9), (1, 0.6, 0.6), (0, 0.7, 0.7), (0, 0.2, 0.2), (0, 0.4, 0.4)]
HAND_U = [(1, 0.95, 0.95), (1, 0.60, 0.70), (0, 0.55, 0.55), (0, 0.62, 0.62), (0, 0.80, 0.80),
          (1, 0.30, 0.30), (0, 0.10, 0.10), (0, 0.45, 0.45)]


@dataclass
class Stored:
    runs: dict[int, int]
    claim_ids: list[int]
    label_set: int
    other_runs: dict[int, int]


def _claims_by_label():
    rows, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    return rows


def _store_world(engine, name, claims, labels, scores_by_temp, n_lab, ks):
    """Store claims with the given labels, scores under one key per temperature, and run every k."""
    with engine.begin() as conn:
        new = [store.NewClaim("report-test", "x", c.source_id, c.text, lab) for c, lab in zip(claims, labels)]
        ids = store.store_claims_with_labels(conn, new, "report-test")
        ensure_embeddings(conn, [store.sha256_text(c.text) for c in claims])
        ls = store.create_label_set(conn, f"report-test:{name}:L", ids[:n_lab])
        model = store.ensure_model(conn, f"file:gemma3-270m-{name}", "file")
        keys = {}
        for temp, scores in scores_by_temp.items():
            params = {"source": name, "temperature": temp}
            store.insert_predictions(conn, model, "none", params, [
                (store.sha256_text(c.text), {"imported": Score(float(s), OK, f"{s}")})
                for c, s in zip(claims, scores)])
            keys[temp] = store.ScoreKey(model, "none", store.params_hash(params), "imported")
    with engine.begin() as conn:
        dv = record_data_version(conn, data_version())
    ctx = RunContext(code_rev="test-rev", flow_run_id="flow-test", data_version_id=dv)
    runs = {temp: {k: run_calibration(engine, RunSpec(TARGET, tuple(ids[n_lab:]), ls, key, RunMethods(k)), ctx)
                   for k in ks}
            for temp, key in keys.items()}
    return ids, ls, runs


@pytest.fixture(scope="module")
def hand(engine, tmp_path_factory):
    rows = _claims_by_label()[200:]
    pos = [c for c in rows if c.label == 1]
    neg = [c for c in rows if c.label == 0]
    picked, it = [], {0: iter(neg), 1: iter(pos)}
    for lab, *_ in HAND_L + HAND_U:
        picked.append(next(it[lab]))
    labels = [lab for lab, *_ in HAND_L + HAND_U]
    both = HAND_L + HAND_U
    ids, ls, runs = _store_world(engine, "hand", picked, labels,
                                 {0.8: [s for _, s, _ in both], 0.1: [t for *_, t in both]}, n_lab=5, ks=[5])
    out = tmp_path_factory.mktemp("reports")
    with engine.begin() as conn:  # the label set as version 1 of a lineage (migration 0003)
        conn.execute(text("INSERT INTO label_set_versions (name, label_set_id, reason) "
                          "VALUES ('report-test:hand', :s, 'initial')"), {"s": ls})
        path = save_report(conn, "report-hand", [runs[0.8][5]], out,
                           ensure_analyses(conn, [runs[0.8][5]], HAND_OPTIONS))
    return Stored(runs[0.8], ids, ls, runs[0.1]), path


@pytest.fixture(scope="module")
def world(engine, tmp_path_factory):
    claims = _claims_by_label()[:150]
    rng = np.random.default_rng(5)
    labels = [c.label for c in claims]
    scores = np.clip(0.45 + 0.25 * np.array(labels) + rng.normal(0, 0.2, len(claims)), 0, 1).round(4)
    ids, ls, runs = _store_world(engine, "world", claims, labels, {0.8: scores}, n_lab=100, ks=[3, 5, 10])
    out = tmp_path_factory.mktemp("reports")
    with engine.begin() as conn:
        ensure_comparison(conn, runs[0.8][10], code_rev="test-rev")
        picked = sorted(runs[0.8].values())
        path = save_report(conn, "report-world", picked, out, ensure_analyses(conn, picked, WORLD_OPTIONS))
    return Stored(runs[0.8], ids, ls, {}), path






# ---- every table of the hand world equals its worked-out value --------------------------------
#
# residuals of the 5 labelled claims: +0.1, +0.4, -0.7, -0.2, -0.4 -> mean -0.16, so theta = score - 0.16;
# KNN mean = 2/5 = 0.4 for every target (all decide 0); sd(residuals) = sqrt(0.732 / 4), half-width
# 1.96 * sd / sqrt(5) = 0.375.
# targets (gold, score -> theta): (1, .95 -> .79) (1, .60 -> .44) (0, .55 -> .39) (0, .62 -> .46)
#                                 (0, .80 -> .64) (1, .30 -> .14) (0, .10 -> -.06) (0, .45 -> .29)


def hand_md(hand, engine) -> str:
    with engine.connect() as conn:
        return conn.execute(text("SELECT markdown FROM reports WHERE name = 'report-hand'")).scalar_one()


def test_weighted_f1_beside_the_paper(hand, engine):
    rows = table(hand_md(hand, engine), "Weighted F1 beside the paper")
    # baseline 1,1,1,1,1,0,0,0: F1 0.5 for both classes -> 0.500; paper CLEF Gemma 3 270M k=5: 0.179
    # KNN all 0: F1(0) = 2*.625/1.625 = .769, weighted 5/8 * .769 = .481; paper .824
    # NN-PPI 1,0,0,0,1,0,0,0: F1(0) = 8/11, F1(1) = .4 -> (5*8/11 + 3*.4)/8 = .605; paper .827
    assert rows == [["5", "Baseline", "0.500", "0.179", "+0.321"],
                    ["5", "KNN", "0.481", "0.824", "-0.343"],
                    ["5", "NN-PPI", "0.605", "0.827", "-0.222"]]


def test_summary_table(hand, engine):
    rows = table(hand_md(hand, engine), "Summary")
    assert rows == [["clef2024", "`file:gemma3-270m-hand`", "imported score, T = 0.8", "5", str(hand[0].runs[5]),
                     "0.500", "0.481", "0.605", "0.827", "-0.222", "0.375"]]


def test_class_table(hand, engine):
    rows = table(hand_md(hand, engine), "Precision, recall and F1 per class")
    # columns: k, method, P0 R0 F1(0) P1 R1 F1(1), predicted positive rate, paper F1(0), Δ, paper F1(1), Δ
    assert rows[0] == ["5", "Baseline", "0.667", "0.400", "0.500", "0.400", "0.667", "0.500", "0.625",
                       "0.000", "+0.500", "0.513", "-0.013"]
    assert rows[1] == ["5", "KNN", "0.625", "1.000", "0.769", "0.000", "0.000", "0.000", "0.000",
                       "—", "—", "—", "—"]
    # NN-PPI: TP 1, FP 1, FN 2, TN 4; paper (CLEF, NN-PPI k=5) 0.863 / 0.760
    assert rows[2] == ["5", "NN-PPI", "0.667", "0.800", "0.727", "0.500", "0.333", "0.400", "0.250",
                       "0.863", "-0.136", "0.760", "-0.360"]


def test_baseline_statistics(hand, engine):
    rows = table(hand_md(hand, engine), "Baseline statistics")
    # gold 3/8; predicted 5/8; mean score gold 0: 2.52/5; gold 1: 1.85/3. Paper: CLEF gold rate 0.339.
    assert rows == [["gold positive rate", "0.375", "0.339", "+0.036"],
                    ["predicted positive rate (raw score >= threshold)", "0.625", "—", "—"],
                    ["mean raw score on gold negatives", "0.504", "—", "—"],
                    ["mean raw score on gold positives", "0.617", "—", "—"]]


def test_coverage_and_width(hand, engine):
    rows = table(hand_md(hand, engine), "Interval coverage and width")
    # theta +/- 0.375 holds the label for targets 1, 7, 8 only: class 0 2/5, class 1 1/3, all 3/8;
    # paper CLEF k=5: 0.695 / 0.568 / 0.652; every interval is 0.750 wide
    assert rows == [["5", "0.950", "0.400", "0.695", "-0.295", "0.333", "0.568", "-0.235", "0.375", "0.652",
                     "-0.277", "0.750", "0.750", "0.750", "8"]]


def test_decision_accuracy(hand, engine):
    rows = table(hand_md(hand, engine), "Decision accuracy")
    assert rows == [["5", "0.500", "0.625", "0.625", "0.700–0.900", "below"]]


def test_data_beside_the_paper(hand, engine):
    rows = table(hand_md(hand, engine), "Data beside the paper")
    assert rows == [["clef2024:test", "report-test:hand:L", "8", "317", "-309", "3", "107", "-104", "5",
                     "210", "-205", "5", "2406", "-2401", "0.375", "0.339", "+0.036"]]


def test_decide_or_review(hand, engine):
    """Five labelled claims can never pass the test (error <= 0.1 at delta 0.1 needs at least 22
    automated ones): each of the batch's claims has all five among its neighbours, so the rule is
    certified on those five, too few; it decides nothing automatically and all 8 claims are queued."""
    rows = table(hand_md(hand, engine), "Decide or review")
    assert rows == [[rows[0][0], "5", "`paper`", "error <= 0.1, delta 0.1", "5 nearest the batch (effective n 5)",
                     "too few like the batch", "0%", "8", "0%", "—", "—", "8"]]


def test_drift(hand, engine):
    """Five labelled claims are too few for a 95% radius (it needs 19): nothing lies beyond it."""
    rows = table(hand_md(hand, engine), "Drift")
    assert [r[3:] for r in rows] == [["5", "—", "0 of 8", "0.0%", "5%", "15%", "1", "no"]]


def test_decide_or_review_figures_of_the_world(world, engine):
    """The world's runs: the realised risk among automatic decisions is within the bound wherever a
    margin passed, and the table's shares are the rule applied to the stored theta."""
    w, path = world
    rows = table(path.read_text(), "Decide or review")
    assert [r[1] for r in rows] == ["3", "5", "10"]
    with engine.connect() as conn:
        for r, run_id in zip(rows, (w.runs[3], w.runs[5], w.runs[10])):
            rule = load_run(conn, run_id)["params"]["review"]
            assert r[6] == f"{rule['automated_share']:.0%}"
            assert r[11] == str(len(entries_of_run(conn, run_id)))
            assert r[10] in ("yes", "—")


def test_failure_modes_counts_and_examples(hand, engine):
    md = hand_md(hand, engine)
    # fixed FP: targets 3, 4; fixed FN: none; persistent: 5 (gold 0), 6 (gold 1); regression: 2 (gold 1)
    assert table(md, "Failure modes") == [["5", "2", "0", "2 (1 / 1)", "1 (0 / 1)", "3", "+1"]]
    fm = section(md, "Failure modes")
    u = hand[0].claim_ids[5:]
    with engine.connect() as conn:
        src = dict(conn.execute(text("SELECT id, source_id FROM claims WHERE id = ANY(:i)"), {"i": u}).all())
        ex = conn.execute(text("SELECT category, rank, claim_id, gold, score, theta, neighbours "
                               "FROM failure_examples WHERE run_id = :r ORDER BY category, rank"),
                          {"r": hand[0].runs[5]}).all()
    # equal moves (0.16) -> claim id order; persistent: |theta - .5| .36 (target 6) before .14 (target 5)
    assert [(e.category, e.claim_id) for e in ex] == [
        ("fixed_fp", u[2]), ("fixed_fp", u[3]), ("persistent", u[5]), ("persistent", u[4]),
        ("regression", u[1])]
    assert ex[0].gold == 0 and ex[0].score == pytest.approx(0.55) and ex[0].theta == pytest.approx(0.39)
    nb = ex[0].neighbours
    assert len(nb) == 5 and sorted(n["residual"] for n in nb) == pytest.approx([-0.7, -0.4, -0.2, 0.1, 0.4])
    assert sum(n["contribution"] for n in nb) == pytest.approx(-0.16)
    assert f"`{src[u[2]]}`" in fm and "raw score 0.550 → theta 0.390 (move -0.160" in fm


def test_reliability_table(hand, engine):
    rows = table(hand_md(hand, engine), "Reliability and score distributions")
    # raw score, 10 bins: singletons |score - gold| .05 .55 .80 .70 .10 .45; bin 6 holds .60 (1) and .62 (0):
    # |.61 - .5| = .11 -> ECE = (2.65 + 2 * .11) / 8 = .359. KNN: all .4 in bin 4, rate 3/8 -> .025.
    assert rows[0][:3] == ["5", "0.359", "0.025"]


def test_temperature_table(hand, engine):
    rows = table(hand_md(hand, engine), "Ablation: temperature")
    # T=0.1 moves target 2 to .70 -> theta .54 -> right: NN-PPI F1 .8 / .667 -> .750 (+.145 vs this run)
    assert [r[:6] + r[-1:] for r in rows] == [
        ["5", "T=0.1", str(hand[0].other_runs[5]), "0.500", "0.481", "0.750", "+0.145"],
        ["5", "T=0.8 (this run)", str(hand[0].runs[5]), "0.500", "0.481", "0.605", "+0.000"]]


def test_k_and_size_sweeps_of_the_hand_world(hand, engine):
    md = hand_md(hand, engine)
    k_rows = {r[0]: r for r in table(md, "Ablation: number of neighbours k")}
    assert k_rows["5"][1:4] == ["0.500", "0.481", "0.605"] and k_rows["5"][-1] == "yes"
    size_rows = {r[0]: r for r in table(md, "Ablation: calibration-set size |L|")}
    assert set(size_rows) == {"3", "4", "5"}
    assert size_rows["5"][3] == "0.605 ± 0.000"  # k=5 on the whole pool, both seeds: the run itself
    assert size_rows["4"][3] == "—"  # |L| < k


def test_inputs_name_every_version(hand, engine):
    rows = dict(table(hand_md(hand, engine), "Inputs"))
    with engine.connect() as conn:
        fp = conn.execute(text("SELECT fingerprint FROM label_sets WHERE id = :i"),
                          {"i": hand[0].label_set}).scalar()
    assert fp in rows["label set"] and "report-test:hand:L" in rows["label set"]
    assert rows["label set"].endswith("; version 1 of lineage `report-test:hand` (initial)")
    assert "`file:gemma3-270m-hand`" in rows["model"] and "`none`" in rows["prompt version"]
    assert "temperature = `0.8`" in rows["generation parameters"]
    assert rows["code revision (runs)"] == "`test-rev`" and rows["flow run (runs)"] == "`flow-test`"
    assert rows["dataset version (DVC md5)"].startswith(f"`{data_hash()}` at git `")
    for key in ("runs", "code revision (analyses)", "calibration"):
        assert rows[key] not in ("", "—")


# ---- the larger world: sweeps, files, DVC, HTML, re-rendering ---------------------------------


def test_k_sweep_reproduces_every_stored_run(world, engine):
    w, _ = world
    with engine.connect() as conn:
        md = conn.execute(text("SELECT markdown FROM reports WHERE name = 'report-world'")).scalar_one()
        rows = conn.execute(text(
            """SELECT am.k, am.method, am.value, em.value AS stored FROM analysis_metrics am
               JOIN report_analyses ra ON ra.id = am.analysis_id AND ra.analysis = 'k_sweep'
               JOIN calibration_runs r ON r.id = ANY(:runs) AND r.k = am.k
               JOIN evaluation_metrics em ON em.run_id = r.id AND em.method = am.method
                    AND em.metric = am.metric AND em.class = am.class
               WHERE am.run_id = ANY(:runs) AND am.metric = 'weighted_f1'"""),
            {"runs": list(w.runs.values())}).all()
    assert {r.k for r in rows} == {3, 5, 10} and len(rows) == 9
    assert all(r.value == pytest.approx(r.stored, abs=1e-12) for r in rows)
    assert [r[-1] for r in table(md, "Ablation: number of neighbours k")] == ["—", "yes", "yes", "yes", "—"]


def test_size_sweep_equals_sql_knn_on_each_subsample(world, engine):
    """Re-ranking the full-pool lists within a subsample gives exactly SQL's kNN on that subsample."""
    from checkworthy.method import sweeps

    w, _ = world
    with engine.connect() as conn:
        run = load_runs(conn, [w.runs[10]])[0]
        info = conn.execute(text("SELECT params->'info' FROM report_analyses WHERE group_key = :g "
                                 "AND analysis = 'label_set_size'"), {"g": run["group_key"]}).scalar_one()
        stored = {(r.k, r.n_labelled, r.seed): r.value for r in conn.execute(text(
            """SELECT k, n_labelled, seed, value FROM analysis_metrics am JOIN report_analyses ra ON ra.id =
               am.analysis_id WHERE ra.analysis = 'label_set_size' AND ra.group_key = :g
               AND am.method = 'nnppi' AND am.metric = 'weighted_f1' AND am.statistic = 'value'"""),
            {"g": run["group_key"]})}
        pool = pool_of(conn, run)
        targets = sorted(w.claim_ids[100:])
        gold = labels_as_of(conn, targets, run["finished_at"])
        scores = dict(conn.execute(text("SELECT claim_id, score FROM calibrated_results WHERE run_id = :r"),
                                   {"r": run["id"]}).all())
        y, c = np.array([gold[i] for i in targets]), np.array([scores[i] for i in targets])
        assert info["n_fallback"] > 0  # k_big = 25 is short for the small subsamples
        for size, seed, k in [(10, 0, 10), (20, 2, 5), (40, 1, 3), (70, 0, 10)]:
            subsets = sweeps.stratified_nested_subsamples(pool.labels, info["sizes"], seed)
            pos = subsets[info["sizes"].index(size)]
            sql_ids = neighbour_lists(conn, run, targets, k, subset=pool.ids[pos])
            expected = sweeps.evaluate(y, c, sql_ids, pool, run["alpha"], run["threshold"])
            assert stored[(k, size, seed)] == pytest.approx(expected[("nnppi", "weighted_f1", "all")],
                                                            abs=1e-12)


def test_report_directory_files(world):
    _, path = world
    d = path.parent
    names = sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())
    slug = "clef2024-file-gemma3-270m-world-imported"
    assert names == sorted([
        "report.md", "report.html", "metrics.json", "figures/headline.png", "figures/decide-or-review.png",
        "figures/drift.png",
        f"figures/{slug}--f1_vs_k.png", f"figures/{slug}--f1_vs_L.png",
        f"figures/{slug}--reliability.png", f"figures/{slug}--histograms.png",
        f"figures/{slug}--coverage_vs_width.png", f"plots/coverage_vs_width/{slug}.csv",
        f"plots/f1_vs_k/{slug}.csv", f"plots/f1_vs_L/{slug}.csv"])
    md = path.read_text()
    for png in (p for p in names if p.endswith(".png")):
        assert f"]({png})" in md


def test_headline_leads_and_the_rest_is_folded(world, engine):
    """The headline's table and figure come first; everything after them is folded."""
    w, path = world
    md = path.read_text()
    head, rest = md.split("<details>", 1)
    assert head.index("| dataset | method |") < head.index("](figures/headline.png)")
    rows = table(md, HEADLINE)
    assert [r[1:4] for r in rows] == [["**recommended**", *rows[1][2:4]],
                                      ["NN-PPI, z interval", "file:gemma3-270m-world", "imported score, T = 0.8"],
                                      ["raw score ≥ 0.5", "file:gemma3-270m-world", "imported score, T = 0.8"],
                                      ["kNN label mean ≥ 0.5", "—", "—"]]
    with engine.connect() as conn:
        stored = load_metrics(conn, w.runs[10])
        (cid,) = latest_comparisons(conn, [w.runs[10]])
        compared = {(r["family"], r["method"], r["k"], r["metric"], r["class"]): r["value"]
                    for r in comparison_rows(conn, [cid])}
    # NN-PPI: the k = 10 run's stored figures, its ROC AUC the comparison's; the paper's figures are
    # for verbalised scores only
    assert rows[1][4:] == ["10", fmt(stored[("nnppi", "f1", "1")]), fmt(stored[("nnppi", "weighted_f1", "all")]),
                           "—", fmt(compared[("correction", "paper", 10, "roc_auc", "all")]),
                           fmt(stored[("nnppi", "coverage", "0")]), fmt(stored[("nnppi", "coverage", "1")])]
    assert "—" not in rows[0][4:7] + rows[0][8:]  # the recommended row is filled (the paper has no figure)
    assert not re.search(r"\b[0-9a-f]{8,}\b", head)  # settings in words, never a parameters hash
    assert "## Summary" in rest and "## Methods compared" in rest
    assert md.count("<details>") == 6  # every run, the data, decide or review, drift, the group, the methods compared


def test_html_renders_with_every_plot_in_chromium(world, tmp_path):
    """At 1280 px wide, the headline table and its figure lie on the first screen (above 800 px)."""
    _, path = world
    html = (path.parent / "report.html").read_text()
    assert "<img" in html and 'src="figures/' not in html  # self-contained: embedded, not linked
    assert html.count('src="data:image/png;base64,') == 8
    dom, geo = in_chromium(path.parent / "report.html", tmp_path)
    body = re.search(r"<body[^>]*>", dom)
    assert body and 'data-plots-total="8"' in body.group(0) and 'data-plots-loaded="8"' in body.group(0)
    assert "Ablation: calibration-set size |L|" in dom
    assert_headline_on_first_screen(geo)








def test_rerender_is_byte_identical(world, engine, use_db, tmp_path, capsys):
    w, path = world
    d = path.parent
    with engine.connect() as conn:
        stored = conn.execute(text("SELECT markdown FROM reports WHERE name = 'report-world'")).scalar_one()
    assert path.read_text(encoding="utf-8") == stored
    # a later label correction of a target must not change the old run's report
    with engine.begin() as conn:
        store.append_labels(conn, [w.claim_ids[120]], [1 - store.current_labels(conn, [w.claim_ids[120]])
                                                        [w.claim_ids[120]]], "report-test:correction")
    assert main(["report", "report-world"]) == 0
    assert capsys.readouterr().out == stored
    assert main(["report", "report-world", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    again = tmp_path / "report-world"
    for p in d.rglob("*"):
        if p.is_file():
            assert (again / p.relative_to(d)).read_bytes() == p.read_bytes(), p.name
    assert main(["report", "report-world", "--html"]) == 0
    assert capsys.readouterr().out == (d / "report.html").read_text(encoding="utf-8")


def test_dvc_reads_the_stored_numbers(world, engine, tmp_path):
    w, path = world
    from checkworthy.data.versioning import dvc_env

    repo = tmp_path / "repo"
    shutil.copytree(path.parent, repo / "reports" / "report-world")
    # the project's own metrics and plots declarations, pointed at this report
    project = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))
    declared = {key: project[key] for key in ("metrics", "plots")}
    (repo / "dvc.yaml").write_text(
        yaml.safe_dump(declared).replace(f"reports/{DVC_REPORT}/", "reports/report-world/"))
    dvc = str(Path(__import__("sys").executable).parent / "dvc")
    env = dvc_env() | {"DVC_SITE_CACHE_DIR": str(tmp_path / "site")}
    subprocess.run([dvc, "init", "--no-scm", "-q"], cwd=repo, check=True, env=env)
    shown = json.loads(subprocess.run([dvc, "metrics", "show", "--json"], cwd=repo, check=True, env=env,
                                      capture_output=True, text=True).stdout)
    data = shown[""]["data"]["reports/report-world/metrics.json"]["data"]
    group = data["clef2024-file-gemma3-270m-world-imported"]
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT r.k, e.method, e.metric, e.class AS cls, e.value "
                                 "FROM evaluation_metrics e JOIN calibration_runs r ON r.id = e.run_id "
                                 "WHERE r.id = ANY(:r)"),
                            {"r": list(w.runs.values())}).all()
        ksweep = {(r.k, r.method): r.value for r in conn.execute(text(
            "SELECT am.k, am.method, am.value FROM analysis_metrics am JOIN report_analyses ra "
            "ON ra.id = am.analysis_id WHERE ra.analysis = 'k_sweep' AND am.run_id = ANY(:r) "
            "AND am.metric = 'weighted_f1'"), {"r": list(w.runs.values())})}
    assert len(rows) > 60
    for r in rows:
        name = r.metric if r.cls == "all" else f"{r.metric}_{r.cls}"
        assert group[f"k{r.k}"][r.method][name] == pytest.approx(r.value, abs=0, rel=0)
    assert group["k5"]["nnppi"]["paper_weighted_f1"] == 0.827
    plotted = json.loads(subprocess.run([dvc, "plots", "show", "--json"], cwd=repo, check=True, env=env,
                                        capture_output=True, text=True).stdout)["data"]
    values = plotted["reports/report-world/plots/f1_vs_k/clef2024-file-gemma3-270m-world-imported.csv"][0]
    points = {(int(v["k"]), v["field"]): float(v["dvc_inferred_y_value"])
              for v in values["content"]["data"]["values"]}
    assert points == pytest.approx(ksweep) and len(points) == 15


def test_report_of_a_single_calibration_run(world, use_db, tmp_path, capsys):
    w, _ = world
    rid = w.runs[5]
    assert main(["report", f"run:{rid}", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert f"runs-{rid}" in printed and (tmp_path / f"runs-{rid}" / "report.html").exists()
    assert main(["report", f"run:{rid}"]) == 0  # now stored: re-rendered, no new analyses
    md = capsys.readouterr().out
    assert f"k=5: run {rid}" in md and "Ablation: calibration-set size |L|" in md


def test_options_from_params_yaml():
    o = AnalysisOptions.from_params({"sizes": [100, 200], "seeds": [1], "k_big": 50, "analyse": True})
    assert o.sizes == (100, 200) and o.seeds == (1,) and o.k_big == 50 and o.size_ks == (3, 5, 10)
    assert AnalysisOptions.from_params(None) == AnalysisOptions()


def test_unknown_report_is_an_error(use_db, capsys):
    assert main(["report", "no-such-report"]) == 2
    assert "no stored report" in capsys.readouterr().err


def test_artifact_is_a_no_op_outside_a_flow(tmp_path):
    assert publish_artifact(tmp_path, "x", "summary") is None


def test_artifact_inside_a_flow_links_the_page(monkeypatch, tmp_path):
    """The Prefect calls, with a run context faked (a real flow needs a Prefect API: see the slow test)."""
    import prefect.artifacts
    import prefect.context

    calls = []
    monkeypatch.setattr(prefect.context.FlowRunContext, "get", classmethod(lambda cls: object()))
    monkeypatch.setattr(prefect.artifacts, "create_link_artifact", lambda **kw: calls.append(("link", kw)))
    monkeypatch.setattr(prefect.artifacts, "create_markdown_artifact", lambda **kw: calls.append(("md", kw)))
    link = publish_artifact(tmp_path / "Run 1", "Run 1", "| a |\n|---|\n| 1 |\n")
    assert link == (tmp_path / "Run 1" / "report.html").resolve().as_uri()
    assert calls[0][0] == "link" and calls[0][1]["key"] == "report-run-1" and calls[0][1]["link"] == link
    assert calls[1][0] == "md" and "| 1 |" in calls[1][1]["markdown"]
    monkeypatch.setenv("CHECKWORTHY_REPORTS_URL", "https://reports.example/cw/")
    assert publish_artifact(tmp_path, "Run 1") == "https://reports.example/cw/Run 1/report.html"


@pytest.mark.slow
def test_artifact_in_a_real_prefect_flow(tmp_path):
    import asyncio

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.testing.utilities import prefect_test_harness

    @flow
    def publish() -> str | None:
        return publish_artifact(tmp_path, "flow-report", "| a |\n|---|\n| 1 |\n")

    async def artifacts():
        async with get_client() as client:
            return await client.read_artifacts()

    with prefect_test_harness(server_startup_timeout=180):
        link = publish()
        found = {a.key: a for a in asyncio.run(artifacts())}
    assert link and found["report-flow-report"].type == "markdown"
    assert link in found["report-flow-report"].data
    assert "| 1 |" in found["report-flow-report-summary"].data
