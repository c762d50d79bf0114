"""The HTTP API on a real uvicorn server on loopback, called by a real HTTP client.

A real lineage: CLEF 2024 claims scored by the MiniLM logistic classifier (a real scorer that can
score new texts), embedded by MiniLM, calibrated twice (the paper's NN-PPI, and ``auto`` with the
Mondrian interval). Every answer is compared with a batch calibration of the same claims; keys,
roles, limits and bad input are refused with a JSON error and nothing stored; concurrent requests
lose and duplicate nothing; a batch from another domain raises the drift figure and its event.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from sqlalchemy import create_engine, text

from checkworthy.cli.main import main
from checkworthy.config import PARAMS_FILE, load_params
from checkworthy.data.text import normalise_text
from checkworthy.flows.api_events import FlowEvents
from checkworthy.runs.calibration_run import compute, run_calibration
from checkworthy.runs.embedding import ensure_embeddings
from checkworthy.runs.scoring import score_missing
from checkworthy.scorers.registry import configured_scorer
from checkworthy.serve.app import create_app
from checkworthy.serve.inputs import Limits
from checkworthy.serve.refusals import json_errors
from checkworthy.serve.served import Selection
from checkworthy.store import api_keys, lineages
from checkworthy.store import rows as store
from checkworthy.store.audit import table_counts
from checkworthy.store.calibration_runs import load_run
from checkworthy.store.run_spec import RunMethods, RunSpec
from checkworthy.testing.claims import COOKING, clef
from checkworthy.testing.events import event_stored
from checkworthy.testing.loopback import LoopbackServer, answer_mid_body

TAG = "t14-api"
MODEL = "classifier:minilm-lr"
LIMITS = Limits(max_chars=400, max_batch=40, max_body=10_000)


class World:
    """The lineage, its two calibration runs, held-out sentences to submit, and the keys."""

    def __init__(self, engine) -> None:
        train, dev = clef()
        dev_texts = {normalise_text(c.text) for c in dev}
        clean = [c for c in train if normalise_text(c.text) not in dev_texts]
        rng = np.random.default_rng(14)
        pos = [clean[i] for i in rng.permutation([i for i, c in enumerate(clean) if c.label == 1])[:80]]
        neg = [clean[i] for i in rng.permutation([i for i, c in enumerate(clean) if c.label == 0])[:80]]
        lab, self.dev = pos + neg, [c.text for c in dev[:60]]
        self.lineage, target = f"{TAG}:calibration", f"{TAG}:test"
        scorer, prompt = configured_scorer(load_params(PARAMS_FILE), MODEL)
        with engine.begin() as conn:
            lab_ids = store.store_claims_with_labels(
                conn, [store.NewClaim(TAG, "train", c.source_id, c.text, c.label) for c in lab], "test")
            t_ids = store.upsert_claims(conn, [store.NewClaim(TAG, "dev-test", c.source_id, c.text)
                                               for c in dev[60:100]])
            ensure_embeddings(conn, [store.sha256_text(c.text) for c in lab + dev[60:100]])
            ls = store.create_label_set(conn, self.lineage, lab_ids)
            lineages.register_target(conn, target, self.lineage, t_ids)
            lineages.set_head(conn, self.lineage, ls, "initial")
        hashes = [store.sha256_text(c.text) for c in lab + dev[60:100]]
        key = score_missing(engine, scorer, hashes, prompt)[2]["p_positive"]
        base = RunSpec(target, tuple(sorted(t_ids)), ls, key, RunMethods(5))
        self.paper = run_calibration(engine, base)
        self.auto = run_calibration(engine, RunSpec(target, base.claim_ids, ls, key, RunMethods(
            5, interval_method="mondrian", correction="auto")))
        with engine.begin() as conn:
            (self.scorer_key, self.scorer), (_, self.auditor) = (
                api_keys.create_key(conn, f"{TAG}-scorer", "scorer"),
                api_keys.create_key(conn, f"{TAG}-auditor", "auditor"))


class Server(LoopbackServer):
    """``create_app`` under a real uvicorn server on a free loopback port, in a thread; ``window``:
    its ``serving: window_seconds:`` (else params.yaml's)."""

    def __init__(self, engine, selection: Selection, window: float | None = None) -> None:
        params = load_params(PARAMS_FILE)
        if window is not None:
            params |= {"serving": {"window_seconds": window}}
        super().__init__(create_app(engine, selection, params, LIMITS, events=FlowEvents()))


@pytest.fixture(scope="module")
def world(engine):
    return World(engine)


@pytest.fixture(scope="module")
def paper(engine, world):
    s = Server(engine, Selection(world.lineage, {"correction": "paper"}))
    yield s
    s.close()


@pytest.fixture(scope="module")
def auto(engine, world):
    s = Server(engine, Selection(world.lineage, {"correction": "auto"}))
    yield s
    s.close()


def post(server: Server, path: str, body, key: str | None, **kw) -> httpx.Response:
    headers = {} if key is None else {"X-API-Key": key}
    return httpx.post(server.url + path, json=body, headers=headers, timeout=120, **kw)


def ready_once_listening(port: int) -> httpx.Response:
    """``/health/ready`` of a ``checkworthy serve`` process on ``port``, asked until it listens
    (two minutes at most)."""
    for _ in range(240):
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health/ready", timeout=5)
        except httpx.TransportError:
            time.sleep(0.5)
    raise AssertionError(f"nothing listens on port {port} after two minutes")


def assert_equals_batch(engine, world, served_run: int, body: dict) -> None:
    """Each answer equals a batch calibration of the same claims with the served run's spec."""
    from checkworthy.runs.recalibration import spec_from_run

    ids = [r["claim_id"] for r in body["results"]]
    with engine.connect() as conn:
        run = load_run(conn, served_run)
        fresh = compute(conn, spec_from_run(run, run["label_set_id"], ids))
    res, nb = fresh.result, fresh.neighbours
    order = {int(c): i for i, c in enumerate(nb.claim_ids)}
    for r in body["results"]:
        i = order[r["claim_id"]]
        assert (r["theta"], r["ci_low"], r["ci_high"], r["decision"]) == (
            float(res.theta[i]), float(res.ci_low[i]), float(res.ci_high[i]), int(res.decision[i]))
        assert [n["claim_id"] for n in r["neighbours"]] == [int(x) for x in nb.neighbour_ids[i]]
        assert r["score"] == min(1.0, max(0.0, r["theta"]))


@pytest.mark.parametrize("which", ["paper", "auto"])
def test_a_batch_is_answered_stored_and_equal_to_a_batch_run(engine, world, which, request):
    server = request.getfixturevalue(which)
    served_run = world.paper if which == "paper" else world.auto
    r = post(server, "/score/sentences", {"sentences": world.dev[:20]}, world.scorer)
    assert r.status_code == 200, r.text
    body = r.json()
    assert [x["index"] for x in body["results"]] == list(range(20))
    assert [x["text"] for x in body["results"]] == [t.strip() for t in world.dev[:20]]
    prov = body["served_run"]
    assert prov["run_id"] == served_run and prov["model"] == MODEL and prov["lineage"] == world.lineage
    assert {"prompt_version", "label_set_id", "label_set_fingerprint", "code_rev", "params_hash"} <= set(prov)
    assert_equals_batch(engine, world, served_run, body)
    with engine.connect() as conn:
        run = load_run(conn, body["run_id"])
        req = conn.execute(text("SELECT * FROM api_requests WHERE request_uid = :u"),
                           {"u": body["request_id"]}).mappings().one()
        claims = conn.execute(text("SELECT id, dataset, split, source_id FROM claims WHERE id = ANY(:c)"),
                              {"c": req["claim_ids"]}).mappings().all()
        incoming = lineages.target_claim_ids(conn, world.lineage)[f"{TAG}:incoming"]
        queued = {q for (q,) in conn.execute(text("SELECT claim_id FROM review_queue WHERE run_id = :r "
                                                   "AND claim_id = ANY(:c)"),
                                              {"r": body["run_id"], "c": req["claim_ids"]})}
    # the window's run: open while its window is, with what is fixed when it opens
    assert run["mode"] == "served" and run["parent_run_id"] == served_run and run["status"] == "running"
    assert run["params"]["served_run_id"] == served_run and "review" in run["params"]
    assert req["drift"] == body["drift"]  # the request's own figure
    assert req["key_id"] == world.scorer_key.id and req["run_id"] == body["run_id"]
    assert req["claim_ids"] == [x["claim_id"] for x in body["results"]]
    assert {(c["dataset"], c["split"]) for c in claims} == {(TAG, "api")}
    assert set(req["claim_ids"]) <= set(incoming)  # a person's label for one joins the lineage
    assert queued == {x["claim_id"] for x in body["results"] if x["review"]}


def test_one_text_a_paragraph_and_claimbusters_path_form(paper, world):
    one = post(paper, "/score/text", {"text": "  " + world.dev[0] + " "}, world.scorer).json()
    assert len(one["results"]) == 1 and one["results"][0]["text"] == world.dev[0].strip()
    para = "Mr. Smith said unemployment fell to 4.5% in 2016. That is false! We spent $1.5 billion on roads."
    got = post(paper, "/score/paragraph", {"text": para}, world.scorer).json()
    assert [x["text"] for x in got["results"]] == [
        "Mr. Smith said unemployment fell to 4.5% in 2016.", "That is false!", "We spent $1.5 billion on roads."]
    path = httpx.get(f"{paper.url}/score/text/Taxes went up by 20 percent", headers={"X-API-Key": world.scorer},
                     timeout=60).json()
    assert path["results"][0]["text"] == "Taxes went up by 20 percent"
    assert one["request_id"] != got["request_id"] != path["request_id"]


def test_explanations_for_scorer_and_auditor_keys(paper, world):
    body = post(paper, "/score/text", {"text": world.dev[1]}, world.scorer).json()
    sid = body["results"][0]["source_id"]
    for key in (world.auditor, world.scorer):
        r = httpx.get(f"{paper.url}/claims/{sid}/explanation", headers={"X-API-Key": key}, timeout=60)
        assert r.status_code == 200, r.text
        d = r.json()["decisions"][0]
        assert d["run_id"] == body["run_id"] and len(d["neighbours"]) == 5
        assert f"run {body['run_id']}" in d["explanation"]
    missing = httpx.get(f"{paper.url}/claims/no-such-claim/explanation", headers={"X-API-Key": world.auditor},
                        timeout=60)
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "claim"


def test_health_readiness_metrics_and_openapi(paper, world):
    assert httpx.get(f"{paper.url}/health").json() == {"status": "ok"}
    ready = httpx.get(f"{paper.url}/health/ready", timeout=60).json()
    assert ready["status"] == "ready" and ready["served_run"]["run_id"] == world.paper
    post(paper, "/score/sentences", {"sentences": world.dev[:3]}, world.scorer)
    metrics = httpx.get(f"{paper.url}/metrics").text
    assert 'checkworthy_api_claims_total{endpoint="sentences"}' in metrics
    assert "checkworthy_api_claims_review_total" in metrics and "checkworthy_api_drift_share" in metrics
    assert 'http_requests_total{handler="/score/sentences",method="POST",status="2xx"}' in metrics
    spec = httpx.get(f"{paper.url}/openapi.json").json()
    assert {"/score/text", "/score/sentences", "/score/paragraph", "/claims/{claim}/explanation"} <= set(spec["paths"])
    assert httpx.get(f"{paper.url}/docs").status_code == 200


REFUSED = [
    ("/score/text", {"text": ""}, 422, "text"),
    ("/score/text", {"text": "   \n "}, 422, "text"),
    ("/score/text", {"text": "x" * 401}, 422, "text"),
    ("/score/text", {"text": 5}, 422, "text"),
    ("/score/text", {"text": "ok", "extra": 1}, 422, "extra"),
    ("/score/text", {}, 422, "text"),
    ("/score/text", {"text": "a\x00b"}, 422, "text"),
    ("/score/sentences", {"sentences": []}, 422, "sentences"),
    ("/score/sentences", {"sentences": "one string"}, 422, "sentences"),
    ("/score/sentences", {"sentences": ["fine", 3]}, 422, "sentences[1]"),
    ("/score/sentences", {"sentences": ["fine", " "]}, 422, "sentences[1]"),
    ("/score/sentences", {"sentences": ["s"] * 41}, 422, "sentences"),
    ("/score/sentences", {"sentences": ["y" * 300] * 40}, 413, "body"),
    ("/score/paragraph", {"text": "Short one. " + "z" * 500 + "."}, 422, "text"),
    ("/score/paragraph", {"text": ""}, 422, "text"),
]


def test_bad_input_is_refused_with_a_json_error_and_nothing_stored(engine, paper, world):
    before = table_counts(engine)
    for path, body, status, field in REFUSED:
        r = post(paper, path, body, world.scorer)
        assert r.status_code == status, (path, body, r.text)
        err = r.json()["error"]
        assert err["field"] == field and err["message"] and "\n" not in err["message"], (path, body, err)
    raw = httpx.post(paper.url + "/score/text", content=b"{not json", timeout=30,
                     headers={"X-API-Key": world.scorer, "Content-Type": "application/json"})
    assert raw.status_code == 422 and raw.json()["error"]["code"] == "invalid"
    assert table_counts(engine) == before


def chunks(n: int, size: int, sent: list[int]):
    """A body of ``n`` chunks of ``size`` bytes, streamed (httpx sends it chunked); ``sent`` counts
    the chunks the client got to send."""
    for _ in range(n):
        sent[0] += 1
        yield b"x" * size


def test_the_key_is_checked_before_the_body_and_chunked_bodies_are_limited(engine, paper, world):
    """No key: 401 after the headers, the body never read (the server answers mid-body and the
    client stops sending); a chunked body over the limit: 413 at the byte over, not after reading
    it all; nothing stored. A chunked body within the limit is read and answered."""
    before = table_counts(engine)
    url = f"{paper.url}/score/text"
    assert answer_mid_body(paper.port, "/score/text", {}, chunks=1)[0] == 401
    status, body = answer_mid_body(paper.port, "/score/text", {"X-API-Key": "cwk_wrong"}, chunks=1)
    assert (status, body["error"]["code"]) == (401, "invalid_key")
    status, body = answer_mid_body(paper.port, "/score/text", {"X-API-Key": world.scorer},
                                   chunks=LIMITS.max_body // 1000 + 1)
    assert (status, body["error"]["code"], body["error"]["field"]) == (413, "too_large", "body")
    for key, status, code in [(None, 401, "missing_key"), (world.scorer, 413, "too_large")]:
        sent, started = [0], time.monotonic()
        r = httpx.post(url, content=chunks(300, 100_000, sent), headers={} if key is None else {"X-API-Key": key},
                       timeout=60)  # 30 MB, no Content-Length
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), r.text
        assert sent[0] < 300 and time.monotonic() - started < 20, (sent, time.monotonic() - started)
    assert table_counts(engine) == before
    one = json.dumps({"text": world.dev[3]}).encode()
    r = httpx.post(url, content=(one[i: i + 7] for i in range(0, len(one), 7)), timeout=120,
                   headers={"X-API-Key": world.scorer, "Content-Type": "application/json"})
    assert r.status_code == 200 and r.json()["results"][0]["text"] == world.dev[3].strip(), r.text


ODD = [  # what the store cannot hold, or an id it cannot look up: a JSON 4xx naming the field
    ("POST", "/score/text", '{"text": "a\\ud800b"}', 422, "text"),  # a lone surrogate
    ("POST", "/score/sentences", '{"sentences": ["fine", "x\\udfffy"]}', 422, "sentences[1]"),
    ("POST", "/score/paragraph", '{"text": "One. Two \\ud800."}', 422, "text"),
    ("POST", "/score/text", '{"text": "ok", "\\ud800": 1}', 422, "body"),  # a key pydantic cannot read
    ("GET", "/claims/a%00b/explanation", None, 422, "claim"),  # NUL: Postgres text refuses it
    ("GET", "/claims/id:%C2%B2/explanation", None, 422, "claim"),  # a digit to isdigit, not to int
    ("GET", f"/claims/id:{'9' * 25}/explanation", None, 422, "claim"),  # beyond bigint
    ("GET", f"/claims/x/explanation?run={'9' * 25}", None, 422, "run"),
    ("GET", "/claims/x/explanation?run=0", None, 422, "run"),
    ("GET", "/claims/x/explanation?dataset=a%00b", None, 422, "dataset"),
    ("GET", "/score/text/a%00b", None, 422, "input_text"),
]


def test_odd_input_is_a_json_4xx_naming_the_field_never_a_500(engine, paper, world):
    before = table_counts(engine)
    for method, path, body, status, field in ODD:
        r = httpx.request(method, paper.url + path, content=body, timeout=60,
                          headers={"X-API-Key": world.scorer, "Content-Type": "application/json"})
        assert r.status_code == status and r.headers["content-type"] == "application/json", (path, r.text)
        (line,) = r.text.splitlines()
        err = json.loads(line)["error"]
        assert err["field"] == field and err["message"], (path, err)
    assert table_counts(engine) == before


def test_an_unexpected_failure_is_a_json_500_without_a_traceback():
    """The handler ``create_app`` installs (``json_errors``), on an app whose route fails."""
    app = FastAPI()
    json_errors(app)

    @app.get("/fails")
    def fails() -> None:
        raise RuntimeError("a secret detail")

    server = LoopbackServer(app)
    try:
        r = httpx.get(f"{server.url}/fails", timeout=30)
    finally:
        server.close()
    assert r.status_code == 500 and r.json()["error"] == {
        "code": "internal", "message": "the server failed (RuntimeError); its log has the details", "field": None}
    assert "secret detail" not in r.text and "Traceback" not in r.text


def test_keys_missing_wrong_revoked_and_an_auditor_submitting(engine, paper, world, use_db, capsys):
    before = table_counts(engine)
    body = {"text": world.dev[2]}
    assert post(paper, "/score/text", body, None).json()["error"]["code"] == "missing_key"
    assert post(paper, "/score/text", body, "cwk_wrong").status_code == 401
    r = post(paper, "/score/text", body, world.auditor)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    assert table_counts(engine) == before
    assert main(["keys", "create", f"{TAG}-temp", "--role", "scorer"]) == 0
    secret = capsys.readouterr().out.split(": ", 1)[1].split()[0]
    assert post(paper, "/score/text", body, secret).status_code == 200
    assert main(["keys", "revoke", f"{TAG}-temp"]) == 0
    assert post(paper, "/score/text", body, secret).json()["error"]["code"] == "invalid_key"  # at once
    assert main(["keys", "revoke", f"{TAG}-temp"]) == 0 and "already" in capsys.readouterr().out
    assert main(["keys", "create", f"{TAG}-temp", "--role", "scorer"]) == 2  # names are never reused
    assert main(["keys", "create", "bad name", "--role", "scorer"]) == 2
    assert main(["keys", "revoke", "nobody"]) == 2
    assert main(["keys", "list"]) == 0
    listing = capsys.readouterr().out
    assert f"{TAG}-temp\tscorer" in listing and "revoked" in listing and secret not in listing
    with engine.connect() as conn:
        hashes = conn.execute(text("SELECT key_hash FROM api_keys")).scalars().all()
    assert api_keys.key_hash(secret) in hashes and secret not in hashes


def test_concurrent_requests_lose_and_duplicate_nothing(engine, paper, world):
    with engine.connect() as conn:
        n0 = conn.execute(text("SELECT count(*) FROM claims WHERE split = 'api'")).scalar_one()
    batches = [world.dev[i: i + 3] for i in range(0, 48, 3)]  # 16 requests, some texts repeated below
    batches += [world.dev[:3]] * 4
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda b: post(paper, "/score/sentences", {"sentences": b}, world.scorer), batches))
    assert all(a.status_code == 200 for a in answers)
    bodies = [a.json() for a in answers]
    ids = [r["claim_id"] for b in bodies for r in b["results"]]
    assert len(ids) == len(set(ids)) == 3 * len(batches)
    with engine.connect() as conn:
        n1 = conn.execute(text("SELECT count(*) FROM claims WHERE split = 'api'")).scalar_one()
        stored = {int(c) for (c,) in conn.execute(text(
            "SELECT unnest(claim_ids) FROM api_requests WHERE request_uid = ANY(CAST(:u AS uuid[]))"),
            {"u": [b["request_id"] for b in bodies]})}
        results = conn.execute(text("SELECT count(*) FROM calibrated_results WHERE run_id = ANY(:r) "
                                    "AND claim_id = ANY(:c)"),
                               {"r": [b["run_id"] for b in bodies], "c": ids}).scalar_one()
    assert n1 - n0 == len(ids) and stored == set(ids) and results == len(ids)
    same = [b["results"][i]["theta"] for b in bodies[-4:] for i in range(3)]
    assert same == [bodies[0]["results"][i]["theta"] for i in range(3)] * 4  # the same text, the same answer


