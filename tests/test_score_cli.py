"""`checkworthy score` end to end through the real store: every spec kind, caching like the pipeline,
resuming after an outage, and nothing written for invalid input."""

from __future__ import annotations

import csv
import json
import uuid

import numpy as np
import pytest
from sqlalchemy import text

from checkworthy.cli.main import main
from checkworthy.runs import train_classifier
from checkworthy.store.audit import table_counts
from checkworthy.testing.claims import write_csv
from checkworthy.testing.fake_ollama import FakeOllama
from checkworthy.testing.fake_openai import SERVER_ERROR, FakeOpenAI


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture()
def nonce():
    """Texts unique to one test (the session's store is shared by every test); letters only, since the
    fake models score digits."""
    return "".join(chr(ord("a") + int(ch, 16)) for ch in uuid.uuid4().hex[:10])


def predictions(engine, spec):
    with engine.connect() as conn:
        return conn.execute(text(
            "SELECT p.score, p.parse_status, p.raw_output, p.params, p.usage, p.score_kind, p.prompt_version "
            "FROM predictions p JOIN models m ON m.id = p.model_id WHERE m.spec = :s"), {"s": spec}).all()


def score(*args: str) -> int:
    return main(["score", "--params", "", *args])


def test_imported_scores_end_to_end(use_db, tmp_path, nonce, capsys):
    """file: spec -> OUT has id,score,status,raw per input row (ids sharing a text share a score);
    bad cells and texts missing from the file are stored failures; a rerun scores nothing."""
    t = [f"{nonce} The deficit doubled.", f"{nonce} Hello Denver!", f"{nonce} Nobody scored this.",
         f"{nonce} Bad cell."]
    scores = write_csv(tmp_path / "scores.csv", ["id", "text", "score"],
                       [["a", t[0], "0.8"], ["b", t[1], "0.05"], ["c", t[3], "1.4"]])
    inp = write_csv(tmp_path / "in.csv", ["id", "text", "label"],
                    [["x1", t[0], 1], ["x2", t[1], 0], ["x3", t[0], 1], ["x4", t[2], 0], ["x5", t[3], 0]])
    out = tmp_path / "out.csv"
    spec = f"file:{scores}"
    assert score("--model", spec, "--input", str(inp), "--out", str(out)) == 0
    rows = read_csv(out)
    assert list(rows[0]) == ["id", "score", "status", "raw"]
    assert [(r["id"], r["score"], r["status"]) for r in rows] == [
        ("x1", "0.8", "ok"), ("x2", "0.05", "ok"), ("x3", "0.8", "ok"), ("x4", "", "error"),
        ("x5", "", "out_of_range")]
    assert rows[4]["raw"] == "1.4" and rows[3]["raw"].startswith("[missing]")
    stored = predictions(use_db, spec)
    assert len(stored) == 4 and {p.prompt_version for p in stored} == {"none"}
    assert "4 scored now, 0 reused" in capsys.readouterr().out
    assert score("--model", spec, "--input", str(inp), "--out", str(out)) == 0
    assert "0 scored now, 4 reused" in capsys.readouterr().out
    assert read_csv(out) == rows


def test_ollama_scores_are_stored_and_cached(use_db, tmp_path, nonce, capsys):
    """ollama: spec against the loopback server: scores, raw answers, token usage and parameters are
    stored; a text repeated under several ids is sent once; a rerun sends no request; a new temperature
    is a new cache key (scored again)."""
    claims = [[f"c{i}", f"{nonce} Claim {i} says {i * 7} percent." if i % 2 else f"{nonce} Claim words."]
              for i in range(5)]
    inp = write_csv(tmp_path / "in.csv", ["id", "text"], claims)
    out = tmp_path / "out.csv"
    with FakeOllama() as srv:
        base = ["--model", "ollama:gemma3:1b", "--input", str(inp), "--out", str(out),
                "--opt", f"host={srv.url}", "--opt", "backoff=0.01"]
        assert score(*base) == 0
        assert len(srv.model_requests()) == 3  # ids c0, c2, c4 share one text
        rows = read_csv(out)
        assert [r["score"] for r in rows] == ["0.1", "0.9", "0.1", "0.9", "0.1"]
        assert json.loads(rows[1]["raw"])["confidence_score"] == 0.9
        printed = capsys.readouterr().out
        assert "prompt_eval_count" in printed and "eval_count" in printed
        assert score(*base) == 0
        assert len(srv.model_requests()) == 3
        assert score(*base, "--opt", "temperature=0.1") == 0
        assert len(srv.model_requests()) == 6
    stored = predictions(use_db, "ollama:gemma3:1b")
    mine = stored
    temps = sorted({p.params["temperature"] for p in mine})
    assert temps == [0.1, 1.0]
    assert all(p.usage["prompt_eval_count"] > 0 for p in mine)
    assert all("host" not in p.params and srv.url not in json.dumps(p.params) for p in mine)
    assert {p.score_kind for p in mine} == {"verbalised"}


