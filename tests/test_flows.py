"""The Prefect flows under Prefect's test harness (one per session), on real CLEF 2024 claims.

Scores are imported (``file:`` model spec: a CSV a weak model could have produced), embeddings are
real MiniLM vectors, the store is the session's embedded Postgres, DVC runs for real in a scratch
git repository (the project's own data.dvc and dvcstore are never touched).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from sqlalchemy import text

from checkworthy.config import GUIDELINES_FILE, ROOT
from checkworthy.data import versioning
from checkworthy.data.datasets import load_clef
from checkworthy.data.text import normalise_text
from checkworthy.runs.flow_types import FlowContext
from checkworthy.scorers import registry
from checkworthy.scorers.base import OK, Score
from checkworthy.scorers.registry import prompt_info
from checkworthy.store import label_updates as label_history
from checkworthy.store import lineages
from checkworthy.store import rows as store
from checkworthy.store.calibration_runs import runs_in_force
from checkworthy.testing.datasets import raw_path
from checkworthy.testing.events import event_stored
from checkworthy.testing.scratch_project import make_scratch_project, text_score
from checkworthy.testing.worlds import assert_incremental_equals_full

SEED = 3003  # a lineage of its own: clef2024:calibration:seed=3003


@pytest.fixture(scope="module")
def flows(harness):
    import checkworthy.flows.pipeline as fp

    return fp


@pytest.fixture(scope="module")
def setup(tmp_path_factory, db_url):
    """Imported scores for every CLEF text, a params file, and a scratch git + DVC repository."""
    return make_scratch_project(tmp_path_factory.mktemp("flows"), db_url, SEED)


@pytest.fixture(scope="module")
def first_run(flows, setup, engine):
    return flows.pipeline_flow(ctx=context(setup, ROOT), commit_data=False, report=flows.ReportOptions(
                                   metrics_file=str(setup["tmp"] / "metrics" / "evaluation.json")))


def lineage() -> str:
    return f"clef2024:calibration:seed={SEED}"


def context(setup, repo, params=None) -> FlowContext:
    """The flows' context: the session's store, ``repo``, the scratch project's params (or ``params``)."""
    return FlowContext(db_url=setup["db_url"], repo=str(repo), params_path=str(params or setup["params"]))


def test_pipeline_flow_runs_every_step_and_records_provenance(flows, setup, engine, first_run):
    out = first_run
    assert [v.success for v in out.validations.values()] == [True]
    assert len(out.runs) == 2 and {r.k for r in out.runs} == {3, 5}
    assert {r.mode for r in out.runs} <= {"full", "reused"}
    metrics = yaml.safe_load((setup["tmp"] / "metrics" / "evaluation.json").read_text())
    assert metrics["clef2024:test"]
    with engine.connect() as conn:
        runs = conn.execute(text("SELECT id, flow_run_id, data_version_id, status, params "
                                 "FROM calibration_runs WHERE id = ANY(:i)"),
                            {"i": out.run_ids}).mappings().all()
        flow_run = runs[0]["flow_run_id"]
        assert flow_run and all(r["flow_run_id"] == flow_run and r["status"] == "complete" for r in runs)
        assert all(r["data_version_id"] == out.data_version_id for r in runs)
        vid = next(iter(out.validations.values())).validation_run_id
        assert all(r["params"]["validation_run_id"] == vid for r in runs)
        # the run's data version (DVC hash + git revision) is attached to the flow run
        dv = conn.execute(text("""SELECT d.dvc_hash, d.git_rev FROM flow_run_data_versions f
                                  JOIN data_versions d ON d.id = f.data_version_id
                                  WHERE f.flow_run_id = :f"""),
                          {"f": flow_run}).one()
        assert dv.dvc_hash == versioning.data_hash(ROOT)
        for table in ("predictions", "validation_runs", "label_set_versions", "target_claims"):
            n = conn.execute(text(f"SELECT count(*) FROM {table} WHERE flow_run_id = :f"),
                             {"f": flow_run}).scalar()
            assert n > 0, table
    again = flows.pipeline_flow(ctx=context(setup, ROOT), commit_data=False)
    assert {r.mode for r in again.runs} == {"reused"}
    assert again.run_ids == out.run_ids


