"""The HTTP API against the same scoring called directly: claims/s and p50/p95 latency.

Setting: a fresh embedded Postgres; a lineage of CLEF 2024 training claims (``--labelled``, half
of each class) scored by the model under test and embedded by MiniLM, calibrated with the paper's
NN-PPI (k = 10), called by a real HTTP client (httpx) on loopback, one request at a time. Three
models (``--arms``):

- ``predict``: params.yaml's ``predict.model`` (the recommended ensemble, on the runtime its
  classifiers use), served by a real ``checkworthy serve`` process on the bench's database;
- ``embedded``: the embedded Gemma 3 270M (params.yaml's configuration: verbalised score and token
  probability), ``checkworthy serve``'s app under a uvicorn server in this process;
- ``ollama``: Ollama's ``gemma3:270m`` answered by a fake Ollama on loopback
  (``checkworthy.testing.fake_ollama``) that waits 50 ms per request, 4 requests in flight (the
  scorer's ``concurrency``), served like ``embedded``.

For each: ``--singles`` requests of one text and ``--batches`` requests of 100 texts through the
API, after a first request that loads the models, and the same numbers of calls of
:meth:`checkworthy.runs.served_run.ServedRun.submit` (what the API calls) directly. Every text is
a CLEF claim never scored before (a stored score would be reused, not recomputed), drawn afresh
for each arm. The API's overhead is its total time over the direct total, minus one. Beside the
predict arm's latencies: their ceiling, the request's floating-point operations at this machine's
fp32 matrix-product peak (:mod:`checkworthy.testing.flops`). Prints a table and a JSON line. Run
from the repository root: ``.venv/bin/python -m bench.bench_api [--arms predict]`` (about 8
minutes on 2 cores, the embedded Gemma's scoring dominating).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx
import numpy as np
import uvicorn

from checkworthy.config import PARAMS_FILE, VAR_DIR, load_params, quiet_offline_env
from checkworthy.data.datasets import load_clef
from checkworthy.data.text import normalise_text
from checkworthy.flows.api_events import FlowEvents
from checkworthy.runs.calibration_run import run_calibration
from checkworthy.runs.embedding import ensure_embeddings
from checkworthy.runs.scoring import score_missing
from checkworthy.scorers.classifier import model_type
from checkworthy.scorers.lora_classifier import MINILM, base_of
from checkworthy.scorers.registry import make_scorer
from checkworthy.serve.app import create_app
from checkworthy.serve.inputs import Limits
from checkworthy.serve.served import Selection
from checkworthy.store import api_keys, lineages
from checkworthy.store import rows as store
from checkworthy.store.engine import embedded_url, get_engine
from checkworthy.store.run_spec import RunMethods, RunSpec
from checkworthy.testing.datasets import raw_path
from checkworthy.testing.fake_ollama import FakeOllama
from checkworthy.testing.flops import base_flops, peak_flops

GEMMA, OLLAMA = "embedded:gemma3-270m", "ollama:gemma3:270m"
ARMS = ("predict", "embedded", "ollama")


def claims() -> tuple[list[Any], list[str]]:
    """CLEF 2024 training claims (for L) and the dev-test texts (to submit), texts unique."""
    train, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_train.tsv"), "train")
    seen: set[str] = set()
    unique = [c for c in train if not (normalise_text(c.text) in seen or seen.add(normalise_text(c.text)))]
    return unique[:4000], [c.text for c in unique[4000:]]


def build_lineage(engine, tag: str, spec: str, options: dict[str, Any], lab: Sequence[Any]) -> int:
    """Store, embed and score L; calibrate a small target with the paper's NN-PPI; return the run."""
    scorer, prompt = make_scorer(spec, **options)
    with engine.begin() as conn:
        ids = store.store_claims_with_labels(
            conn, [store.NewClaim(tag, "train", c.source_id, c.text, c.label) for c in lab], "bench")
        ensure_embeddings(conn, [store.sha256_text(c.text) for c in lab])
        ls = store.create_label_set(conn, f"{tag}:calibration", ids[10:])
        lineages.register_target(conn, f"{tag}:test", f"{tag}:calibration", ids[:10])
        lineages.set_head(conn, f"{tag}:calibration", ls, "initial")
    keys = score_missing(engine, scorer, [store.sha256_text(c.text) for c in lab], prompt)[2]
    kind = next(k for k in ("token_prob", "p_positive") if k in keys)
    return run_calibration(engine, RunSpec(f"{tag}:test", tuple(ids[:10]), ls, keys[kind], RunMethods(10)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(app) -> Iterator[str]:
    """``app`` under a uvicorn server in this process."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextlib.contextmanager
def serve_command(db_url: str, lineage: str) -> Iterator[str]:
    """A ``checkworthy serve`` process serving ``lineage``'s newest run, once it answers."""
    port = free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "checkworthy")
    proc = subprocess.Popen([exe, "serve", "--lineage", lineage, "--any-model", "--port", str(port)],
                            env=os.environ | {"DATABASE_URL": db_url}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                httpx.get(url + "/health/ready", timeout=5).raise_for_status()
                break
            except httpx.HTTPError:
                if proc.poll() is not None:
                    raise RuntimeError(f"checkworthy serve exited with status {proc.returncode}") from None
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def timed(calls: Sequence[Callable[[], object]]) -> list[float]:
    out = []
    for call in calls:
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


def figures(times: list[float], per_call: int) -> dict[str, float]:
    return {"claims_per_s": per_call * len(times) / sum(times),
            "p50_ms": 1000 * float(np.percentile(times, 50)),
            "p95_ms": 1000 * float(np.percentile(times, 95)), "calls": len(times)}


def measure(engine, tag: str, params: dict[str, Any], pool: list[str], counts: tuple[int, int],
            process_url: str | None = None) -> list[dict[str, Any]]:
    """Singles and batches of 100 (``counts``), through the API and directly, each on texts never
    seen; the API in this process, or the ``checkworthy serve`` process at ``process_url``."""
    app = create_app(engine, Selection(f"{tag}:calibration"), params, Limits(max_batch=100),
                     events=FlowEvents())
    served = app.state.api.current.get()
    with engine.begin() as conn:
        key, secret = api_keys.create_key(conn, f"{tag}-bench", "scorer")
    rows = []
    headers = {"X-API-Key": secret}
    with (contextlib.nullcontext(process_url) if process_url else serving(app)) as url, \
            httpx.Client(base_url=url, headers=headers, timeout=600) as client:
        client.post("/score/text", json={"text": pool.pop()}).raise_for_status()  # warm both paths
        served.submit([pool.pop()], key.id, "direct")
        for size, n in zip((1, 100), counts, strict=True):
            api_texts = [[pool.pop() for _ in range(size)] for _ in range(n)]
            direct_texts = [[pool.pop() for _ in range(size)] for _ in range(n)]

            def api_call(texts: list[str]) -> Callable[[], object]:
                return lambda: client.post("/score/sentences", json={"sentences": texts}).raise_for_status()

            def direct_call(texts: list[str]) -> Callable[[], object]:
                return lambda: served.submit(texts, key.id, "direct")

            api = timed([api_call(t) for t in api_texts])
            direct = timed([direct_call(t) for t in direct_texts])
            rows.append({"model": served.model, "texts_per_request": size,
                         "served_by": "checkworthy serve" if process_url else "app in process",
                         "api": figures(api, size), "direct": figures(direct, size),
                         "overhead": sum(api) / sum(direct) - 1})
    return rows


def predict_ceiling(spec: str, texts: list[str]) -> float:
    """Seconds a claim of ``spec`` (an ensemble of LoRA classifiers, or one) and its embedding take
    at least: their floating-point operations at the fp32 peak."""
    refs = spec.partition(":")[2].split("+")
    passes = [MINILM] + [base_of(model_type(r)) for r in refs]
    return sum(base_flops(base, texts) for base in passes) / peak_flops()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--labelled", type=int, default=300, help="claims in L (default 300)")
    ap.add_argument("--singles", type=int, default=30, help="one-text requests per arm (default 30)")
    ap.add_argument("--batches", type=int, default=3, help="100-text requests per arm (default 3)")
    ap.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS), help="models to serve")
    args = ap.parse_args()
    quiet_offline_env()
    db_url = embedded_url(VAR_DIR / f"bench-api-{os.getpid()}", database="bench", cleanup_mode="delete")
    engine = get_engine(db_url)
    train, pool = claims()
    rng = np.random.default_rng(0)
    pos = [c for c in train if c.label == 1][: args.labelled // 2]
    neg = [c for c in train if c.label == 0][: args.labelled // 2]
    lab = [x for pair in zip(pos, neg) for x in pair]
    pool = [pool[i] for i in rng.permutation(len(pool))]
    params = load_params(PARAMS_FILE)
    scoring = dict(params.get("scoring") or {})
    counts = (args.singles, args.batches)
    rows, ceiling = [], None
    if "predict" in args.arms:
        spec = params["predict"]["model"]
        ceiling = predict_ceiling(spec, pool[:200])
        build_lineage(engine, "predict", spec, scoring, lab)
        with serve_command(db_url, "predict:calibration") as url:
            rows += measure(engine, "predict", params, pool, counts, url)
    if "embedded" in args.arms:
        build_lineage(engine, "gemma", GEMMA, scoring, lab)
        rows += measure(engine, "gemma", params, pool, counts)
    if "ollama" in args.arms:
        with FakeOllama() as srv:
            srv.latency = 0.05
            entry = {"spec": OLLAMA, "host": srv.url, "concurrency": 4}
            build_lineage(engine, "ollama", OLLAMA, {"host": srv.url, "concurrency": 4}, lab)
            rows += measure(engine, "ollama", {"models": [entry]}, pool, counts)
    for r in rows:
        if r["served_by"] == "checkworthy serve" and ceiling:
            r["ceiling_ms"] = 1000 * ceiling * r["texts_per_request"]
    print(f"load average {os.getloadavg()[0]:.2f}; L = {len(lab)} claims, k = 10, paper NN-PPI")
    print("| model | served by | texts/request | API claims/s | API p50 ms | API p95 ms | ceiling ms "
          "| direct claims/s | direct p50 ms | direct p95 ms | API overhead |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        a, d = r["api"], r["direct"]
        print(f"| {r['model']} | {r['served_by']} | {r['texts_per_request']} | {a['claims_per_s']:.1f} | "
              f"{a['p50_ms']:.0f} | {a['p95_ms']:.0f} | "
              + (f"{r['ceiling_ms']:.0f}" if "ceiling_ms" in r else "--")
              + f" | {d['claims_per_s']:.1f} | {d['p50_ms']:.0f} | {d['p95_ms']:.0f} | "
              f"{r['overhead']:+.1%} |")
    print(json.dumps({"bench": "api", "rows": rows}))


if __name__ == "__main__":
    main()