def test_outage_keeps_finished_chunks_and_resumes(use_db, tmp_path, nonce, capsys):
    """The server dies after the first chunk: the command fails (exit 2), the finished chunk stays
    stored, and the rerun scores only the rest."""
    inp = write_csv(tmp_path / "in.csv", ["id", "text"],
                    [[f"i{i}", f"{nonce} Statement {i}"] for i in range(6)])
    out = tmp_path / "out.csv"
    with FakeOllama() as srv:
        args = ["--model", "ollama:gemma3:4b", "--input", str(inp), "--out", str(out), "--chunk-size", "2",
                "--opt", f"host={srv.url}", "--opt", "concurrency=1", "--opt", "max_retries=1",
                "--opt", "backoff=0.01"]
        died = {"kind": "status", "status": 500, "error": "runner died"}
        srv.script({"kind": "ok"}, {"kind": "ok"}, died, died)
        assert score(*args) == 2
        assert "gave up after 2 attempts" in capsys.readouterr().err
        assert len(predictions(use_db, "ollama:gemma3:4b")) == 2
        assert not out.exists()
        n_before = len(srv.model_requests())
        assert score(*args) == 0
        assert len(srv.model_requests()) - n_before == 4
    assert "4 scored now, 2 reused" in capsys.readouterr().out
    assert len(read_csv(out)) == 6


def test_openai_usage_is_reported(use_db, tmp_path, nonce, capsys, monkeypatch):
    inp = write_csv(tmp_path / "in.csv", ["id", "text"],
                    [["1", f"{nonce} Exports rose 5%."], ["2", f"{nonce} Hi."]])
    with FakeOpenAI() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        srv.script({"kind": "status", "status": 503, "error": SERVER_ERROR, "headers": {"Retry-After": "0"}})
        assert score("--model", "openai:gpt-4o-mini", "--input", str(inp), "--out", str(tmp_path / "o.csv"),
                     "--opt", "backoff=0.01") == 0
    assert [r["score"] for r in read_csv(tmp_path / "o.csv")] == ["0.9", "0.1"]
    printed = capsys.readouterr().out
    assert "prompt_tokens" in printed and "completion_tokens" in printed
    usages = [p.usage for p in predictions(use_db, "openai:gpt-4o-mini")]
    assert sorted(u["attempts"] for u in usages)[-1] == 2 and all(u["prompt_tokens"] > 0 for u in usages)


def test_classifier_spec_writes_every_kind(use_db, tmp_path, nonce):
    rng = np.random.default_rng(0)
    manifest = {"training_data": {"fingerprint": "f", "excluded": {}},
                "score_kinds": {"paper_c": "", "p_positive": ""}}
    train_classifier.save_artefact("rand", rng.normal(size=384), 0.1, manifest, root=tmp_path)
    inp = write_csv(tmp_path / "in.csv", ["id", "text"],
                    [["1", f"{nonce} Taxes rose."], ["2", f"{nonce} Hi."]])
    out = tmp_path / "out.csv"
    assert score("--model", "classifier:rand", "--input", str(inp), "--out", str(out), "--opt",
                 f"root={tmp_path}", "--kind", "p_positive") == 0
    rows = read_csv(out)
    assert list(rows[0]) == ["id", "score", "status", "raw", "score_paper_c", "status_paper_c"]
    for r in rows:
        p, c = float(r["score"]), float(r["score_paper_c"])
        assert c == pytest.approx(max(p, 1 - p)) and c >= 0.5 and r["status_paper_c"] == "ok"


@pytest.mark.parametrize(("rows", "spec", "message"), [
    ([["1", "a"], ["1", "b"]], "file:{scores}", "duplicate id"),
    ([["1", "a"]], "nonsense:x", "unknown model spec"),
    ([["1", "a"]], "classifier:does-not-exist", "train-classifier"),
    ([["1", "a"]], "ollama:gemma3:1b", None),
])
def test_invalid_input_or_model_writes_nothing(use_db, tmp_path, capsys, rows, spec, message):
    scores = write_csv(tmp_path / "scores.csv", ["id", "text", "score"], [["1", "a", "0.5"]])
    inp = write_csv(tmp_path / "in.csv", ["id", "text"], rows)
    before = table_counts(use_db)
    extra = ["--opt", "host=127.0.0.1:9", "--opt", "max_retries=0"] if spec.startswith("ollama") else []
    assert score("--model", spec.format(scores=scores), "--input", str(inp), "--out", str(tmp_path / "o.csv"),
                 *extra) == 2
    assert table_counts(use_db) == before
    if message:
        assert message in capsys.readouterr().err
    assert not (tmp_path / "o.csv").exists()