def test_a_batch_from_another_domain_raises_the_drift_figure_and_event(engine, world, harness):
    """The drifting batch's claims go to a person (cause stored; those beyond the radius marked far),
    the answer and /metrics say so in a line, and the event carries it; the batch of the labelled
    kind is untouched."""
    server = Server(engine, Selection(world.lineage, {"correction": "paper"}))
    try:
        same = post(server, "/score/sentences", {"sentences": world.dev[20:40]}, world.scorer).json()
        calm = httpx.get(f"{server.url}/metrics").text
        # the event is the window's: none before a batch of it drifts
        window_event = str(uuid.uuid5(uuid.NAMESPACE_URL, f"checkworthy:drift:run:{same['run_id']}"))
        assert not event_stored(window_event)
        other = post(server, "/score/sentences", {"sentences": COOKING[:20]}, world.scorer).json()
        metrics = httpx.get(f"{server.url}/metrics").text
    finally:
        server.close()
    assert not same["drift"]["alert"] and same["drift"]["share"] <= same["drift"]["tolerance"]
    assert other["drift"]["alert"] and other["drift"]["share"] >= 0.9
    assert same["drift_notice"] is None and not any(r["far"] for r in same["results"])
    notice = other["drift_notice"]
    assert notice.startswith(f"drift: {other['drift']['share']:.0%} of this batch") and "review export" in notice
    far = [r for r in other["results"] if r["far"]]
    assert len(far) == other["drift"]["n_beyond"] and all(r["review"] for r in other["results"])
    assert all("far from every labelled claim" in r["reason"] for r in far)
    with engine.connect() as conn:
        causes = dict(conn.execute(text("SELECT claim_id, cause FROM review_queue WHERE run_id = :r "
                                        "AND claim_id = ANY(:c)"),
                                   {"r": other["run_id"], "c": [r["claim_id"] for r in other["results"]]}).all())
    assert causes == {r["claim_id"]: "drift" for r in other["results"]}
    assert 'checkworthy_api_drift_info{notice="no drift: ' in calm
    assert f'checkworthy_api_drift_info{{notice="{notice}"}} 1.0' in metrics
    assert 'checkworthy_api_claims_review_drift_total{endpoint="sentences"} 20.0' in metrics
    assert event_stored(str(uuid.uuid5(uuid.NAMESPACE_URL, f"checkworthy:drift:run:{other['run_id']}")))


