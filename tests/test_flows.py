"""The Prefect flows under Prefect's test harness (one per session), on real CLEF 2024 claims.

Scores are imported (``file:`` model spec: a CSV a weak model could have produced), embeddings are
real MiniLM vectors, the store is the session's embedded Postgres, DVC runs for real in a scratch
git repository (the project's own data.dvc and dvcstore are never touched).
"""

from __future__ import annotations

import csv
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from sqlalchemy import text

from checkworthy import labels, store
from checkworthy.calibrate import load_results
from checkworthy.datasets import load_clef, normalise_text
from checkworthy.scorers.base import OK, Score
from checkworthy.scorers.registry import prompt_info
from tests.conftest import ROOT, raw_path
from tests.test_recalibrate import assert_equals_full, truly_affected

sys.path.insert(0, str(ROOT))
SEED = 3003  # a lineage of its own: clef2024:calibration:seed=3003


def text_score(t: str) -> float:
    """A weak model's score: numbers look check-worthy, plus text-hash noise (one score per text)."""
    u = int(hashlib.sha256(t.encode()).hexdigest()[:8], 16) / 2**32
    return round(float(np.clip(0.25 + 0.35 * any(ch.isdigit() for ch in t) + 0.4 * u, 0, 1)), 4)


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture(scope="session")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="module")
def flows(harness):
    import flows.pipeline as fp

    return fp


@pytest.fixture(scope="module")
def setup(tmp_path_factory, db_url):
    """Imported scores for every CLEF text, a params file, and a scratch git + DVC repository."""
    tmp = tmp_path_factory.mktemp("flows")
    texts: dict[str, str] = {}
    for split, name in (("train", "CT24_checkworthy_english_train.tsv"),
                        ("dev", "CT24_checkworthy_english_dev.tsv"),
                        ("dev-test", "CT24_checkworthy_english_dev-test.tsv")):
        for c in load_clef(raw_path("clef2024", name), split)[0]:
            texts.setdefault(c.text, f"{split}:{c.source_id}")
    scores = tmp / "scores.csv"
    with open(scores, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "score"])
        w.writerows([i, t, text_score(t)] for t, i in texts.items())
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params.update(seed=SEED, datasets=["clef2024"], k=[3, 5], models=[{"spec": f"file:{scores}"}],
                  sampling={"clef2024": {"n_per_class": 40}}, scoring={"chunk_size": 1000},
                  validation={"min_rows": 20, "max_rows": 100_000, "positive_rate": [0.2, 0.8]})
    params_path = tmp / "params.yaml"
    params_path.write_text(yaml.safe_dump(params))
    repo = tmp / "repo"
    (repo / "data" / "labels").mkdir(parents=True)
    (repo / "data" / "labels" / "README.md").write_text("label updates\n")
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.org")
    git(repo, "config", "user.name", "t")
    labels.dvc_in(repo, "init", "-q")
    labels.dvc_in(repo, "config", "core.analytics", "false")
    labels.dvc_in(repo, "remote", "add", "-d", "local", str(tmp / "dvcstore"))
    labels.dvc_in(repo, "add", "-q", "data")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "data v1")
    return {"tmp": tmp, "params": str(params_path), "repo": repo, "db_url": db_url, "scores": scores}


@pytest.fixture(scope="module")
def first_run(flows, setup, engine):
    return flows.pipeline_flow(params_path=setup["params"], db_url=setup["db_url"], repo=str(ROOT),
                               commit_data=False,
                               metrics_file=str(setup["tmp"] / "metrics" / "evaluation.json"))


def lineage() -> str:
    return f"clef2024:calibration:seed={SEED}"


