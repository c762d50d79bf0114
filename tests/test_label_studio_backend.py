"""Label Studio for real: a real Label Studio server (PyPI ``label-studio`` in its own virtual
environment, ``.venv-label-studio/``, made by ``scripts/setup.sh``) on loopback, our ML backend on
loopback (uvicorn in a thread), a real lineage in the session's Postgres.

Webhooks need the shared secret: the test gives the webhook Label Studio registers for the backend
the secret's header (``PATCH /api/webhooks/ID``), as docs/review.md tells a team to; a forged call
(no secret, a wrong one) is refused before its body is read, and nothing is written.

Label Studio's project gets the labelling configuration of docs/review.md, connects the backend
(``/api/ml``, which also registers the backend's webhook), imports what ``checkworthy review
export`` wrote, and asks the backend for predictions: the run's decisions, scored so that its
uncertainty sampling serves the most uncertain claim first. An annotation submitted through Label
Studio's API reaches the backend's webhook and goes through the label-update flow (a scratch git +
DVC project, Great Expectations, Prefect's test harness): the label lands, the queue entry closes,
the lineage gets a new version, its calibration is recalibrated and the event
``checkworthy.labels.updated`` names it. The same annotation again writes nothing; annotations of
another project, of unknown claims or with a bad choice are refused in one line.

Label Studio's first start runs its Django migrations (about 80 s on a loaded 2-core machine); it
starts while the lineage is built. A missing ``.venv-label-studio`` fails the module, it never skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter

import httpx
import numpy as np
import pytest
from sqlalchemy import text

from checkworthy.cli.main import main
from checkworthy.config import CODE_ROOT, load_params
from checkworthy.data.label_studio import LABEL_CONFIG
from checkworthy.data.text import normalise_text
from checkworthy.flows.api_events import FlowEvents
from checkworthy.runs.calibration_run import run_calibration
from checkworthy.runs.embedding import ensure_embeddings
from checkworthy.runs.scoring import score_missing
from checkworthy.scorers.registry import configured_scorer
from checkworthy.serve.label_studio_backend import (
    MAX_BODY,
    WEBHOOK_SECRET_ENV,
    WEBHOOK_SECRET_HEADER,
    create_backend,
)
from checkworthy.serve.served import Selection
from checkworthy.store import lineages
from checkworthy.store import review_queue as queue
from checkworthy.store import rows as store
from checkworthy.store.audit import table_counts
from checkworthy.store.calibration_runs import result_values
from checkworthy.store.run_spec import RunMethods, RunSpec
from checkworthy.testing.claims import clef
from checkworthy.testing.events import event_stored
from checkworthy.testing.loopback import LoopbackServer, answer_mid_body
from checkworthy.testing.scratch_project import free_port, make_scratch_project

TAG = "t-ls"
LINEAGE, TARGET = f"{TAG}:calibration", f"{TAG}:incoming"
LABEL_STUDIO = CODE_ROOT / ".venv-label-studio" / "bin" / "label-studio"
TOKEN = "checkworthy-test-token-28"
START_TIMEOUT = 300  # seconds: the first start migrates a fresh SQLite database
SECRET = "webhook-secret-of-the-test-28"
HOOK = {WEBHOOK_SECRET_HEADER: SECRET}


class LabelStudio:
    """A Label Studio server on loopback with one user whose legacy API token is :data:`TOKEN`."""

    def __init__(self, data_dir) -> None:
        if not LABEL_STUDIO.exists():
            pytest.fail(f"{LABEL_STUDIO} is missing: run scripts/setup.sh (it installs Label Studio in "
                        ".venv-label-studio/)", pytrace=False)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data_dir / "label-studio.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "DATABASE_URL"))}
        env.update(LABEL_STUDIO_USERNAME="ann@desk.example", LABEL_STUDIO_PASSWORD="annotator-28",
                   LABEL_STUDIO_USER_TOKEN=TOKEN, LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN="true",
                   ML_BLOCK_LOCAL_IP="false", SSRF_PROTECTION_ENABLED="false",  # our backend is on loopback
                   WEBHOOK_TIMEOUT="10", LATEST_VERSION_CHECK="false", COLLECT_ANALYTICS="false")
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(LABEL_STUDIO), "start", "--no-browser", "--internal-host", "127.0.0.1", "--port",
                 str(self.port), "--data-dir", str(data_dir / "data"), "--enable-legacy-api-token"],
                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Token {TOKEN}"}, timeout=120)

    def wait_ready(self) -> None:
        """Until ``/health`` answers and the token works; fails naming the log's tail."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if self.http.get("/api/projects").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(1)
        tail = self.log.read_text(errors="replace")[-3000:]
        pytest.fail(f"Label Studio did not answer on {self.url} within {START_TIMEOUT} s:\n{tail}")

    def api(self, method: str, path: str, **kw) -> httpx.Response:
        r = self.http.request(method, path, **kw)
        assert r.status_code < 300, f"{method} {path}: {r.status_code} {r.text[:500]}"
        return r

    def close(self) -> None:
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture(scope="module")
def label_studio(tmp_path_factory):
    """Started first: it migrates while the lineage is built."""
    ls = LabelStudio(tmp_path_factory.mktemp("label-studio"))
    yield ls
    ls.close()


