"""Throughput of the embedded Gemma 3 270M scorer on real claims (CLEF 2024 dev-test).

Prints claims/s for verbalised (+token_prob) mode and token_prob-only mode at batch sizes 8 and
16, after a warm-up batch, on the first N claims. Targets on 2 CPU cores: verbalised >= 4/s,
token_prob >= 10/s. Wall-clock rates suffer when other processes share the cores, so the script
also prints the process CPU time per claim and the load average seen during the run.

    .venv/bin/python bench/bench_scoring.py [--n 64] [--threads 2] [--batch-sizes 8 16]
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import time
from collections import Counter
from pathlib import Path

import torch

from checkworthy.config import DATA_DIR
from checkworthy.data.versioning import ensure_data
from checkworthy.scorers.embedded_gemma import PAPER, EmbeddedGemmaScorer, GemmaOptions

DATA = DATA_DIR / "raw" / "clef2024" / "CT24_checkworthy_english_dev-test.tsv"  # the project's DVC copy


def read_claims(path: Path, n: int) -> list[str]:
    """First ``n`` texts of a CLEF TSV (header row, CRLF endings, CSV-style quoting)."""
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t"))
    return [row[1] for row in rows[1:] if len(row) >= 2][:n]


def run(scorer: EmbeddedGemmaScorer, claims: list[str]) -> tuple[float, float, list]:
    """(claims per wall second, CPU milliseconds per claim, results), after one warm-up batch."""
    scorer.score(claims[: scorer.options.batch_size])
    wall, cpu = time.perf_counter(), time.process_time()
    results = scorer.score(claims)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return len(claims) / wall, 1000 * cpu / len(claims), results


def summary(results: list, kind: str) -> str:
    scores = [r[kind].score for r in results if r[kind].score is not None]
    statuses = Counter(r[kind].status for r in results)
    if not scores:
        return f"{kind}: no scores {dict(statuses)}"
    return (
        f"{kind}: mean {statistics.mean(scores):.3f} min {min(scores):.3f} max {max(scores):.3f} "
        f">=0.5: {sum(s >= 0.5 for s in scores)}/{len(scores)} statuses {dict(statuses)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 16])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ensure_data()  # a fresh clone pulls data/ from the project's DVC remote
    claims = read_claims(DATA, args.n)
    print(f"{len(claims)} claims, torch threads {torch.get_num_threads()}")
    base = EmbeddedGemmaScorer(GemmaOptions(sampling=PAPER), progress=False)
    print(f"prefix tokens: {len(base.prefix_ids)}")
    for token_prob_only in (False, True):
        mode = "token_prob only" if token_prob_only else "verbalised+token_prob"
        for batch_size in args.batch_sizes:
            scorer = base.variant(token_prob_only=token_prob_only, batch_size=batch_size)
            rate, cpu_ms, results = run(scorer, claims)
            load = os.getloadavg()[0]
            print(f"{mode:>22} batch {batch_size:>2}: {rate:6.2f} claims/s", end="  ")
            print(f"{cpu_ms:5.0f} CPU-ms/claim  load average {load:.1f}")
        for kind in scorer.score_kinds:
            print("   ", summary(results, kind))


if __name__ == "__main__":
    main()