def test_pipeline_flow_runs_every_step_and_records_provenance(flows, setup, engine, first_run):
    out = first_run
    assert [v["success"] for v in out["validations"]] == [True]
    assert len(out["runs"]) == 2 and {r["k"] for r in out["runs"]} == {3, 5}
    assert {r["mode"] for r in out["runs"]} <= {"full", "reused"}
    metrics = yaml.safe_load((setup["tmp"] / "metrics" / "evaluation.json").read_text())
    assert metrics["clef2024:test"]
    with engine.connect() as conn:
        runs = conn.execute(text("SELECT id, flow_run_id, data_version_id, status, params "
                                 "FROM calibration_runs WHERE id = ANY(:i)"),
                            {"i": out["run_ids"]}).mappings().all()
        flow_run = runs[0]["flow_run_id"]
        assert flow_run and all(r["flow_run_id"] == flow_run and r["status"] == "complete" for r in runs)
        assert all(r["data_version_id"] == out["data_version_id"] for r in runs)
        vid = out["validations"][0]["validation_run_id"]
        assert all(r["params"]["validation_run_id"] == vid for r in runs)
        # the run's data version (DVC hash + git revision) is attached to the flow run
        dv = conn.execute(text("""SELECT d.dvc_hash, d.git_rev FROM flow_run_data_versions f
                                  JOIN data_versions d ON d.id = f.data_version_id
                                  WHERE f.flow_run_id = :f"""),
                          {"f": flow_run}).one()
        assert dv.dvc_hash == labels.data_hash(ROOT)
        for table in ("predictions", "validation_runs", "label_set_versions", "target_claims"):
            n = conn.execute(text(f"SELECT count(*) FROM {table} WHERE flow_run_id = :f"),
                             {"f": flow_run}).scalar()
            assert n > 0, table
    again = flows.pipeline_flow(params_path=setup["params"], db_url=setup["db_url"], repo=str(ROOT),
                                commit_data=False)
    assert {r["mode"] for r in again["runs"]} == {"reused"}
    assert again["run_ids"] == out["run_ids"]


def test_label_change_end_to_end(flows, setup, engine, first_run):
    """Add and correct labels -> new DVC + label-set version -> event -> incremental recalibration."""
    repo, db = setup["repo"], setup["db_url"]
    with engine.connect() as conn:
        head0 = labels.lineage_head(conn, lineage())
        members = store.label_set_claims(conn, head0)
        in_set = {r.source_id for r in conn.execute(
            text("SELECT source_id FROM claims WHERE id = ANY(:i)"), {"i": members})}
        flips = conn.execute(text("SELECT c.source_id, cl.label FROM claims c JOIN current_labels cl "
                                  "ON cl.claim_id = c.id WHERE c.id = ANY(:i) ORDER BY c.id LIMIT 3"),
                             {"i": members}).all()
    train, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_train.tsv"), "train")
    dev_texts = {normalise_text(c.text) for c in load_clef(raw_path("clef2024",
                 "CT24_checkworthy_english_dev-test.tsv"), "dev-test")[0]}
    fresh = [c for c in train[5000:] if c.source_id not in in_set and normalise_text(c.text) not in dev_texts]
    new = [c for c in fresh if c.label == 1][:8] + [c for c in fresh if c.label == 0][:8]
    csv_path = setup["tmp"] / "update-1.csv"
    with open(csv_path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "dataset", "label", "source"])  # no text: it comes from the raw dataset
        w.writerows([c.source_id, "clef2024", c.label, "annotator:ann"] for c in new)
        w.writerows([f.source_id, "clef2024", 1 - f.label, "annotator:bob"] for f in flips)
    hash0 = labels.data_hash(repo)

    out = flows.label_update_flow(files=[str(csv_path)], repo=str(repo), db_url=db,
                                  params_path=setup["params"])
    (upd,) = out["updates"]
    assert upd["status"] == "applied" and upd["n_appended"] == len(new) + len(flips)
    head1 = upd["new_heads"][lineage()]
    assert head1 != head0 and upd["event_id"]
    # a new data version: the file is in data/labels/ of the repo, data.dvc moved, the remote has it
    assert (repo / "data" / "labels" / csv_path.name).exists() and labels.data_hash(repo) != hash0
    labels.dvc_in(repo, "status", "-c", "-q")  # nothing missing from the remote
    with engine.connect() as conn:
        log = labels.version_log(conn, lineage())
        assert [v["label_set_id"] for v in log][-2:] == [head0, head1]
        assert log[-1]["dvc_hash"] == labels.data_hash(repo) and log[-1]["update_id"] == upd["update_id"]
        assert log[-1]["flow_run_id"]
        old = labels.reconstruct_label_set(conn, head0)
        assert {k: v for k, v in old.items() if k in members} == old  # history rebuilds version 0
    assert _event_stored(upd["event_id"])

    # the event's deployment runs the recalibrate flow; here it is called as the trigger would
    parents = {r["k"]: r["run_id"] for r in first_run["runs"]}
    recal = flows.recalibrate_flow([lineage()], db, str(repo), setup["params"])
    assert recal["skipped"] == [] and len(recal["runs"]) == 2
    for r in recal["runs"]:
        assert r["mode"] == "incremental"
        assert r["changes"] == {"added": len(new), "removed": 0, "changed": len(flips)}
        with engine.connect() as conn:
            run = conn.execute(text("SELECT * FROM calibration_runs WHERE id = :i"),
                               {"i": r["run_id"]}).mappings().one()
            old_res = {x["claim_id"]: x for x in load_results(conn, parents[run["k"]])}
            claim_ids = labels.target_claim_ids(conn, lineage())["clef2024:test"]
        assert run["parent_run_id"] == parents[run["k"]] and run["label_set_id"] == head1
        from checkworthy.calibrate import RunSpec

        spec = RunSpec(run["target"], tuple(claim_ids), head1,
                       store.ScoreKey(run["model_id"], run["prompt_version"], run["params_hash"],
                                      run["score_kind"]),
                       run["k"], run["alpha"], run["threshold"], run["interval_method"])
        new_res = assert_equals_full(engine, spec, r["run_id"])
        with engine.connect() as conn:
            flipped = set(conn.execute(
                text("SELECT id FROM claims WHERE dataset = 'clef2024' AND source_id = ANY(:s)"),
                {"s": [f.source_id for f in flips]}).scalars())
            recomputed = set(conn.execute(text("SELECT claim_id FROM calibrated_results WHERE run_id = :r "
                                               "AND computed_in_run IS NULL"), {"r": r["run_id"]}).scalars())
        assert recomputed == truly_affected(old_res, new_res, flipped)
        assert 0 < len(recomputed) < len(new_res)