@pytest.fixture(scope="module")
def project(tmp_path_factory, db_url):
    """The scratch data project (git + DVC, its own remote) and its params: imported scores for
    every CLEF text (``file:`` model), validation for small label sets."""
    return make_scratch_project(tmp_path_factory.mktemp("ls-project"), db_url, 28)


@pytest.fixture(scope="module")
def world(engine, project, label_studio):
    """A lineage of 80 labelled CLEF claims, 30 newly arrived ones (its incoming target, labels
    known to the test), scored by the project's model and calibrated once: the run queues them."""
    train, dev = clef()
    dev_texts = {normalise_text(c.text) for c in dev}
    n = Counter(normalise_text(c.text) for c in train)
    clean = [c for c in train if n[normalise_text(c.text)] == 1 and normalise_text(c.text) not in dev_texts]
    rng = np.random.default_rng(28)
    pos, neg = ([clean[i] for i in rng.permutation([i for i, c in enumerate(clean) if c.label == y])[:55]]
                for y in (1, 0))
    lab, incoming = pos[:40] + neg[:40], pos[40:] + neg[40:]
    params = load_params(project["params"])
    scorer, prompt = configured_scorer(params, params["models"][0]["spec"])
    with engine.begin() as conn:
        lab_ids = store.store_claims_with_labels(
            conn, [store.NewClaim(TAG, "train", c.source_id, c.text, c.label) for c in lab], f"{TAG}:file")
        in_ids = store.upsert_claims(conn, [store.NewClaim(TAG, "incoming", c.source_id, c.text)
                                            for c in incoming])
        hashes = [store.sha256_text(c.text) for c in lab + incoming]
        ensure_embeddings(conn, hashes)
        ls0 = store.create_label_set(conn, LINEAGE, lab_ids)
        lineages.register_target(conn, TARGET, LINEAGE, in_ids)
        lineages.set_head(conn, LINEAGE, ls0, "initial")
    key = score_missing(engine, scorer, hashes, prompt)[2]["imported"]
    run = run_calibration(engine, RunSpec(TARGET, tuple(sorted(in_ids)), ls0, key, RunMethods(5)))
    truth = {i: c.label for i, c in zip(in_ids, incoming)}
    return {"params": params, "ls0": ls0, "run": run, "truth": truth}


@pytest.fixture(scope="module")
def tasks(db_url, world, tmp_path_factory):
    """What ``checkworthy review export`` writes: the 8 most uncertain claims of the target."""
    out = tmp_path_factory.mktemp("export") / "tasks.json"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DATABASE_URL", db_url)
        assert main(["review", "export", "--format", "label-studio", "--limit", "8", "--target", TARGET,
                     "--out", str(out)]) == 0
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def ls_project(label_studio, world):
    label_studio.wait_ready()
    return label_studio.api("POST", "/api/projects", json={
        "title": "checkworthy review", "label_config": LABEL_CONFIG, "sampling": "Uncertainty sampling"}).json()


@pytest.fixture(scope="module")
def backend(engine, db_url, project, world, ls_project, harness):
    """Our ML backend for the project, its label updates in the scratch project."""
    flow = FlowEvents(project["repo"], project["params"], db_url)
    server = LoopbackServer(create_backend(engine, Selection(LINEAGE), world["params"], [ls_project["id"]], flow,
                                           secret=SECRET))
    yield server
    server.close()


