"""What the default scores cost a claim: claims/s of every model pass the defaults need, in this
process, on the same new CLEF sentences, and the claims a day on this machine when every claim
gets them all.

Two sets of defaults: ``predict``'s model (params.yaml ``predict.model``, the recommended path)
and the main job's ``models:`` list (the paper's scores beside the classifiers). An ensemble costs
its members' passes (the flows store each member's score once and join them), each distinct pass
(same spec and parameters) is counted once, and every claim is embedded with MiniLM once for the
kNN. Each pass is timed after a first batch has loaded its model, on the runtime its scorer uses
(the LoRA classifiers' is named beside them), beside its ceiling: its floating-point operations on
the same sentences at this machine's fp32 matrix-product peak (:mod:`checkworthy.testing.flops`,
as ``bench_compute_ceiling``). Prints tables and a JSON line. Run from the repository root:
``.venv/bin/python -m bench.bench_scoring_cost [--n 200] [--defaults predict]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench.bench_scale import CORES, DAY, texts
from checkworthy.config import PARAMS_FILE, load_params, quiet_offline_env
from checkworthy.scorers.ensemble import EnsembleScorer
from checkworthy.scorers.registry import make_scorer
from checkworthy.scorers.sentence_encoder import embed
from checkworthy.testing.flops import pass_flops, peak_flops

WARM = 12
EMBEDDING = "MiniLM embedding (every claim)"


def passes(entries: Sequence[Mapping[str, Any]], scoring: Mapping[str, Any]) -> dict[str, Any]:
    """The distinct scorers the model entries need, an ensemble as its members, by a readable name."""
    found: dict[str, tuple[str, Any]] = {}  # by the scorer's parameters: the first name wins
    for entry in entries:
        options = dict(scoring) | {k: v for k, v in entry.items() if k != "spec"}
        scorer, _ = make_scorer(entry["spec"], **options)
        for s in scorer.members if isinstance(scorer, EnsembleScorer) else [scorer]:
            runtime = s.params().get("runtime")
            name = s.spec + (f" ({entry['sampling']})" if "sampling" in entry else "") + (
                f" ({runtime['engine']} {runtime['precision']})" if runtime else "")
            found.setdefault(json.dumps(s.params(), sort_keys=True, default=str), (name, s))
    return dict(found.values())


def sample_texts(n: int) -> list[str]:
    """``n`` CLEF sentences, and a first batch of ``WARM`` before them, that bench_scale's first runs
    do not use."""
    return texts(3000 + n + WARM)[3000:]


def rate(run: Callable[[list[str]], Any], sample: list[str]) -> float:
    """Claims/s of ``run`` on ``sample`` after a first batch off the clock."""
    run(sample[:WARM])
    t0 = time.perf_counter()
    run(sample[WARM:])
    return (len(sample) - WARM) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200, help="texts timed per pass (default 200)")
    ap.add_argument("--defaults", nargs="+", choices=["predict", "main job"], default=["predict", "main job"],
                    help="whose passes to time (default both)")
    args = ap.parse_args()
    quiet_offline_env()
    params = load_params(PARAMS_FILE)
    sample = sample_texts(args.n)
    scoring = params.get("scoring") or {}
    entries = {"predict": [{"spec": params["predict"]["model"]}], "main job": params["models"]}
    sets = {name: passes(entries[name], scoring) for name in args.defaults}
    rates = {EMBEDDING: rate(embed, sample)}
    for found in sets.values():
        for name, scorer in found.items():
            if name not in rates:
                rates[name] = rate(scorer.score, sample)
    bases: dict[str, float] = {}
    flops = {name: pass_flops(scorer, sample[WARM:], bases) for found in sets.values()
             for name, scorer in found.items()} | {EMBEDDING: pass_flops(embed, sample[WARM:], bases)}
    peak = peak_flops()
    rows = []
    for label, found in sets.items():
        names = [EMBEDDING, *found]
        per_claim = sum(1 / rates[n] for n in names)
        ceiling = peak / sum(flops[n] for n in names)
        rows.append({"defaults": label, "passes": names, "claims_per_s": 1 / per_claim,
                     "claims_per_day": DAY / per_claim, "claims_per_day_per_core": DAY / per_claim / CORES,
                     "ceiling_claims_per_s": ceiling, "ceiling_claims_per_day": DAY * ceiling})
    print(f"load average {os.getloadavg()[0]:.2f}; {args.n} texts a pass, {CORES} cores, one process; "
          f"fp32 matrix-product peak {peak / 1e9:.0f} GFLOP/s")
    print("| pass | claims/s | GFLOP a claim | ceiling claims/s | share of the ceiling |\n"
          "|---|---:|---:|---:|---:|")
    for name, r in rates.items():
        print(f"| {name} | {r:.1f} | {flops[name] / 1e9:.2f} | {peak / flops[name]:.1f} | "
              f"{r * flops[name] / peak:.0%} |")
    print("\n| defaults | passes | claims/s | claims/day | claims/day/core | ceiling claims/s | "
          "ceiling claims/day |\n|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['defaults']} | {len(r['passes'])} | {r['claims_per_s']:.1f} | "
              f"{r['claims_per_day']:,.0f} | {r['claims_per_day_per_core']:,.0f} | "
              f"{r['ceiling_claims_per_s']:.1f} | {r['ceiling_claims_per_day']:,.0f} |")
    print(json.dumps({"bench": "scoring_cost", "peak_gflops": peak / 1e9, "passes": rates,
                      "pass_gflop_per_claim": {k: v / 1e9 for k, v in flops.items()}, "rows": rows}))


if __name__ == "__main__":
    main()