def test_texts_in_a_language_the_labels_lack_are_held_back_and_named(engine, world):
    """Each answer carries its text's language; Arabic tweets against English labels go to a person
    (far, with the reason), the request's figure names the language and the notice says it, and so
    does the figure of the window's run holding it once the window is complete."""
    from checkworthy.data.datasets import load_tweets
    from checkworthy.data.language import detect
    from checkworthy.testing.datasets import raw_path

    tweets, _ = load_tweets(raw_path("multilingual", "arabic", "CT24_checkworthy_arabic_train.tsv"),
                            "ct24-train", dataset="tweets-ar")
    arabic = [t.text for t, d in zip(tweets[:20], detect(t.text for t in tweets[:20])) if d.code == "ar"][:3]
    close_window(engine, world)
    server = Server(engine, Selection(world.lineage, {"correction": "paper"}))
    try:
        body = post(server, "/score/sentences", {"sentences": world.dev[:3] + arabic}, world.scorer).json()
    finally:
        server.close()
    with engine.connect() as conn:
        window = load_run(conn, body["run_id"])
    assert window["status"] == "complete" and window["params"]["drift"]["languages"] == {"ar": 3}
    assert window["params"]["drift"]["n"] == 6
    got = [(r["language"], r["far"], r["review"]) for r in body["results"]]
    assert got[3:] == [("ar", True, True)] * 3 and [g[0] for g in got[:3]] == ["en"] * 3
    assert all("in a language none of the labelled claims is in" in r["reason"] for r in body["results"][3:])
    assert body["drift"]["languages"] == {"ar": 3}
    assert "3 claims in ar, a language the labelled set has none of: a person decides them" in body["drift_notice"]