def test_pipeline_flow_writes_the_report_and_leaves_its_artifacts(flows, setup, engine, first_run, tmp_path):
    """As ``checkworthy run`` does: the flow's last task writes the report, and the flow run carries its
    link, its headline (Markdown) and the headline's rows (a table)."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    out = flows.pipeline_flow(ctx=context(setup, ROOT), commit_data=False,
                              report=flows.ReportOptions(name="flow-report", folder=str(tmp_path)))
    assert out.report == str(tmp_path / "flow-report" / "report.md")
    with engine.connect() as conn:
        flow_run = conn.execute(text("SELECT flow_run_id FROM reports WHERE name = 'flow-report'")).scalar_one()

    async def artifacts():
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run])))

    found = {a.key: a for a in asyncio.run(artifacts())}
    assert found["report-flow-report"].type == "markdown"  # Prefect shows a link artifact as Markdown
    assert (tmp_path / "flow-report" / "report.html").resolve().as_uri() in found["report-flow-report"].data
    headline = found["report-flow-report-summary"]
    assert headline.type == "markdown" and "| dataset | method | model | score | k |" in headline.data
    assert "clef2024 | **recommended**" in headline.data
    table = found["report-flow-report-headline"]
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    assert table.type == "table"
    assert [r["method"] for r in rows][:1] == ["recommended"] and rows[0]["dataset"] == "clef2024"


def test_label_change_end_to_end(flows, setup, engine, first_run):
    """Add and correct labels -> new DVC + label-set version -> event -> incremental recalibration."""
    repo, db = setup["repo"], setup["db_url"]
    with engine.connect() as conn:
        head0 = lineages.lineage_head(conn, lineage())
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
    hash0 = versioning.data_hash(repo)

    out = flows.label_update_flow(files=[str(csv_path)], repo=str(repo), db_url=db,
                                  params_path=setup["params"])
    (upd,) = out.updates
    assert upd.status == "applied" and upd.n_appended == len(new) + len(flips)
    head1 = upd.new_heads[lineage()]
    assert head1 != head0 and upd.event_id
    # a new data version: the file is in data/labels/ of the repo, data.dvc moved, the remote has it
    assert (repo / "data" / "labels" / csv_path.name).exists() and versioning.data_hash(repo) != hash0
    versioning.dvc_in(repo, "status", "-c", "-q")  # nothing missing from the remote
    with engine.connect() as conn:
        log = lineages.version_log(conn, lineage())
        assert [v["label_set_id"] for v in log][-2:] == [head0, head1]
        assert log[-1]["dvc_hash"] == versioning.data_hash(repo) and log[-1]["update_id"] == upd.update_id
        assert log[-1]["flow_run_id"]
        old = label_history.reconstruct_label_set(conn, head0)
        assert {k: v for k, v in old.items() if k in members} == old  # history rebuilds version 0
    assert event_stored(upd.event_id)

    # the event's deployment runs the recalibrate flow; here it is called as the trigger would
    parents = {r.k: r.run_id for r in first_run.runs}
    recal = flows.recalibrate_flow([lineage()], context(setup, repo))
    assert recal.skipped == [] and len(recal.runs) == 2
    with engine.connect() as conn:
        claim_ids = lineages.target_claim_ids(conn, lineage())["clef2024:test"]
        flipped = set(conn.execute(
            text("SELECT id FROM claims WHERE dataset = 'clef2024' AND source_id = ANY(:s)"),
            {"s": [f.source_id for f in flips]}).scalars())
    for r in recal.runs:
        assert r.mode == "incremental"
        assert r.changes == {"added": len(new), "removed": 0, "changed": len(flips)}
        with engine.connect() as conn:
            k = conn.execute(text("SELECT k FROM calibration_runs WHERE id = :i"), {"i": r.run_id}).scalar_one()
        assert_incremental_equals_full(engine, r.run_id, parents[k], head1, claim_ids, flipped)




def test_failing_validation_keeps_the_calibration_in_force(flows, setup, engine, first_run):
    """A head that leaks a test sentence (a real CLEF train/dev-test duplicate) is not calibrated."""
    train, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_train.tsv"), "train")
    leak = next(c for c in train if c.source_id == "7316")  # "I'll give you an example." is in dev-test
    with engine.begin() as conn:
        before = {r["id"] for r in runs_in_force(conn, lineage())}
        head = lineages.lineage_head(conn, lineage())
        (leak_id,) = store.store_claims_with_labels(
            conn, [store.NewClaim("clef2024", "train", leak.source_id, leak.text, leak.label)], "test")
        bad = store.create_label_set(conn, lineage(), store.label_set_claims(conn, head) + [leak_id])
        lineages.set_head(conn, lineage(), bad, "test: leaked sentence")
    try:
        out = flows.recalibrate_flow([lineage()], context(setup, ROOT))
        assert out.skipped == [lineage()] and out.runs == []
        (verdict,) = out.validations.values()
        assert verdict.failures == ["no_leakage"]
        with engine.connect() as conn:
            row = conn.execute(text("SELECT * FROM audit_validations WHERE validation_run_id = :v AND "
                                    "check_name = 'no_leakage'"),
                               {"v": verdict.validation_run_id}).mappings().one()
            assert not row["success"] and row["unexpected_claim_ids"] == [leak_id]
            assert {r["id"] for r in runs_in_force(conn, lineage())} == before
    finally:
        with engine.begin() as conn:
            lineages.set_head(conn, lineage(), head, "test: revert")


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

    registry.FACTORIES["guided"] = lambda spec, **o: (GuidedScorer(spec, o["guidelines"]),
                                                         prompt_info(o["guidelines"]))
    params = yaml.safe_load(Path(setup["params"]).read_text()) | {"models": [{"spec": "guided:v"}], "k": [5]}
    params_path = setup["tmp"] / "params-guided.yaml"
    params_path.write_text(yaml.safe_dump(params))
    guide = setup["tmp"] / "guidelines.yaml"
    shutil.copy(GUIDELINES_FILE, guide)
    ctx = context(setup, setup["repo"], params_path)
    base = flows.guidelines_update_flow(str(guide), ctx).change
    assert base.new and base.baseline and base.event_id is None  # the first version is the baseline
    first = flows.rescore_flow(str(guide), ctx, label_set_names=[lineage()])
    guide.write_text(guide.read_text().replace("impartial fact-checker", "careful, impartial fact-checker"))
    edit = flows.guidelines_update_flow(str(guide), ctx).change
    assert edit.new and not edit.baseline and edit.event_id and edit.version != base.version
    assert (setup["repo"] / "data" / "guidelines" / f"checkworthiness-{edit.version}.yaml").exists()
    again = flows.guidelines_update_flow(str(guide), ctx).change
    assert not again.new  # the same edit is one version, one event
    second = flows.rescore_flow(str(guide), ctx, label_set_names=[lineage()])
    with engine.connect() as conn:
        pv = conn.execute(text("SELECT DISTINCT prompt_version FROM calibration_runs WHERE id = ANY(:i)"),
                          {"i": [r.run_id for r in second.runs]}).scalars().all()
        assert pv == [edit.version]
        assert conn.execute(text("SELECT guidelines FROM prompt_versions WHERE id = :v"),
                            {"v": edit.version}).scalar() == guide.read_text()
    assert all(r.mode == "full" for r in second.runs)  # a new prompt: every score changed
    assert {r.run_id for r in first.runs}.isdisjoint(r.run_id for r in second.runs)


def test_newly_arrived_claims_are_scored_and_calibrated_incrementally(flows, setup, engine, first_run):
    repo = setup["repo"]
    dev, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev.tsv"), "dev")
    incoming = repo / "data" / "incoming"
    incoming.mkdir(exist_ok=True)

    def arrive(name, claims):
        with open(incoming / name, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "dataset", "text"])
            w.writerows([f"dev:{c.source_id}", "clef2024", c.text] for c in claims)

    arrive("batch-1.csv", dev[:12])
    one = flows.score_new_claims_flow(context(setup, repo), [lineage()])
    assert len(one.ingested["clef2024:incoming"]) == 12
    modes = {(r.target, r.mode) for r in one.runs}
    assert ("clef2024:incoming", "full") in modes and ("clef2024:test", "full") not in modes
    arrive("batch-2.csv", dev[12:17])
    two = flows.score_new_claims_flow(context(setup, repo), [lineage()])
    inc = [r for r in two.runs if r.target == "clef2024:incoming"]
    assert inc and all((r.mode, r.n_recomputed, r.n_copied) == ("incremental", 5, 12) for r in inc)
    nothing_new = flows.score_new_claims_flow(context(setup, repo), [lineage()])
    assert nothing_new.runs == []


def test_a_refused_label_file_is_set_aside_and_later_files_still_apply(flows, setup, engine, first_run):
    """A file dropped in data/labels/ naming an unknown claim is refused with its reason stored and
    moved to data/labels/rejected/, as is one the validation suite rejects (as ``labels add`` does);
    a good file dropped after them is applied, now and later."""
    repo, db = setup["repo"], setup["db_url"]
    labels_dir = repo / "data" / "labels"
    labels_dir.mkdir(parents=True, exist_ok=True)
    bad = labels_dir / "bad.csv"
    bad.write_text("id,dataset,label\nno-such-id,clef2024,1\n", encoding="utf-8")
    with engine.connect() as conn:
        member = conn.execute(text("SELECT c.source_id, cl.label FROM claims c JOIN current_labels cl "
                                   "ON cl.claim_id = c.id WHERE c.id = ANY(:i) ORDER BY c.id LIMIT 1"),
                              {"i": store.label_set_claims(conn, lineages.lineage_head(conn, lineage()))}).one()
    good = labels_dir / "good.csv"
    good.write_text(f"id,dataset,label,source\n{member.source_id},clef2024,{member.label},annotator:ann\n",
                    encoding="utf-8")
    suite = labels_dir / "suite.csv"  # a label 2 on a claim of the lineage: the suite rejects it
    suite.write_text(f"id,dataset,label\n{member.source_id},clef2024,2\n", encoding="utf-8")
    os.utime(bad, (1, 1))  # the bad files are the older ones: they are met first
    os.utime(suite, (2, 2))

    out = flows.label_update_flow(None, str(repo), db, setup["params"])
    (refused,) = out.refused
    assert refused.path == str(bad) and "no-such-id" in refused.reason
    assert not bad.exists() and (labels_dir / "rejected" / "bad.csv").exists()
    assert [(Path(u.path).name, u.status) for u in out.updates] == [("suite.csv", "rejected"),
                                                                    ("good.csv", "applied")]
    assert out.updates[0].moved_to == str(labels_dir / "rejected" / "suite.csv") and not suite.exists()
    assert out.updates[1].moved_to is None and good.exists()
    with engine.connect() as conn:
        row = conn.execute(text("SELECT status, reason FROM label_updates WHERE path = :p"),
                           {"p": str(bad)}).one()
    assert row.status == "rejected" and "field 'id'" in row.reason
    again = flows.label_update_flow(None, str(repo), db, setup["params"])
    assert again.updates == [] and again.refused == []
