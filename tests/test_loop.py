"""The team's loop on a ``predict`` lineage: predict -> label the batch's claims -> a new version
through the gate -> recalibrated -> served from the new run; the same through Label Studio's ML
backend.

``predict`` and ``labels add`` run as the real console script on a scratch data project (git + DVC,
its own remote; a fresh database; imported scores as the model, so that nothing here waits on a
network); the API and the Label Studio backend run in this process on loopback, as a user runs them.
"""

from __future__ import annotations

import csv
import os
import time

import httpx
import pytest
from sqlalchemy import create_engine, text

from checkworthy.config import load_params
from checkworthy.data.datasets import load_clef
from checkworthy.flows.api_events import FlowEvents
from checkworthy.runs.own_scores import upload_dataset
from checkworthy.serve.app import create_app
from checkworthy.serve.label_studio_backend import WEBHOOK_SECRET_HEADER, create_backend
from checkworthy.serve.served import Selection
from checkworthy.store import api_keys, lineages
from checkworthy.store.audit import table_counts
from checkworthy.store.served_runs import newest_run
from checkworthy.testing.claims import write_csv
from checkworthy.testing.datasets import raw_path
from checkworthy.testing.loopback import LoopbackServer
from checkworthy.testing.scratch_project import (
    fresh_database,
    make_scratch_project,
    project_env,
    run_cli,
)

pytestmark = pytest.mark.slow
LINEAGE = "team-desk"
SECRET = "webhook-secret-of-the-loop-test"


@pytest.fixture(scope="module")
def project(tmp_path_factory, owner_url):
    """A scratch project, its own database, and a ``predict --name team-desk`` run: 40 labelled
    CLEF train claims (L) and 30 dev-test claims (U, the team's batch)."""
    tmp = tmp_path_factory.mktemp("loop")
    with fresh_database(owner_url, f"checkworthy_loop_{os.getpid()}") as url:
        engine = create_engine(url)
        try:
            proj = make_scratch_project(tmp, url, 7007)
            env = project_env(proj, url, tmp / "prefect-home")
            train, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_train.tsv"), "train")
            test, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
            lab = [c for c in train if c.label == 1][:20] + [c for c in train if c.label == 0][:20]
            labelled = write_csv(tmp / "L.csv", ["id", "text", "label"],
                                 [(c.source_id, c.text, c.label) for c in lab])
            batch = test[:30]
            unlabelled = write_csv(tmp / "U.csv", ["id", "text"], [(c.source_id, c.text) for c in batch])
            model = f"file:{proj['scores']}"
            done = run_cli(["predict", "--labeled", str(labelled), "--unlabeled", str(unlabelled),
                            "--out", str(tmp / "OUT.csv"), "--name", LINEAGE, "--model", model,
                            "--score-kind", "imported", "--k", "5"], env, proj["repo"])
            assert done.returncode == 0, done.stdout + done.stderr
            with engine.connect() as conn:
                first = newest_run(conn, LINEAGE)
            yield proj | {"engine": engine, "env": env, "url": url, "batch": batch, "first": first,
                          "batch_dataset": upload_dataset(unlabelled)}
        finally:
            engine.dispose()


def _answers(path, dataset: str, rows: list[tuple[str, int]]):
    return write_csv(path, ["id", "dataset", "label", "source"],
                     [(i, dataset, y, "annotator:ann") for i, y in rows])


def test_a_predict_lineage_has_a_head_from_its_first_run(project):
    with project["engine"].connect() as conn:
        log = lineages.version_log(conn, LINEAGE)
    assert [v["reason"] for v in log] == ["initial"] and log[0]["n_items"] == 40
    done = run_cli(["labels", "versions", LINEAGE], project["env"], project["repo"])
    assert done.returncode == 0 and "v1: label set" in done.stdout


def test_conflicting_labels_in_one_file_are_refused_naming_both_rows(project):
    engine, batch = project["engine"], project["batch"]
    path = _answers(project["tmp"] / "conflict.csv", project["batch_dataset"],
                    [(batch[0].source_id, 1), (batch[1].source_id, 0), (batch[0].source_id, 0)])
    before = table_counts(engine)
    done = run_cli(["labels", "add", str(path)], project["env"], project["repo"])
    assert done.returncode == 2, done.stdout + done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and "Traceback" not in done.stderr
    assert "line 2" in line and "line 4" in line and "label" in line
    assert table_counts(engine) == before


