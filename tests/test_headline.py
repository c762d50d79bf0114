"""The report's headline on a small stored world shaped like the main job's runs.

Two datasets (ClaimBuster and CLEF 2024 claims, their own labels, real MiniLM embeddings, real
Postgres), one model whose scores are imported under two sampling temperatures: a verbalised
score that differs between T = 0.8 and T = 0.1, and a token probability that does not (as
Gemma's, read before anything is sampled). k = 10; the token-probability and the paper's
(verbalised, T = 0.8) runs of each dataset are compared (every method), as the main job does.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from scipy.special import expit

from checkworthy.data.datasets import load_claimbuster, load_clef
from checkworthy.report.files import write_report_dir
from checkworthy.report.headline import HEADER
from checkworthy.report.render import HEADLINE, build
from checkworthy.runs.calibration_run import run_calibration
from checkworthy.runs.comparisons import ensure_comparison, latest_comparisons
from checkworthy.runs.embedding import ensure_embeddings
from checkworthy.runs.predict import Recommended
from checkworthy.scorers.base import OK, Score
from checkworthy.store import rows as store
from checkworthy.store.comparisons import comparison_rows
from checkworthy.store.metrics import load_metrics
from checkworthy.store.run_spec import RunContext, RunMethods, RunSpec
from checkworthy.testing.datasets import raw_path
from checkworthy.testing.pages import assert_headline_on_first_screen, in_chromium, section, table

MODEL = "file:gemma3-270m-headline"  # Gemma 3 270M to the paper's tables, whatever the backend
REC = Recommended(model="embedded:gemma3-270m", score_kind="token_prob", correction="head-cv",
                  interval="mondrian", k=10)
N_LAB, N_TARGETS = 60, 30
HEX = re.compile(r"\b[0-9a-f]{8,}\b")  # what a parameters hash looks like


def _balanced(claims, n, seed):
    rng = np.random.default_rng(seed)
    pos = [c for c in claims if c.label == 1]
    neg = [c for c in claims if c.label == 0]
    picked = [pos[i] for i in rng.choice(len(pos), n // 2, replace=False)]
    picked += [neg[i] for i in rng.choice(len(neg), n - n // 2, replace=False)]
    return [picked[i] for i in rng.permutation(n)]


@pytest.fixture(scope="module")
def stored(engine):
    """Per dataset and (temperature, score kind): the k = 10 run id."""
    sources = {"claimbuster": load_claimbuster(raw_path("claimbuster", "crowdsourced.csv"))[0],
               "clef2024": load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev.tsv"), "dev")[0]}
    rng = np.random.default_rng(11)
    ctx = RunContext(code_rev="test-rev", flow_run_id="flow-test")
    runs: dict[tuple[str, float, str], int] = {}
    for d, (dataset, claims) in enumerate(sources.items()):
        picked = _balanced(claims, N_LAB + N_TARGETS, seed=d)
        y = np.array([c.label for c in picked])
        token = expit(-0.4 + 1.6 * y + rng.normal(0, 1.0, len(y))).round(5)  # the same at every T
        verbal = {t: np.clip(0.7 + 0.1 * y + rng.normal(0, 0.25, len(y)), 0, 1).round(1) for t in (0.8, 0.1)}
        hashes = [store.sha256_text(c.text) for c in picked]
        with engine.begin() as conn:
            ids = store.store_claims_with_labels(conn, [
                store.NewClaim(f"headline-{dataset}", "x", c.source_id, c.text, c.label) for c in picked],
                "headline-test")
            ensure_embeddings(conn, hashes)
            ls = store.create_label_set(conn, f"headline-test:{dataset}:L", ids[:N_LAB])
            model = store.ensure_model(conn, MODEL, "file")
            keys = {}
            for t in (0.8, 0.1):
                params = {"source": "headline", "temperature": t}
                store.insert_predictions(conn, model, "none", params, [
                    (h, {"verbalised": Score(float(v), OK, f"{v}"), "token_prob": Score(float(p), OK, f"{p}")})
                    for h, v, p in zip(hashes, verbal[t], token)])
                for kind in ("verbalised", "token_prob"):
                    keys[(t, kind)] = store.ScoreKey(model, "none", store.params_hash(params), kind)
        for (t, kind), key in keys.items():
            runs[(dataset, t, kind)] = run_calibration(
                engine, RunSpec(f"{dataset}:test", tuple(ids[N_LAB:]), ls, key, RunMethods(10)), ctx)
        with engine.begin() as conn:
            for kind in ("verbalised", "token_prob"):
                ensure_comparison(conn, runs[(dataset, 0.8, kind)], code_rev="test-rev")
    return runs


@pytest.fixture(scope="module")
def report(stored, engine, tmp_path_factory):
    """The report of every run (no analyses: those sections say so), written as the CLI would."""
    ids = sorted(stored.values())
    with engine.connect() as conn:
        built = build(conn, ids, "checkworthy report: headline-test", None, latest_comparisons(conn, ids), REC)
    path = write_report_dir(built, tmp_path_factory.mktemp("reports") / "headline-test")
    return built, path


def compared(engine, run_id):
    with engine.connect() as conn:
        (cid,) = latest_comparisons(conn, [run_id])
        return {(r["family"], r["method"], r["k"], r["metric"], r["class"]): r["value"]
                for r in comparison_rows(conn, [cid])}


def f3(v):
    return f"{v:.3f}"


def test_one_table_per_dataset_block_in_words(report, stored, engine):
    built, path = report
    md = path.read_text(encoding="utf-8")
    rows = table(md, HEADLINE)
    tp, verbal = "token probability", "verbalised score, T = 0.8"
    for dataset, block in (("claimbuster", rows[:6]), ("clef2024", rows[6:])):
        assert [r[:5] for r in block] == [
            [dataset, "**recommended**", MODEL, tp, "10"],
            [dataset, "NN-PPI, z interval", MODEL, verbal, "10"],
            [dataset, "NN-PPI, z interval", MODEL, tp, "10"],
            [dataset, "raw score ≥ 0.5", MODEL, verbal, "—"],
            [dataset, "raw score ≥ 0.5", MODEL, tp, "—"],
            [dataset, "kNN label mean ≥ 0.5", "—", "—", "10"]]
        # the recommended method: the comparison's embedding head with the CV choice, Mondrian around it
        idx = compared(engine, stored[(dataset, 0.8, "token_prob")])
        ((method, k),) = {(m, kk) for f, m, kk, *_ in idx if f == "head-cv"}
        assert block[0][5:] == [f3(idx[("head-cv", method, k, "f1", "1")]),
                                f3(idx[("head-cv", method, k, "weighted_f1", "all")]), "—",
                                f3(idx[("head-cv", method, k, "roc_auc", "all")]),
                                f3(idx[("interval-head", "mondrian", k, "coverage", "0")]),
                                f3(idx[("interval-head", "mondrian", k, "coverage", "1")])]
        # the paper's NN-PPI on the paper's score: the stored run, the paper's figure beside it
        run = stored[(dataset, 0.8, "verbalised")]
        with engine.connect() as conn:
            m = load_metrics(conn, run)
        paper = {"claimbuster": ("0.721", "0.114", "0.703"), "clef2024": ("0.822", "0.179", "0.809")}[dataset]
        assert block[1][5:] == [f3(m[("nnppi", "f1", "1")]), f3(m[("nnppi", "weighted_f1", "all")]), paper[0],
                                f3(compared(engine, run)[("correction", "paper", 10, "roc_auc", "all")]),
                                f3(m[("nnppi", "coverage", "0")]), f3(m[("nnppi", "coverage", "1")])]
        assert block[3][7] == paper[1] and block[5][7] == paper[2]
        assert block[3][9:] == ["—", "—"]  # a raw score has no interval
    head = md.split("<details>", 1)[0]
    assert "figures/headline.png" in head and not HEX.search(head)
    assert "**Recommended** (params.yaml `predict:`)" in head and "chose `" in head
    assert list(built.headline.records()[0]) == HEADER
    dvc = json.loads((path.parent / "metrics.json").read_text(encoding="utf-8"))["headline"]["clef2024"]
    assert f3(dvc["recommended-file-gemma3-270m-headline-token-probability"]["f1_1"]) == rows[6][5]


def test_temperature_twins_of_the_token_probability_are_shown_once(report, stored):
    _, path = report
    md = path.read_text(encoding="utf-8")
    titles = re.findall(r"^## (.+)$", md, re.M)
    for dataset in ("claimbuster", "clef2024"):
        assert sorted(t for t in titles if t.startswith(dataset)) == [
            f"{dataset} — {MODEL}, token probability", f"{dataset} — {MODEL}, verbalised score, T = 0.1",
            f"{dataset} — {MODEL}, verbalised score, T = 0.8"]
        twins = f"{stored[(dataset, 0.8, 'token_prob')]}, {stored[(dataset, 0.1, 'token_prob')]}"
        once = [r[:5] for r in table(md, "Summary") if r[0] == dataset and r[2] == "token probability"]
        assert once == [[dataset, f"`{MODEL}`", "token probability", "10", twins]]
        sentence = (f"{dataset}, `{MODEL}`, token probability: T = 0.8 and T = 0.1 give identical figures at "
                    f"every k (runs {stored[(dataset, 0.8, 'token_prob')]}; {stored[(dataset, 0.1, 'token_prob')]})"
                    ": the token probability is read from the model's next-token distribution before anything "
                    "is sampled, so the sampling temperature does not move it. They are shown once.")
        assert sentence in md.split("<details>", 1)[0] and sentence in section(md, "Summary")
    assert not any(HEX.search(t) for t in titles)


def test_headline_on_the_first_screen_of_the_html(report, tmp_path):
    _, path = report
    dom, geo = in_chromium(path.parent / "report.html", tmp_path)
    assert_headline_on_first_screen(geo)
    assert "<details" in dom and dom.index("figures/headline.png") < dom.index('<details class="toc"')