@pytest.fixture(scope="module")
def connected(label_studio, ls_project, backend, tasks):
    """The backend connected to the project, its webhook given the secret's header, the exported
    tasks imported, predictions retrieved."""
    pid = ls_project["id"]
    ml = label_studio.api("POST", "/api/ml", json={"project": pid, "url": backend.url, "title": "checkworthy",
                                                   "is_interactive": False}).json()
    (hook,) = label_studio.api("GET", "/api/webhooks", params={"project": pid}).json()
    label_studio.api("PATCH", f"/api/webhooks/{hook['id']}", json={"headers": HOOK})
    label_studio.api("POST", f"/api/projects/{pid}/import", json=tasks)
    label_studio.api("POST", "/api/dm/actions", params={"id": "retrieve_tasks_predictions", "project": pid},
                     json={"selectedItems": {"all": True, "excluded": []}})
    got = label_studio.api("GET", "/api/tasks", params={"project": pid, "fields": "all", "page_size": 100}).json()
    return {"ml": ml, "tasks": got["tasks"] if isinstance(got, dict) else got}


def _run_view(engine, run_id: int) -> dict[int, tuple[float, int]]:
    """Each queued claim of the run: its review priority and the run's decision."""
    with engine.connect() as conn:
        decision = {r.claim_id: r.decision for r in result_values(conn, run_id)}
        return {e["claim_id"]: (e["priority"], decision[e["claim_id"]]) for e in queue.entries_of_run(conn, run_id)}


def test_label_studio_shows_the_runs_decisions_most_uncertain_first(engine, label_studio, ls_project, backend,
                                                                     world, tasks, connected):
    pid = ls_project["id"]
    hooks = label_studio.api("GET", "/api/webhooks", params={"project": pid}).json()
    assert [h["url"] for h in hooks] == [f"{backend.url}/webhook"]  # connecting the backend registered it
    assert [h["headers"] for h in hooks] == [HOOK]
    view = _run_view(engine, world["run"])
    version = f"checkworthy {LINEAGE} run {world['run']}"
    assert len(connected["tasks"]) == len(tasks) == 8
    for t in connected["tasks"]:
        (pred,) = t["predictions"]
        priority, decision = view[t["data"]["claim_id"]]
        assert pred["model_version"] == version
        assert pred["score"] == pytest.approx(1 - priority, abs=1e-6)  # 0 at the threshold
        assert pred["result"] == [{"from_name": "checkworthy", "to_name": "text", "type": "choices",
                                   "value": {"choices": ["Yes" if decision == 1 else "No"]}}]
    # the project's model version chosen (Settings > Predictions), the Data Manager's "prediction
    # score" order and uncertainty sampling serve the export's order: the most uncertain first
    label_studio.api("PATCH", f"/api/projects/{pid}", json={"model_version": version})
    query = json.dumps({"ordering": ["tasks:predictions_score"]})
    ordered = label_studio.api("GET", "/api/tasks", params={"project": pid, "query": query}).json()["tasks"]
    assert [t["data"]["claim_id"] for t in ordered] == [t["data"]["claim_id"] for t in tasks]
    nxt = label_studio.api("GET", f"/api/projects/{pid}/next").json()
    assert nxt["data"]["claim_id"] == tasks[0]["data"]["claim_id"]