def test_the_serve_command_starts_a_server_or_refuses_in_one_line(db_url, world, tmp_path):
    import os
    import subprocess
    import sys

    exe = os.path.join(os.path.dirname(sys.executable), "checkworthy")
    env = os.environ | {"DATABASE_URL": db_url}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bad_params = tmp_path / "params.yaml"
    bad_params.write_text(f"extends: {PARAMS_FILE.resolve()}\nserving: {{window_seconds: 0}}\n")
    bad = [(["--lineage", "no-such-lineage"], "no calibrated lineage of that name"),
           (["--lineage", world.lineage, "--model", "classifier:nothing"], "no complete calibration run"),
           (["--lineage", world.lineage, "--run", "999999"], "no complete calibration run"),
           (["--lineage", world.lineage, "--port", "0"], "--port"),
           (["--lineage", world.lineage, "--k", "five"], "--k"),
           (["--model", "classifier:nothing"], "no lineage has a complete run to serve"),
           (["--lineage", world.lineage, "--params", str(bad_params)], "field 'serving.window_seconds'")]
    for args, message in bad:
        done = subprocess.run([exe, "serve", *args], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, \
            (args, done.stderr)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        done = subprocess.run([exe, "serve", "--lineage", world.lineage, "--port", str(taken)], env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and "cannot listen there" in done.stderr
    proc = subprocess.Popen([exe, "serve", "--lineage", world.lineage, "--model", MODEL, "--k", "5",
                             "--correction", "paper", "--port", str(port)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert ready_once_listening(port).json()["served_run"]["run_id"] == world.paper
        r = httpx.post(f"http://127.0.0.1:{port}/score/text", json={"text": world.dev[5]},
                       headers={"X-API-Key": world.scorer}, timeout=60)
        assert r.status_code == 200 and r.json()["served_run"]["run_id"] == world.paper
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    assert f"serving run {world.paper} of {world.lineage}" in out
    with db_engine(db_url) as conn:  # its shutdown completed the window holding the request
        assert load_run(conn, r.json()["run_id"])["status"] == "complete"


def test_serve_without_a_lineage_serves_the_newest_run_and_says_which(db_url, world):
    """Without ``--lineage``: the only lineage with a run the options select, else the one whose
    run is newest (here the world's, the newest run of this model), named in the first line."""
    import os
    import subprocess
    import sys

    exe = os.path.join(os.path.dirname(sys.executable), "checkworthy")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "serve", "--model", MODEL, "--k", "5", "--correction", "paper",
                             "--port", str(port)], env=os.environ | {"DATABASE_URL": db_url},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert ready_once_listening(port).json()["served_run"]["run_id"] == world.paper
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    first, second = out.splitlines()[:2]
    said = first.removeprefix(f"lineage {world.lineage}: ")
    assert said == "the only lineage with a run to serve" or (
        said.startswith(f"its run {world.paper} is the newest of the ") and said.endswith(
            " lineages with a run to serve (--lineage chooses another)")), out
    assert second.startswith(f"serving run {world.paper} of {world.lineage} ")


@contextlib.contextmanager
def db_engine(db_url: str):
    """A connection to the test database from an engine of its own (like another process's)."""
    eng = create_engine(db_url)
    try:
        with eng.connect() as conn:
            yield conn
    finally:
        eng.dispose()


def served_runs_of(engine, served_run: int) -> dict[int, str]:
    """The runs of mode ``served`` whose parent is ``served_run``, with their status."""
    with engine.connect() as conn:
        return dict(conn.execute(text("SELECT id, status FROM calibration_runs WHERE mode = 'served' "
                                      "AND parent_run_id = :p"), {"p": served_run}).all())


def close_window(engine, world) -> None:
    """Complete the paper run's open window, if any (a server loading the run, then shutting down)."""
    server = Server(engine, Selection(world.lineage, {"correction": "paper"}))
    try:
        assert httpx.get(f"{server.url}/health/ready", timeout=60).status_code == 200
    finally:
        server.close()
    assert "running" not in served_runs_of(engine, world.paper).values()


def test_a_burst_of_single_texts_is_one_run_of_its_window(engine, world, use_db, capsys):
    """50 one-text requests within a window, from 8 threads over two servers (two workers of one
    deployment), store one run of mode served holding the 50 results, not 50 runs; each request's
    row points at it; explain works for its claims while it is open; shutting down completes it
    with the window's counts and figures; the answers are those of a batch run."""
    close_window(engine, world)
    before = served_runs_of(engine, world.paper)
    servers = [Server(engine, Selection(world.lineage, {"correction": "paper"}), window=600) for _ in range(2)]
    texts = world.dev[:50]
    try:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: post(servers[i % 2], "/score/text", {"text": texts[i]},
                                                   world.scorer), range(50)))
        assert all(a.status_code == 200 for a in answers), [a.text for a in answers if a.status_code != 200]
        bodies = [a.json() for a in answers]
        (run_id,) = {b["run_id"] for b in bodies}
        ids = [b["results"][0]["claim_id"] for b in bodies]
        with engine.connect() as conn:
            requests = conn.execute(text("SELECT request_uid, run_id, claim_ids, drift FROM api_requests "
                                         "WHERE request_uid = ANY(CAST(:u AS uuid[]))"),
                                    {"u": [b["request_id"] for b in bodies]}).mappings().all()
            results = conn.execute(text("SELECT claim_id, theta FROM calibrated_results WHERE run_id = :r"),
                                   {"r": run_id}).all()
            queued = conn.execute(text("SELECT count(*) FROM review_queue WHERE run_id = :r"),
                                  {"r": run_id}).scalar_one()
        assert {i: s for i, s in served_runs_of(engine, world.paper).items() if i not in before} == {
            run_id: "running"}
        assert len(requests) == 50 and {r["run_id"] for r in requests} == {run_id}
        by_uid = {str(r["request_uid"]): r for r in requests}
        assert all(by_uid[b["request_id"]]["claim_ids"] == [b["results"][0]["claim_id"]] for b in bodies)
        assert all(by_uid[b["request_id"]]["drift"] == b["drift"] for b in bodies)
        assert dict(results) == {b["results"][0]["claim_id"]: b["results"][0]["theta"] for b in bodies}
        assert queued == sum(b["results"][0]["review"] for b in bodies)
        r = httpx.get(f"{servers[0].url}/claims/id:{ids[7]}/explanation", headers={"X-API-Key": world.auditor},
                      timeout=60)
        assert r.status_code == 200 and r.json()["decisions"][0]["run_id"] == run_id
        assert main(["explain", f"id:{ids[7]}"]) == 0
        assert f"in run {run_id} [running]" in capsys.readouterr().out
    finally:
        for server in servers:
            server.close()
    with engine.connect() as conn:
        run = load_run(conn, run_id)
    p = run["params"]
    assert run["status"] == "complete" and run["finished_at"] is not None
    assert (p["n_requests"], p["n_claims"], p["n_calibrated"], p["n_without_score"]) == (50, 50, 50, 0)
    assert p["drift"]["n"] == 50 and p["window_seconds"] == 600
    assert p["review"]["automated_share"] == 1 - queued / 50
    assert main(["explain", f"id:{ids[7]}"]) == 0 and f"in run {run_id} [complete]" in capsys.readouterr().out
    assert_equals_batch(engine, world, world.paper, {"results": [b["results"][0] for b in bodies]})


def test_a_request_after_the_window_opens_a_new_run(engine, world):
    """The first request after the window completes its run and opens the next."""
    close_window(engine, world)
    server = Server(engine, Selection(world.lineage, {"correction": "paper"}), window=8)
    try:
        first = post(server, "/score/text", {"text": world.dev[50]}, world.scorer).json()
        second = post(server, "/score/text", {"text": world.dev[51]}, world.scorer).json()
        time.sleep(8)
        third = post(server, "/score/text", {"text": world.dev[52]}, world.scorer).json()
        runs = served_runs_of(engine, world.paper)
        assert first["run_id"] == second["run_id"] != third["run_id"]
        assert runs[first["run_id"]] == "complete" and runs[third["run_id"]] == "running"
    finally:
        server.close()
    with engine.connect() as conn:
        done, last = load_run(conn, first["run_id"]), load_run(conn, third["run_id"])
    assert (done["params"]["n_requests"], done["params"]["n_claims"]) == (2, 2)
    assert last["status"] == "complete" and last["params"]["n_requests"] == 1


def test_a_window_a_killed_server_left_open_is_closed_as_abandoned_and_keeps_its_rows(engine, world):
    """While a server lives, the abandoned-runs check leaves its open window alone; once its
    session is gone (the process killed), the check closes it as abandoned, its results, queue
    entries and request rows kept and explained; the server's next request opens a new window."""
    from checkworthy.store.calibration_runs import close_abandoned_runs

    close_window(engine, world)
    server = Server(engine, Selection(world.lineage, {"correction": "paper"}), window=600)
    try:
        body = post(server, "/score/sentences", {"sentences": world.dev[53:56]}, world.scorer).json()
        with engine.connect() as conn:
            assert body["run_id"] not in close_abandoned_runs(conn, "test")
            key = load_run(conn, body["run_id"])["run_key"]
            holders = conn.execute(text(
                """SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
                   AND classid::bigint = (hashtextextended(:k, 0) >> 32) & 4294967295
                   AND objid::bigint = hashtextextended(:k, 0) & 4294967295"""), {"k": key}).scalars().all()
            assert len(holders) == 1
            conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": holders[0]})  # as if killed
            conn.commit()
            for _ in range(50):
                if body["run_id"] in (closed := close_abandoned_runs(conn, "test")):
                    break
                time.sleep(0.1)
            assert body["run_id"] in closed
            run = load_run(conn, body["run_id"])
            n_results = conn.execute(text("SELECT count(*) FROM calibrated_results WHERE run_id = :r"),
                                     {"r": body["run_id"]}).scalar_one()
            req = conn.execute(text("SELECT run_id FROM api_requests WHERE request_uid = :u"),
                               {"u": body["request_id"]}).scalar_one()
        assert run["status"] == "abandoned" and n_results == 3 and req == body["run_id"]
        why = httpx.get(f"{server.url}/claims/id:{body['results'][0]['claim_id']}/explanation",
                        headers={"X-API-Key": world.auditor}, timeout=60).json()["decisions"][0]
        assert why["run_id"] == body["run_id"] and why["run_status"] == "abandoned"
        after = post(server, "/score/text", {"text": world.dev[56]}, world.scorer)
        assert after.status_code == 200 and after.json()["run_id"] != body["run_id"]
    finally:
        server.close()
    assert served_runs_of(engine, world.paper)[after.json()["run_id"]] == "complete"
