"""How many claims a day this machine's cores could score at most: each pass's multiply-adds at
the fp32 matrix-product peak.

Every model pass is mostly matrix products in fp32 (the CPU has no AMX: bf16 measured slower, and
int8 dynamic quantisation destroyed the Gemma score, docs/scale.md). No implementation of a pass can
beat its floating-point operations divided by the best rate this machine multiplies matrices at, so
this bench counts them on real claims (the same sentences as ``bench_scoring_cost``) and measures
that rate (``torch.nn.functional.linear`` at the models' shapes, best of several), as
:mod:`checkworthy.testing.flops` counts them; every ceiling is an upper bound. Prints the ceilings
beside the targets, and the measured rate of the embedded token probability as a share of its
ceiling, with a JSON line. Run from the repository root:
``.venv/bin/python -m bench.bench_compute_ceiling``.
"""

from __future__ import annotations

import json
import os

import torch

from bench.bench_scale import CORES, DAY
from bench.bench_scoring_cost import rate, sample_texts
from checkworthy.config import quiet_offline_env
from checkworthy.scorers.embedded_gemma import EmbeddedGemmaScorer, GemmaOptions
from checkworthy.scorers.lora_classifier import GEMMA, MINILM
from checkworthy.testing.flops import base_flops, peak_flops, token_prob_flops

N = 200


def main() -> None:
    quiet_offline_env()
    torch.set_num_threads(CORES)
    sample = sample_texts(N)
    gemma = EmbeddedGemmaScorer(GemmaOptions(token_prob_only=True), progress=False)
    flops = {
        "MiniLM pass (the embedding; the MiniLM LoRA)": base_flops(MINILM, sample),
        "embedded Gemma pass (token probability; each sampling)": token_prob_flops(gemma, sample),
        "Gemma LoRA pass": base_flops(GEMMA, sample),
    }
    minilm_pass, gemma_pass, lora_pass = flops.values()
    sets = [  # (name, FLOPs a claim, target claims a day)
        ("embedded token probability + embedding", gemma_pass + minilm_pass, 2_000_000),
        ("predict's defaults: Gemma LoRA + MiniLM LoRA + embedding", lora_pass + 2 * minilm_pass, 1_000_000),
        ("the main job's models: 2 embedded Gemma + Gemma LoRA + MiniLM LoRA + embedding",
         2 * gemma_pass + lora_pass + 2 * minilm_pass, 1_000_000),
    ]
    peak = peak_flops()
    measured = rate(gemma.score, sample)
    rows = [{"passes": name, "gflop_per_claim": f / 1e9, "ceiling_claims_per_s": peak / f,
             "ceiling_claims_per_day": DAY * peak / f, "target_claims_per_day": target,
             "reachable": DAY * peak / f >= target} for name, f, target in sets]
    print(f"load average {os.getloadavg()[0]:.2f}; {CORES} cores; {N} CLEF sentences; fp32 linear peak "
          f"{peak / 1e9:.0f} GFLOP/s")
    print("| pass | GFLOP a claim |\n|---|---:|")
    for name, f in flops.items():
        print(f"| {name} | {f / 1e9:.2f} |")
    print("\n| passes a claim | GFLOP | ceiling claims/s | ceiling claims/day | target | reachable |\n"
          "|---|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['passes']} | {r['gflop_per_claim']:.2f} | {r['ceiling_claims_per_s']:.1f} | "
              f"{r['ceiling_claims_per_day']:,.0f} | {r['target_claims_per_day']:,} | "
              f"{'yes' if r['reachable'] else 'no'} |")
    share = measured * gemma_pass / peak
    print(f"\nthe embedded token probability measured alone: {measured:.1f} claims/s, "
          f"{measured * gemma_pass / 1e9:.0f} GFLOP/s, {share:.0%} of the peak")
    print(json.dumps({"bench": "compute_ceiling", "peak_gflops": peak / 1e9,
                      "pass_gflop_per_claim": {k: v / 1e9 for k, v in flops.items()}, "rows": rows,
                      "token_prob_claims_per_s": measured, "token_prob_share_of_peak": share}))


if __name__ == "__main__":
    main()