def _wait_for(check, what: str, timeout: float = 300):
    """``check()`` until it is truthy (the label update runs after the webhook's answer)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(1)
    raise AssertionError(f"no {what} after {timeout} s")


def _answer(task: dict, choice: str) -> dict:
    return {"result": [{"from_name": "checkworthy", "to_name": "text", "type": "choices",
                        "value": {"choices": [choice]}}], "was_cancelled": False, "task": task["id"]}


@pytest.fixture(scope="module")
def annotated(engine, label_studio, world, connected):
    """A person answers the most uncertain task in Label Studio (its true label); Label Studio calls
    the webhook; the label update and the recalibration run."""
    task = min(connected["tasks"], key=lambda t: t["predictions"][0]["score"])
    claim = task["data"]["claim_id"]
    choice = "Yes" if world["truth"][claim] else "No"
    before = {"counts": table_counts(engine)}
    with engine.connect() as conn:
        before["head"] = lineages.lineage_head(conn, LINEAGE)
    ann = label_studio.api("POST", f"/api/tasks/{task['id']}/annotations", json=_answer(task, choice)).json()

    def landed():
        with engine.connect() as conn:
            return conn.execute(text(
                "SELECT u.id, u.status, u.n_appended FROM label_updates u JOIN labels l ON l.update_id = u.id "
                "WHERE l.claim_id = :c"), {"c": claim}).first()

    update = _wait_for(landed, "label update of the annotated claim")

    def recalibrated():
        with engine.connect() as conn:
            return conn.execute(text(
                "SELECT id FROM calibration_runs WHERE target = :t AND status = 'complete' AND id > :r "
                "AND mode <> 'served' ORDER BY id DESC LIMIT 1"), {"t": TARGET, "r": world["run"]}).scalar()

    new_run = _wait_for(recalibrated, "recalibration of the lineage's target")
    return {"task": task, "claim": claim, "label": int(choice == "Yes"), "annotation": ann, "update": update,
            "new_run": new_run} | before


def test_an_annotation_lands_as_a_label_moves_the_lineage_and_emits_the_event(engine, backend, annotated, world):
    claim, update = annotated["claim"], annotated["update"]
    assert update.status == "applied" and update.n_appended == 1
    with engine.connect() as conn:
        assert store.current_labels(conn, [claim]) == {claim: annotated["label"]}
        source = conn.execute(text("SELECT source FROM labels WHERE claim_id = :c"), {"c": claim}).scalar_one()
        assert source.startswith("label-studio:")
        assert [a["claim_id"] for a in queue.answers_of_update(conn, update.id)] == [claim]  # entry closed
        head = lineages.lineage_head(conn, LINEAGE)
        assert head != annotated["head"] and claim in store.label_set_claims(conn, head)  # newly arrived: joins
        log = lineages.version_log(conn, LINEAGE)
        assert len(log) == 2 and log[-1]["label_set_id"] == head
        assert conn.execute(text("SELECT label_set_id, mode FROM calibration_runs WHERE id = :r"),
                            {"r": annotated["new_run"]}).one() == (head, "incremental")
        event_id, payload = conn.execute(text(
            "SELECT prefect_event_id, payload FROM change_events WHERE kind = 'labels' AND key = :k"),
            {"k": str(update.id)}).one()
    assert payload["label_set_names"] == [LINEAGE] and payload["new_heads"] == {LINEAGE: head}
    assert (payload["n_rows"], payload["n_appended"]) == (1, 1)
    assert event_stored(event_id)  # checkworthy.labels.updated: the adapt deployment's trigger
    # the backend now serves the recalibrated run
    assert httpx.get(f"{backend.url}/versions").json() == {
        "versions": [f"checkworthy {LINEAGE} run {annotated['new_run']}"]}


def test_the_same_annotation_again_is_the_same_label(engine, label_studio, backend, ls_project, annotated):
    before = table_counts(engine)
    ann = annotated["annotation"]
    # Label Studio sends ANNOTATION_UPDATED for an unchanged save; a replay of its payload, twice
    label_studio.api("PATCH", f"/api/annotations/{ann['id']}", json={"result": ann["result"]})
    task = label_studio.api("GET", f"/api/tasks/{annotated['task']['id']}").json()
    body = {"action": "ANNOTATION_CREATED", "annotation": ann, "task": task, "project": {"id": ls_project["id"]}}
    for _ in range(2):
        r = httpx.post(f"{backend.url}/webhook", json=body, headers=HOOK, timeout=60)
        assert r.status_code == 200 and r.json()["status"] == "already applied", r.text
        assert r.json()["update_id"] == annotated["update"].id
    assert table_counts(engine) == before


def _refused(server, path: str, body: dict, headers: dict = HOOK) -> dict:
    """The refusal of ``body`` (sent as JSON escaped to ASCII, so lone surrogates travel)."""
    r = httpx.post(f"{server.url}{path}", content=json.dumps(body), timeout=60,
                   headers=headers | {"Content-Type": "application/json"})
    assert 400 <= r.status_code < 500, r.text
    (line,) = r.text.splitlines()
    return json.loads(line)["error"] | {"status": r.status_code}


def test_annotations_of_another_project_unknown_claims_or_bad_choices_are_refused(
        engine, backend, ls_project, annotated, tasks):
    pid = ls_project["id"]
    task = {"id": 77, "project": pid, "data": dict(tasks[-1]["data"])}
    ann = {"id": 900, "project": pid, "completed_by": 1, "was_cancelled": False,
           "result": _answer(task, "Yes")["result"]}
    before = table_counts(engine)
    other = _refused(backend, "/webhook", {"action": "ANNOTATION_CREATED", "annotation": ann | {"project": pid + 1},
                                           "task": task | {"project": pid + 1}})
    assert other["status"] == 403 and other["code"] == "other_project"
    unknown = _refused(backend, "/webhook", {"action": "ANNOTATION_CREATED", "annotation": ann, "task": task | {
        "data": task["data"] | {"source_id": "no-such-claim", "claim_id": 10**9}}})
    assert unknown["status"] == 422 and "no-such-claim" in unknown["message"]
    path_like = _refused(backend, "/webhook", {"action": "ANNOTATION_CREATED", "annotation": ann,
                                               "task": task | {"id": "../../escape"}})
    assert path_like["status"] == 422 and path_like["field"] == "task.id"
    bad = {"result": [{"from_name": "checkworthy", "type": "choices", "value": {"choices": ["Maybe"]}}]}
    maybe = _refused(backend, "/webhook", {"action": "ANNOTATION_UPDATED", "annotation": ann | bad, "task": task})
    assert maybe["status"] == 422 and "must be Yes or No" in maybe["message"]
    assert _refused(backend, "/predict", {"project": f"{pid + 1}.1700000000", "tasks": []})["status"] == 403
    schema = _refused(backend, "/setup", {"project": f"{pid}.1700000000", "schema": "<View><Text name='text' "
                                          "value='$text'/></View>"})
    assert schema["code"] == "label_config"
    assert table_counts(engine) == before
    ignored = httpx.post(f"{backend.url}/webhook", json={"action": "PROJECT_UPDATED", "project": {"id": pid}},
                         headers=HOOK)
    assert ignored.status_code == 200 and ignored.json()["status"] == "ignored"


def test_a_forged_webhook_is_refused_before_its_body_is_read_and_nothing_is_written(
        engine, backend, ls_project, tasks):
    """A valid annotation of an exported task, sent by anyone but Label Studio: without the secret,
    or with a wrong one, 401 from the headers alone (answered before the body ends); with it, a
    body over the limit (chunked) is 413 at the byte over, and strings the store cannot hold are
    422 naming the field. No label, no update, no queue change."""
    pid = ls_project["id"]
    task = {"id": 78, "project": pid, "data": dict(tasks[-1]["data"])}
    forged = {"action": "ANNOTATION_CREATED", "task": task, "project": {"id": pid},
              "annotation": {"id": 901, "project": pid, "completed_by": 1, "was_cancelled": False,
                             "result": _answer(task, "Yes")["result"]}}
    before = table_counts(engine)
    missing = _refused(backend, "/webhook", forged, headers={})
    assert (missing["status"], missing["code"], missing["field"]) == (401, "missing_secret", WEBHOOK_SECRET_HEADER)
    wrong = _refused(backend, "/webhook", forged, headers={WEBHOOK_SECRET_HEADER: SECRET[:-1] + "9"})
    assert (wrong["status"], wrong["code"]) == (401, "invalid_secret")
    assert answer_mid_body(backend.port, "/webhook", {}, chunks=1)[0] == 401
    status, body = answer_mid_body(backend.port, "/webhook", HOOK, chunks=MAX_BODY // 100_000 + 1, size=100_000)
    assert (status, body["error"]["code"]) == (413, "too_large")
    sent = [0]

    def ten_mb():
        for _ in range(100):
            sent[0] += 1
            yield b" " * 100_000

    r = httpx.post(f"{backend.url}/predict", content=ten_mb(), timeout=60)
    assert r.status_code == 413 and sent[0] < 100, (r.text, sent)
    odd = [(forged | {"task": task | {"data": task["data"] | {"source_id": "a\x00b"}}}, "task.data.source_id"),
           (forged | {"task": task | {"data": task["data"] | {"dataset": "x\ud800"}}}, "task.data.dataset")]
    for body, field in odd:
        got = _refused(backend, "/webhook", body)
        assert (got["status"], got["code"], got["field"]) == (422, "bad_text", field), got
    digit = _refused(backend, "/webhook", forged | {"task": task | {"id": "\u00b2"}})  # "²": a digit to isdigit
    assert (digit["status"], digit["field"]) == (422, "task.id")
    other = _refused(backend, "/predict", {"project": "\u00b2", "tasks": []})
    assert other["status"] == 403
    assert table_counts(engine) == before


@pytest.mark.parametrize("argv, secret, says", [
    ([], SECRET, "the following arguments are required: --project"),
    (["--project", "1", "--lineage", "no-such:lineage"], SECRET, "--lineage 'no-such:lineage': no calibrated lineage"),
    (["--project", "1"], None, f"{WEBHOOK_SECRET_ENV} is not set"),
    (["--project", "1"], "short", "at least 16 printable ASCII characters"),
])
def test_the_backend_command_refuses_bad_options_in_one_line(use_db, world, capsys, monkeypatch, argv, secret,
                                                             says):
    if secret is None:
        monkeypatch.delenv(WEBHOOK_SECRET_ENV, raising=False)
    else:
        monkeypatch.setenv(WEBHOOK_SECRET_ENV, secret)
    assert main(["label-studio-backend", "--port", str(free_port()), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]