def _event_stored(event_id: str) -> bool:
    """The event reached the Prefect server (it is persisted asynchronously: poll briefly)."""
    import time

    from prefect.client.orchestration import get_client
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all()
    for _ in range(30):
        with get_client(sync_client=True) as client:
            got = client._client.post("/events/filter", json={
                "filter": {"event": {"prefix": ["checkworthy."]}}, "limit": 50}).json()
        if event_id in {e["id"] for e in got.get("events", [])}:
            return True
        time.sleep(0.5)
    return False


def test_failing_validation_keeps_the_calibration_in_force(flows, setup, engine, first_run):
    """A head that leaks a test sentence (a real CLEF train/dev-test duplicate) is not calibrated."""
    db = setup["db_url"]
    train, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_train.tsv"), "train")
    leak = next(c for c in train if c.source_id == "7316")  # "I'll give you an example." is in dev-test
    with engine.begin() as conn:
        before = {r["id"] for r in flows.recalibrate.runs_in_force(conn, lineage())}
        head = labels.lineage_head(conn, lineage())
        (leak_id,) = store.store_claims_with_labels(
            conn, [store.NewClaim("clef2024", "train", leak.source_id, leak.text, leak.label)], "test")
        bad = store.create_label_set(conn, lineage(), store.label_set_claims(conn, head) + [leak_id])
        labels.set_head(conn, lineage(), bad, "test: leaked sentence")
    try:
        out = flows.recalibrate_flow([lineage()], db, str(ROOT), setup["params"])
        assert out["skipped"] == [lineage()] and out["runs"] == []
        (verdict,) = out["validations"]
        assert verdict["failures"] == ["no_leakage"]
        with engine.connect() as conn:
            row = conn.execute(text("SELECT * FROM audit_validations WHERE validation_run_id = :v AND "
                                    "check_name = 'no_leakage'"),
                               {"v": verdict["validation_run_id"]}).mappings().one()
            assert not row["success"] and row["unexpected_claim_ids"] == [leak_id]
            assert {r["id"] for r in flows.recalibrate.runs_in_force(conn, lineage())} == before
    finally:
        with engine.begin() as conn:
            labels.set_head(conn, lineage(), head, "test: revert")