def test_labels_on_the_batch_version_gate_recalibrate_and_serve_the_lineage(project):
    """labels added -> new version (validated) -> new run -> the API answers from it."""
    engine, batch, env = project["engine"], project["batch"], project["env"]
    with engine.begin() as conn:
        _, key = api_keys.create_key(conn, "loop-scorer", "scorer")
    server = LoopbackServer(create_app(engine, Selection(LINEAGE), load_params(project["params"]), events=FlowEvents()))

    def served() -> dict:
        r = httpx.post(f"{server.url}/score/text", json={"text": batch[20].text},
                       headers={"X-API-Key": key}, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()["served_run"]

    try:
        assert served()["run_id"] == project["first"]  # the server is up before the labels come
        answered = [(c.source_id, c.label) for c in batch[:12]]
        path = _answers(project["tmp"] / "answers.csv", project["batch_dataset"], answered)
        done = run_cli(["labels", "add", str(path)], env, project["repo"])
        after = served()  # the same server, the next request: the recalibrated run
    finally:
        server.close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{LINEAGE}: new label set version" in done.stdout
    with engine.connect() as conn:
        log = lineages.version_log(conn, LINEAGE)
        head = lineages.lineage_head(conn, LINEAGE)
        update_id = log[-1]["update_id"]
        gated = conn.execute(text("SELECT count(*) FROM validation_runs WHERE label_update_id = :u "
                                  "AND label_set_name = :n"), {"u": update_id, "n": LINEAGE}).scalar_one()
        event = conn.execute(text("SELECT payload FROM change_events WHERE kind = 'labels' "
                                  "ORDER BY id DESC LIMIT 1")).scalar_one()
        new_run = newest_run(conn, LINEAGE)
        run_ls = conn.execute(text("SELECT label_set_id FROM calibration_runs WHERE id = :r"),
                              {"r": new_run}).scalar_one()
    assert [v["reason"] for v in log] == ["initial", "labels"] and log[-1]["n_items"] == 40 + 12
    assert gated == 1  # the Great Expectations suite ran on the lineage's candidate set
    assert LINEAGE in event["label_set_names"]  # checkworthy.labels.updated names the lineage
    assert new_run != project["first"] and run_ls == head  # recalibrated on the new head
    assert f"run {new_run}: " in done.stdout
    versions = run_cli(["labels", "versions", LINEAGE], env, project["repo"])
    assert "v2: label set" in versions.stdout

    assert (after["run_id"], after["label_set_id"]) == (new_run, head)  # serve moved to the new run


def test_label_studio_annotation_on_a_predict_lineage_versions_it(project, harness):
    """The ML backend takes an annotation of one of the batch's claims through the same path."""
    engine, batch = project["engine"], project["batch"]
    with engine.connect() as conn:
        before = lineages.lineage_head(conn, LINEAGE)
        claim = conn.execute(text("SELECT id FROM claims WHERE dataset = :d AND source_id = :s"),
                             {"d": project["batch_dataset"], "s": batch[25].source_id}).scalar_one()
    flow = FlowEvents(project["repo"], project["params"], project["url"])
    app = create_backend(engine, Selection(LINEAGE), load_params(project["params"]), [1], flow, secret=SECRET)
    server = LoopbackServer(app)
    try:
        body = {"action": "ANNOTATION_CREATED", "project": {"id": 1},
                "task": {"id": 9001, "project": 1,
                         "data": {"text": batch[25].text, "source_id": batch[25].source_id,
                                  "dataset": project["batch_dataset"], "claim_id": claim}},
                "annotation": {"id": 1, "project": 1, "completed_by": 7,
                               "result": [{"from_name": "checkworthy", "to_name": "text", "type": "choices",
                                           "value": {"choices": ["Yes" if batch[25].label else "No"]}}]}}
        r = httpx.post(f"{server.url}/webhook", json=body, headers={WEBHOOK_SECRET_HEADER: SECRET}, timeout=600)
    except BaseException:
        server.close()
        raise
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 600  # the update runs after the answer (Label Studio waits a second)
    while True:
        with engine.connect() as conn:
            after = lineages.lineage_head(conn, LINEAGE)
            new_run = newest_run(conn, LINEAGE)
            run_ls = conn.execute(text("SELECT label_set_id FROM calibration_runs WHERE id = :r"),
                                  {"r": new_run}).scalar_one()
        if (after != before and run_ls == after) or time.monotonic() > deadline:
            break
        time.sleep(1)
    server.close()
    with engine.connect() as conn:
        members = set(conn.execute(text("SELECT claim_id FROM label_set_items WHERE label_set_id = :s"),
                                   {"s": after}).scalars())
    assert after != before and claim in members and run_ls == after


def test_predict_again_with_the_same_file_calibrates_with_the_head(project):
    """The same L file again keeps the head in force (the labels added since define the lineage)."""
    engine, tmp = project["engine"], project["tmp"]
    with engine.connect() as conn:
        head = lineages.lineage_head(conn, LINEAGE)
        n_versions = len(lineages.version_log(conn, LINEAGE))
    batch2 = write_csv(tmp / "U2.csv", ["id", "text"], [(c.source_id, c.text) for c in project["batch"][12:20]])
    done = run_cli(["predict", "--labeled", str(tmp / "L.csv"), "--unlabeled", str(batch2),
                    "--out", str(tmp / "OUT2.csv"), "--name", LINEAGE, "--model", f"file:{project['scores']}",
                    "--score-kind", "imported", "--k", "5"], project["env"], project["repo"])
    assert done.returncode == 0, done.stdout + done.stderr
    with engine.connect() as conn:
        run = newest_run(conn, LINEAGE)
        run_ls = conn.execute(text("SELECT label_set_id FROM calibration_runs WHERE id = :r"),
                              {"r": run}).scalar_one()
        assert len(lineages.version_log(conn, LINEAGE)) == n_versions
    assert run_ls == head
    with open(tmp / "OUT2.csv", newline="", encoding="utf-8") as fh:
        assert len(list(csv.DictReader(fh))) == 8


def test_an_older_store_gets_a_head_for_every_lineage_and_its_batches_registered(owner_url, tmp_path):
    """Migration 0020 on a store made before it: a ``calibrate`` lineage without a version gets its
    label set as its head, and the batch it calibrated becomes a target whose labels join it."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy.engine import make_url

    from checkworthy.config import CODE_ROOT
    from checkworthy.runs.own_scores import calibrate_files, labelled_lineage
    from checkworthy.store.run_spec import RunMethods

    name = f"checkworthy_heads_{os.getpid()}"
    lab = write_csv(tmp_path / "L.csv", ["id", "text", "score", "label"],
                    [(f"l{i}", f"Spending on item {i} rose by {i * 3} percent", (i % 10) / 10, i % 2)
                     for i in range(12)])
    unl = write_csv(tmp_path / "U.csv", ["id", "text", "score"],
                    [(f"u{i}", f"Taxes on good {i} fell by {i} points", (i % 7) / 7) for i in range(6)])
    with fresh_database(owner_url, name) as url:
        engine = create_engine(url)
        owner = create_engine(make_url(owner_url).set(database=name))
        cfg = Config(str(CODE_ROOT / "alembic.ini"))
        cfg.set_main_option("script_location", str(CODE_ROOT / "migrations"))
        cfg.set_main_option("sqlalchemy.url", make_url(owner_url).set(database=name)
                            .render_as_string(hide_password=False).replace("%", "%%"))
        try:
            out = calibrate_files(engine, lab, unl, tmp_path / "OUT.csv", RunMethods(3))
            lineage = labelled_lineage(lab)
            with engine.connect() as conn:
                target = conn.execute(text("SELECT target FROM calibration_runs WHERE id = :r"),
                                      {"r": out.run_id}).scalar_one()
                label_set = lineages.lineage_head(conn, lineage)
                batch = set(lineages.target_claim_ids(conn, lineage)[target])
            with owner.begin() as conn:  # the store as it was: no version, no target (the superuser)
                conn.execute(text("SET LOCAL session_replication_role = replica"))
                conn.execute(text("DELETE FROM label_set_versions WHERE name = :n"), {"n": lineage})
                conn.execute(text("DELETE FROM target_claims WHERE target = :t"), {"t": target})
                conn.execute(text("DELETE FROM calibration_targets WHERE name = :t"), {"t": target})
            command.downgrade(cfg, "0018")
            command.upgrade(cfg, "head")
            with engine.connect() as conn:
                log = lineages.version_log(conn, lineage)
                held_out = conn.execute(text("SELECT held_out FROM calibration_targets WHERE name = :t"),
                                        {"t": target}).scalar_one()
                assert [(v["label_set_id"], v["reason"]) for v in log] == [(label_set, "initial")]
                assert held_out is False
                assert set(lineages.target_claim_ids(conn, lineage)[target]) == batch
                assert lineages.own_claim_ids(conn, lineage, sorted(batch)) == batch
        finally:
            engine.dispose()
            owner.dispose()
