"""Claims per second of each scoring backend and mode on this machine (the embedded Gemma scorer is
benchmarked in ``bench/bench_scoring.py``).

* Ollama (chat / generate / raw, JSON or NDJSON-streamed, 1 or 4 requests in flight) and the
  OpenAI-compatible backend (JSON or SSE) run against the loopback fakes of ``checkworthy.testing``, which
  answer at once (``latency 0``: the client-side ceiling, i.e. prompt building, HTTP, parsing) or
  after a fixed delay per request (``latency 50 ms``: how bounded concurrency hides a model's
  latency). Neither measures a real model: with Ollama on CPU, generation time dominates.
* The classifier: MiniLM embedding + logistic head on real ClaimBuster 2016 claims (model load
  excluded, reported apart).
* Imported scores: lookups in a CSV of the same claims.

Run: ``.venv/bin/python bench/bench_backends.py [--n 200] [--classifier-n 256]``.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from checkworthy.config import DATA_DIR, quiet_offline_env
from checkworthy.data.datasets import load_claimbuster
from checkworthy.scorers.http_retry import RetryPolicy
from checkworthy.scorers.ollama_backend import OllamaOptions, OllamaScorer
from checkworthy.scorers.openai_backend import OpenAIOptions, OpenAIScorer
from checkworthy.testing.fake_ollama import FakeOllama
from checkworthy.testing.fake_openai import FakeOpenAI


def rate(score: Callable[[Sequence[str]], object], texts: Sequence[str]) -> float:
    """Claims per second of one ``score(texts)`` call."""
    t0 = time.perf_counter()
    score(texts)
    return len(texts) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200, help="claims per LLM-backend run at latency 0")
    ap.add_argument("--classifier-n", type=int, default=256)
    args = ap.parse_args()
    quiet_offline_env()
    claims, _ = load_claimbuster(DATA_DIR / "raw" / "claimbuster" / "crowdsourced.csv")
    texts = [c.text for c in claims if c.split == "2016"]
    rows: list[tuple[str, str, str, float]] = []
    retry = RetryPolicy(max_retries=0)

    with FakeOllama() as srv:
        for latency, n in ((0.0, args.n), (0.05, 40)):
            srv.latency = latency
            for mode in ("chat", "generate", "raw"):
                for stream in (False, True):
                    for conc in (1, 4):
                        s = OllamaScorer("gemma3:1b", OllamaOptions(mode=mode, host=srv.url, stream=stream,
                                                                    concurrency=conc, retry=retry))
                        s.params()
                        r = rate(s.score, texts[:n])
                        rows.append(("ollama", f"{mode}, {'ndjson' if stream else 'json'}, {conc} in flight",
                                     f"{latency * 1000:.0f} ms", r))
    with FakeOpenAI() as srv:
        for latency, n in ((0.0, args.n), (0.05, 40)):
            srv.latency = latency
            for stream in (False, True):
                for conc in (1, 4):
                    options = OpenAIOptions(base_url=srv.url + "/v1", api_key="sk-test", stream=stream,
                                            concurrency=conc, retry=retry)
                    s = OpenAIScorer("gpt-4o-mini", options)
                    r = rate(s.score, texts[:n])
                    rows.append(("openai", f"{'sse' if stream else 'json'}, {conc} in flight",
                                 f"{latency * 1000:.0f} ms", r))

    from checkworthy.runs.train_classifier import save_artefact
    from checkworthy.scorers import classifier
    from checkworthy.scorers.sentence_encoder import embed

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        embed(texts[:2])
        load_s = time.perf_counter() - t0
        rng = np.random.default_rng(0)
        manifest = {"training_data": {"fingerprint": "bench", "excluded": {}},
                    "score_kinds": {"paper_c": "", "p_positive": ""}}
        save_artefact("bench", rng.normal(size=384), 0.0, manifest, root=Path(tmp))
        s = classifier.ClassifierScorer("bench", root=tmp)
        r = rate(s.score, texts[2: 2 + args.classifier_n])
        rows.append(("classifier", f"MiniLM + LR head, batch 64 (model load {load_s:.1f} s apart)", "-", r))

        from checkworthy.scorers.file_scorer import FileScorer

        path = Path(tmp) / "scores.csv"
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "text", "score"])
            w.writerows([i, t, "0.5"] for i, t in enumerate(dict.fromkeys(texts)))
        t0 = time.perf_counter()
        fs = FileScorer(path)
        read_s = time.perf_counter() - t0
        r = rate(fs.score, texts)
        what = f"lookup of {len(texts)} texts (reading the CSV: {read_s * 1000:.0f} ms)"
        rows.append(("file", what, "-", r))

    print("| backend | mode | fake latency | claims/s |\n|---|---|---|---:|")
    for backend, mode, latency, r in rows:
        print(f"| {backend} | {mode} | {latency} | {r:,.1f} |")


if __name__ == "__main__":
    main()