def test_guideline_edit_rescores_under_the_new_prompt(flows, setup, engine, first_run):
    """Editing the guidelines makes a new version and, through its event, a rescoring + recalibration."""
    class GuidedScorer:
        score_kinds = ("verbalised",)

        def __init__(self, spec, guidelines):
            self.spec, self.version = spec, prompt_info(guidelines)[0]

        def params(self):
            return {"backend": "test", "prompt_version": self.version}

        def score(self, texts):
            shift = int(self.version[-2:], 16) / 2550  # the prompt moves every score a little
            return [{"verbalised": Score(min(1.0, text_score(t) + shift), OK, "x")} for t in texts]

    flows.SCORER_FACTORIES["guided"] = lambda spec, **o: (GuidedScorer(spec, o["guidelines"]),
                                                         prompt_info(o["guidelines"]))
    params = yaml.safe_load(Path(setup["params"]).read_text()) | {"models": [{"spec": "guided:v"}], "k": [5]}
    params_path = setup["tmp"] / "params-guided.yaml"
    params_path.write_text(yaml.safe_dump(params))
    guide = setup["tmp"] / "guidelines.yaml"
    shutil.copy(ROOT / "src" / "checkworthy" / "guidelines" / "checkworthiness.yaml", guide)
    repo, db = str(setup["repo"]), setup["db_url"]
    base = flows.guidelines_update_flow(str(guide), repo, db, str(params_path))
    assert base["new"] and base["baseline"] and base["event_id"] is None  # the first version is the baseline
    first = flows.rescore_flow(str(guide), db, repo, str(params_path), label_set_names=[lineage()])
    guide.write_text(guide.read_text().replace("impartial fact-checker", "careful, impartial fact-checker"))
    edit = flows.guidelines_update_flow(str(guide), repo, db, str(params_path))
    assert edit["new"] and not edit["baseline"] and edit["event_id"] and edit["version"] != base["version"]
    assert (setup["repo"] / "data" / "guidelines" / f"checkworthiness-{edit['version']}.yaml").exists()
    again = flows.guidelines_update_flow(str(guide), repo, db, str(params_path))
    assert not again["new"]  # the same edit is one version, one event
    second = flows.rescore_flow(str(guide), db, repo, str(params_path), label_set_names=[lineage()])
    with engine.connect() as conn:
        pv = conn.execute(text("SELECT DISTINCT prompt_version FROM calibration_runs WHERE id = ANY(:i)"),
                          {"i": [r["run_id"] for r in second["runs"]]}).scalars().all()
        assert pv == [edit["version"]]
        assert conn.execute(text("SELECT guidelines FROM prompt_versions WHERE id = :v"),
                            {"v": edit["version"]}).scalar() == guide.read_text()
    assert all(r["mode"] == "full" for r in second["runs"])  # a new prompt: every score changed
    assert {r["run_id"] for r in first["runs"]}.isdisjoint(r["run_id"] for r in second["runs"])


def test_newly_arrived_claims_are_scored_and_calibrated_incrementally(flows, setup, engine, first_run):
    repo, db = setup["repo"], setup["db_url"]
    dev, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev.tsv"), "dev")
    incoming = repo / "data" / "incoming"
    incoming.mkdir(exist_ok=True)

    def arrive(name, claims):
        with open(incoming / name, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "dataset", "text"])
            w.writerows([f"dev:{c.source_id}", "clef2024", c.text] for c in claims)

    arrive("batch-1.csv", dev[:12])
    one = flows.score_new_claims_flow(db, str(repo), setup["params"], [lineage()])
    assert len(one["ingested"]["clef2024:incoming"]) == 12
    modes = {(r["target"], r["mode"]) for r in one["runs"]}
    assert ("clef2024:incoming", "full") in modes and ("clef2024:test", "full") not in modes
    arrive("batch-2.csv", dev[12:17])
    two = flows.score_new_claims_flow(db, str(repo), setup["params"], [lineage()])
    inc = [r for r in two["runs"] if r["target"] == "clef2024:incoming"]
    assert inc and all((r["mode"], r["n_recomputed"], r["n_copied"]) == ("incremental", 5, 12) for r in inc)
    nothing_new = flows.score_new_claims_flow(db, str(repo), setup["params"], [lineage()])
    assert nothing_new["runs"] == []
