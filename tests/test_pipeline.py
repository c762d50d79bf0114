"""The main job end to end on the real parts: real Gemma 3 270M, MiniLM, Postgres, DVC data.

``--limit`` keeps 16 claims of each split, so the whole path (load with defect reports,
split, store, embed, score both kinds, SQL kNN for k in {3, 5, 10}, metrics, report) runs on
a handful of claims.
"""

import json

import pytest
from sqlalchemy import text

from checkworthy.cli.main import main
from checkworthy.store.audit import table_counts

pytestmark = pytest.mark.slow

LIMIT = 16


@pytest.fixture(scope="module")
def first_run(db_url, engine, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("DATABASE_URL", db_url)
    reports = tmp_path_factory.mktemp("reports")
    yield reports
    mp.undo()


def test_main_job_prints_table_and_stores_everything(first_run, engine, capsys, monkeypatch, db_url):
    monkeypatch.setenv("DATABASE_URL", db_url)
    assert main(["run", "--limit", str(LIMIT), "--name", "smoke", "--reports-dir", str(first_run)]) == 0
    out = capsys.readouterr().out
    assert "Baseline wF1 (paper)" in out
    for dataset in ("claimbuster", "clef2024"):
        for kind in ("verbalised", "token_prob"):
            assert f"embedded:gemma3-270m / {kind}" in out
        assert dataset in out
    assert "(0.114)" in out and "(0.827)" in out  # the paper's figures beside ours
    assert "glued" in out.lower() or "split" in out.lower()  # the CLEF defect report was shown
    report = (first_run / "smoke" / "report.md").read_text()
    assert "## claimbuster" in report and "## clef2024" in report
    # the paper's pass comes first: its table is shown (and written) before the other models are
    # scored; the ablation's T = 0.1 answers were sampled in the paper's forward passes
    first, rest = out.split("first table", 1)
    assert "embedded:gemma3-270m (T=0.1): " in first and "classifier:" not in first
    table = rest.split("\n\n", 1)[0]
    rows = [ln for ln in table.splitlines() if ln.startswith(("claimbuster", "clef2024"))]
    assert len(rows) == 2 * 2 * 3 and all("embedded:gemma3-270m /" in r and "T=0.8" in r for r in rows)
    assert (first_run / "smoke.first-table.txt").read_text().splitlines()[2:] == rows
    assert "embedded:gemma3-270m: 0 texts scored now" in rest  # the ablation's own pass: all stored
    assert "classifier:minilm-lr: " in rest
    with engine.connect() as conn:
        runs = conn.execute(text(
            "SELECT target, score_kind, k, status FROM calibration_runs r JOIN label_sets l "
            "ON l.id = r.label_set_id WHERE l.name LIKE '%limit=16'")).all()
        assert {(r.target, r.score_kind, r.k) for r in runs} == {
            (f"{d}:test", kind, k) for d in ("claimbuster", "clef2024")
            for kind in ("verbalised", "token_prob", "paper_c", "p_positive")  # Gemma, classifier
            for k in (3, 5, 10)}
        assert {r.status for r in runs} == {"complete"}
        first_pass = conn.execute(text(
            "SELECT r.id, r.params_hash = (SELECT params_hash FROM predictions p JOIN models m ON m.id = p.model_id "
            "  WHERE m.spec = 'embedded:gemma3-270m' AND p.params->>'temperature' = '0.8' LIMIT 1) AS paper "
            "FROM calibration_runs r JOIN label_sets l ON l.id = r.label_set_id WHERE l.name LIKE '%limit=16' "
            "ORDER BY r.id")).all()
        assert [r.paper for r in first_pass] == [True] * 12 + [False] * (len(first_pass) - 12)  # calibrated first
        preds = conn.execute(text(
            "SELECT parse_status, count(*) FROM predictions p JOIN models m ON m.id = p.model_id "
            "WHERE m.spec = 'embedded:gemma3-270m' GROUP BY 1")).all()
        assert sum(n for _, n in preds) >= 4 * LIMIT  # every text scored, both kinds
        # a token-probability score is the expected value of the stored distribution over its digits
        token = conn.execute(text(
            "SELECT p.score, p.raw_output FROM predictions p JOIN models m ON m.id = p.model_id "
            "WHERE m.spec = 'embedded:gemma3-270m' AND p.score_kind = 'token_prob' AND p.score IS NOT NULL")).all()
        assert len(token) >= LIMIT
        for score, raw in token:
            d = json.loads(raw)
            tenths = sum((i / 10 + 0.05) * p for i, p in enumerate(d["d"]))
            assert score == pytest.approx((d["p1"] + d["p0"] * tenths) / (d["p0"] + d["p1"]), abs=1e-4)
        stored = conn.execute(text("SELECT count(*) FROM reports WHERE name = 'smoke'")).scalar()
        assert stored == 1


def temperature_rows(md: str) -> list[dict[str, str]]:
    """Every row of the report's "Ablation: temperature" tables, by column."""
    rows = []
    for part in md.split("### Ablation: temperature")[1:]:
        lines = [ln for ln in part.split("\n#", 1)[0].splitlines() if ln.startswith("|")]
        head = [c.strip() for c in lines[0].strip("|").split("|")] if lines else []
        rows += [dict(zip(head, (c.strip() for c in ln.strip("|").split("|")), strict=True)) for ln in lines[2:]]
    return rows


def test_the_two_gemma_passes_are_the_papers_and_the_ablations_temperature(first_run, engine):
    """Each ``models:`` entry is its own pass: the paper's T = 0.8 and the ablation's T = 0.1 are two
    stored score sets, and the report's temperature table compares the two, not a pass with itself."""
    with engine.connect() as conn:
        passes = dict(conn.execute(text(
            "SELECT DISTINCT p.params->>'temperature', p.params_hash FROM predictions p "
            "JOIN models m ON m.id = p.model_id WHERE m.spec = 'embedded:gemma3-270m'")).all())
        assert sorted(passes) == ["0.1", "0.8"]
        differ = conn.execute(text(
            "SELECT count(*) FROM predictions a JOIN predictions b USING (text_hash, model_id, score_kind) "
            "WHERE a.params_hash = :a AND b.params_hash = :b AND a.score_kind = 'verbalised' "
            "AND a.score IS DISTINCT FROM b.score"), {"a": passes["0.8"], "b": passes["0.1"]}).scalar_one()
        assert differ > 0
        rows = temperature_rows((first_run / "smoke" / "report.md").read_text())
        pairs = {}
        for r in rows:
            pairs.setdefault(r["k"], {}).setdefault(r["temperature"].split()[0], set()).add(int(r["run"]))
        compared = [p for p in pairs.values() if {"T=0.8", "T=0.1"} <= set(p)]
        assert compared, rows
        for p in compared:  # two runs over two score sets: the runs' scores differ somewhere
            t08, t01 = sorted(p["T=0.8"]), sorted(p["T=0.1"])
            assert not set(t08) & set(t01)
        run_ids = [r for p in compared for r in p["T=0.8"] | p["T=0.1"]]
        hashes = dict(conn.execute(text("SELECT id, params_hash FROM calibration_runs WHERE id = ANY(:r)"),
                                   {"r": run_ids}).all())
        for p in compared:
            assert {hashes[r] for r in p["T=0.8"]} == {passes["0.8"]}
            assert {hashes[r] for r in p["T=0.1"]} == {passes["0.1"]}


def test_second_run_reuses_scores_embeddings_and_runs(first_run, engine, capsys, monkeypatch, db_url):
    monkeypatch.setenv("DATABASE_URL", db_url)
    before = table_counts(engine)
    assert main(["run", "--limit", str(LIMIT), "--name", "smoke2", "--reports-dir", str(first_run)]) == 0
    out = capsys.readouterr().out
    assert "0 texts scored now" in out
    after = table_counts(engine)
    for table in ("texts", "claims", "labels", "embeddings", "predictions", "calibration_runs",
                  "calibrated_results"):
        assert after[table] == before[table], table
    assert (first_run / "smoke" / "report.md").read_text().split("\n", 1)[1] == \
        (first_run / "smoke2" / "report.md").read_text().split("\n", 1)[1]
