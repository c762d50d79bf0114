"""Embedding and scoring fanned out on a real local Dask cluster (prefect-dask) of 2 worker
processes, against the same flow on threads; and a worker killed mid-chunk.

The model is Ollama's protocol answered by the loopback fake (checkworthy.testing.fake_ollama; no model can
run in two processes here in reasonable time): its answer depends on the text alone, so a text
scored under the wrong claim or twice would show. Each run uses its own ``seed`` option, so each
stores its own scores (the store never scores a text twice under one key).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from unittest import mock

import pytest
from distributed import Client, LocalCluster
from sqlalchemy import text

from checkworthy.data.datasets import load_clef
from checkworthy.flows.pipeline import fan_out
from checkworthy.flows.task_runners import dask_address, task_runner
from checkworthy.runs.flow_types import FlowContext, ScoredKey
from checkworthy.store import rows as store
from checkworthy.testing.datasets import raw_path
from checkworthy.testing.fake_ollama import FakeOllama

TAG = "t13-dask"
N = 96


@pytest.fixture(scope="module")
def world(engine):
    claims, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev.tsv"), "dev")
    texts = list(dict.fromkeys(c.text for c in claims))[:N]
    with engine.begin() as conn:
        ids = store.upsert_claims(conn, [store.NewClaim(TAG, "x", str(i), t) for i, t in enumerate(texts)])
    return ids, texts


@pytest.fixture()
def workers_see_the_api(harness, monkeypatch):
    """Dask workers are other processes: they learn the test's Prefect API from the environment."""
    from prefect.settings import PREFECT_API_URL

    monkeypatch.setenv("PREFECT_API_URL", PREFECT_API_URL.value())


def params(url: str, seed: int, dask: str | None, chunk: int = 16) -> dict:
    return {"models": [{"spec": "ollama:gemma3:270m", "host": url, "seed": seed, "concurrency": 2}],
            "scale_out": {"dask": dask, "workers": 2, "chunk_size": chunk}}


def stored(engine, key: ScoredKey, texts: list[str]) -> dict[str, list[float]]:
    with engine.connect() as conn:
        rows = conn.execute(text(
            """SELECT t.text, p.score FROM predictions p JOIN texts t ON t.text_hash = p.text_hash
               WHERE p.model_id = :m AND p.prompt_version = :pv AND p.params_hash = :ph AND p.score_kind = :sk
                 AND t.text = ANY(:t)"""),
            {"m": key.model_id, "pv": key.prompt_version, "ph": key.params_hash,
             "sk": key.score_kind, "t": texts}).all()
    out: dict[str, list[float]] = {}
    for t, score in rows:
        out.setdefault(t, []).append(score)
    return out


def test_the_runner_follows_params_and_the_environment(monkeypatch):
    assert dask_address({}) is None and type(task_runner({})).__name__ == "ThreadPoolTaskRunner"
    assert type(task_runner({"scale_out": {"dask": "local"}})).__name__ == "DaskTaskRunner"
    monkeypatch.setenv("CHECKWORTHY_DASK_ADDRESS", "tcp://10.0.0.5:8786")
    assert dask_address({"scale_out": {"dask": "local"}}) == "tcp://10.0.0.5:8786"


def test_local_workers_start_without_the_nannys_trim_threshold():
    """Once a local cluster is asked for, the workers this process starts run without Dask's
    ``MALLOC_TRIM_THRESHOLD_`` (under which torch maps and unmaps its tensors on every pass)."""
    with mock.patch.dict(os.environ):  # the nanny writes its variables into this environment
        os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)  # left by an earlier cluster of this process
        task_runner({"scale_out": {"dask": "local"}})
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            seen = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
    assert list(seen.values()) == [None]


def test_two_dask_workers_store_the_same_scores_as_threads(engine, db_url, world, workers_see_the_api):
    ids, texts = world
    with FakeOllama() as srv:
        on_threads = fan_out(ids, params(srv.url, 1, None), FlowContext(db_url=db_url))
        on_dask = fan_out(ids, params(srv.url, 2, "local"), FlowContext(db_url=db_url))
    by_kind = {(k.score_kind, k.params_hash): k for k in on_threads + on_dask}
    assert len(by_kind) == len(on_threads) + len(on_dask) and on_threads  # two keys per score kind
    for a in on_threads:
        b = next(k for k in on_dask if k.score_kind == a.score_kind)
        sa, sb = stored(engine, a, texts), stored(engine, b, texts)
        assert len(sa) == len(sb) == N  # every text, once
        assert all(len(v) == 1 for v in sa.values()) and all(len(v) == 1 for v in sb.values())
        assert sa == sb  # the same score for every text whatever ran it
    with engine.connect() as conn:
        n_emb = conn.execute(text("SELECT count(*) FROM embeddings e JOIN texts t ON t.text_hash = e.text_hash "
                                  "WHERE t.text = ANY(:t)"), {"t": texts}).scalar_one()
    assert n_emb == N


def test_a_worker_killed_mid_chunk_loses_nothing_and_stores_nothing_twice(engine, db_url, world,
                                                                           workers_see_the_api):
    ids, texts = world
    with FakeOllama() as srv, LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=None) as cluster, Client(cluster) as client:
        srv.latency = 0.15  # a chunk of 8 texts takes ~0.6 s at 2 in flight
        pids = list(client.run(os.getpid).values())
        killed: list[int] = []

        def kill_one_when_scoring_started() -> None:
            for _ in range(6000):  # workers take seconds to start
                if len(srv.model_requests()) >= 6:  # mid-way through the first chunks
                    os.kill(pids[0], signal.SIGKILL)
                    killed.append(pids[0])
                    return
                time.sleep(0.02)

        killer = threading.Thread(target=kill_one_when_scoring_started)
        killer.start()
        keys = fan_out(ids, params(srv.url, 3, cluster.scheduler_address, chunk=8), FlowContext(db_url=db_url))
        killer.join()
        n_requests = len(srv.model_requests())
    assert killed
    for key in keys:
        s = stored(engine, key, texts)
        assert len(s) == N and all(len(v) == 1 for v in s.values())  # nothing lost, nothing twice
    # the killed chunk's texts were asked again (at most one chunk of 8, per score kind's request)
    assert N <= n_requests <= N + 8
