"""Scoring fanned out on Dask workers: claims/s and claims per day per core, 1 and 2 workers.

The ``score-and-embed`` flow (:func:`checkworthy.flows.pipeline.fan_out`) over CLEF 2024 training
sentences, on a local Dask cluster of 1 or 2 worker processes (one thread each) started before
the clock (a running cluster, as in production), and on threads in this process (no Dask).
Models: the embedded Gemma 3 270M's token probability (``mode: token_prob``, the score the
recommended embedded path uses), and Ollama's protocol answered by the loopback fake with 50 ms
per request (``concurrency: 1`` per worker, so the model's latency bounds each worker). Every run
embeds and scores its own ``--n`` texts, none seen before (a stored score or vector is reused,
not recomputed), after a first batch of its own has loaded the models in every worker; each is
run again with its texts embedded before the clock, which times the scoring alone (on two
shared cores the local MiniLM embedding competes with the workers, where on a cluster each
worker embeds on its own cores). Dask
workers are other processes and report to a Prefect API they can reach: the bench starts a
temporary Prefect server (Prefect's test harness) and exports its address. Prints a table and a
JSON line. Run from the repository root:
``.venv/bin/python -m bench.bench_scale [--n 480]`` (about 10 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any
from unittest.mock import patch

import dask
from distributed import LocalCluster
from prefect.settings import PREFECT_API_URL
from prefect.testing.utilities import prefect_test_harness

from checkworthy.config import VAR_DIR, quiet_offline_env
from checkworthy.data.datasets import load_clef
from checkworthy.flows.pipeline import fan_out
from checkworthy.flows.task_runners import WORKER_ENVIRON
from checkworthy.runs.flow_types import FlowContext
from checkworthy.store import rows as store
from checkworthy.store.engine import embedded_url, get_engine
from checkworthy.testing.datasets import raw_path
from checkworthy.testing.fake_ollama import FakeOllama

DAY, CORES = 86_400, os.cpu_count() or 2
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def texts(n: int) -> list[str]:
    claims, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_train.tsv"), "train")
    return list(dict.fromkeys(c.text for c in claims))[:n]


def run(ids: list[int], warm: list[int], db_url: str, model: dict[str, Any], workers: int | None,
        chunk: int, embedded: bool) -> float:
    """Seconds to embed (unless ``embedded``: done before the clock) and score ``ids`` on
    ``workers`` Dask workers (None: threads in this process), after a first batch (``warm``) has
    loaded the models off the clock. Each worker gets
    cores / workers threads for OpenMP and for the BLAS (torch's matrix products run on MKL, which
    Dask's nanny would limit to one thread apart from OpenMP), so the workers neither idle nor
    fight over the cores. They are set in this process's environment for the cluster's life: the
    nanny copies its pre-spawn variables into this process's environment, where they then
    override the Dask setting for every later cluster. Their memory settings are the local
    cluster's (:data:`~checkworthy.flows.task_runners.WORKER_ENVIRON`)."""
    params = {"models": [model], "scale_out": {"dask": None, "chunk_size": chunk}}
    ctx = FlowContext(db_url=db_url)
    if embedded:
        fan_out(ids, {"models": [], "scale_out": {"dask": None, "chunk_size": chunk}}, ctx)
    if workers is None:
        fan_out(warm, params, ctx)
        t0 = time.perf_counter()
        fan_out(ids, params, ctx)
        return time.perf_counter() - t0
    threads = str(max(1, CORES // workers))  # Dask's nanny would start every worker with 1
    with patch.dict(os.environ, {name: threads for name in THREAD_VARIABLES}), \
            dask.config.set(WORKER_ENVIRON), \
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                         dashboard_address=None) as cluster:
        params["scale_out"]["dask"] = cluster.scheduler_address
        fan_out(warm, params, ctx)
        t0 = time.perf_counter()
        fan_out(ids, params, ctx)
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=480, help="texts per run (default 480)")
    ap.add_argument("--chunk", type=int, default=48, help="texts per task (default 48)")
    args = ap.parse_args()
    quiet_offline_env()
    db_url = embedded_url(VAR_DIR / f"pg-bench-scale-{os.getpid()}", "bench", cleanup_mode="delete")
    engine = get_engine(db_url)
    os.environ["DATABASE_URL"] = db_url
    runs, warm = 12, 2 * args.chunk  # warm: enough chunks for every worker
    with engine.begin() as conn:
        ids = store.upsert_claims(conn, [store.NewClaim("bench", "x", str(i), t)
                                         for i, t in enumerate(texts((args.n + warm) * runs))])
    size = args.n + warm
    batches = iter([(ids[i * size + warm: (i + 1) * size], ids[i * size: i * size + warm])
                    for i in range(runs)])
    rows = []
    with prefect_test_harness(server_startup_timeout=120), FakeOllama() as srv:
        os.environ["PREFECT_API_URL"] = PREFECT_API_URL.value()
        fan_out([], {"models": []}, FlowContext(db_url=db_url))  # the API's first flow run, off the clock
        srv.latency = 0.05
        models = [("embedded Gemma 3 270M, token probability",
                   {"spec": "embedded:gemma3-270m", "mode": "token_prob"}),
                  ("Ollama (fake, 50 ms)", {"spec": "ollama:gemma3:270m", "host": srv.url, "concurrency": 1})]
        for name, model in models:
            for embedded in (False, True):
                for workers in (None, 1, 2):
                    t = run(*next(batches), db_url, model, workers, args.chunk, embedded)
                    rate = args.n / t
                    rows.append({"model": name, "timed": "score" if embedded else "embed + score",
                                 "workers": workers or 0, "seconds": t, "claims_per_s": rate,
                                 "claims_per_day": rate * DAY, "claims_per_day_per_core": rate * DAY / CORES})
    engine.dispose()
    print(f"load average {os.getloadavg()[0]:.2f}; {args.n} texts a run, {args.chunk} a task, {CORES} cores")
    print("| model | timed | Dask workers | claims/s | claims/day | claims/day/core |\n"
          "|---|---|---:|---:|---:|---:|")
    for r in rows:
        w = r["workers"] or "none (threads)"
        print(f"| {r['model']} | {r['timed']} | {w} | {r['claims_per_s']:.1f} | {r['claims_per_day']:,.0f} | "
              f"{r['claims_per_day_per_core']:,.0f} |")
    print(json.dumps({"bench": "scale", "rows": rows}))


if __name__ == "__main__":
    main()
