"""How many claims a day this machine's cores could score at most: each pass's multiply-adds at
the fp32 matrix-product peak.

Every model pass is mostly matrix products in fp32 (the CPU has no AMX: bf16 measured slower, and
int8 dynamic quantisation destroyed the Gemma score, docs/scale.md). No implementation of a pass can
beat its floating-point operations divided by the best rate this machine multiplies matrices at, so
this bench counts them on real claims (the same sentences as ``bench_scoring_cost``) and measures
that rate (``torch.nn.functional.linear`` at the models' shapes, best of several):

- linear layers: 2 x (parameters outside the token embedding) per token read;
- attention: 4 x query heads x head size x keys attended, per token and layer;
- the embedded Gemma's LM head where its full distribution is read (the first answer token).

Decode steps, LoRA adapters, heads, tokenising and the store are left out, so every ceiling is an
upper bound. Prints the ceilings beside the targets, and the measured rate of the embedded token
probability as a share of its ceiling, with a JSON line. Run from the repository root:
``.venv/bin/python -m bench.bench_compute_ceiling``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import Any

import torch

from bench.bench_scale import CORES, DAY
from bench.bench_scoring_cost import rate, sample_texts
from checkworthy.config import quiet_offline_env
from checkworthy.scorers.embedded_gemma import EmbeddedGemmaScorer, GemmaOptions
from checkworthy.scorers.lora_classifier import GEMMA, MINILM, base_encoder, encode, tokenizer

N = 200


def peak_flops() -> float:
    """The best fp32 rate of a linear layer at the models' widths (rows: a batch of tokens)."""
    best = 0.0
    for n_in, n_out in ((640, 2048), (2048, 640), (640, 1024), (384, 1536)):
        x, w = torch.randn(2048, n_in), torch.randn(n_out, n_in)
        for _ in range(3):
            torch.nn.functional.linear(x, w)
        t0, reps = time.perf_counter(), 40
        for _ in range(reps):
            torch.nn.functional.linear(x, w)
        best = max(best, 2 * x.shape[0] * n_in * n_out * reps / (time.perf_counter() - t0))
    return best


def body_parameters(model: Any, embedding: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters()) - embedding.weight.numel()


def attention_flops(config: Any, keys: Sequence[int]) -> float:
    """Scores and weighted values of every layer for tokens attending to ``keys`` keys each."""
    window = getattr(config, "sliding_window", None)
    kinds = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_key = 4 * config.num_attention_heads * head_dim
    return float(sum(per_key * (min(n, window) if kind == "sliding_attention" and window else n)
                     for kind in kinds for n in keys))


def encoder_flops(model: Any, embedding: torch.nn.Module, lengths: Sequence[int]) -> float:
    """A transformer reading each text alone (its own tokens only), per text on average."""
    linear = 2 * body_parameters(model, embedding) * sum(lengths)
    attention = attention_flops(model.config, [n for length in lengths for n in range(1, length + 1)])
    return (linear + attention) / len(lengths)


def token_prob_flops(scorer: EmbeddedGemmaScorer, sample: Sequence[str]) -> float:
    """The embedded Gemma's one forward pass a claim: its suffix and the forced ``0.`` on the shared
    prefix, and the LM head at the first answer token."""
    model, n_prefix = scorer.model, len(scorer.prefix_ids)
    lengths = [len(scorer.encode_suffix(t)[0]) + 2 for t in sample]
    linear = 2 * body_parameters(model.model, model.model.embed_tokens) * sum(lengths)
    keys = [n_prefix + i for length in lengths for i in range(1, length + 1)]
    head = 2 * model.config.vocab_size * model.config.hidden_size * len(lengths)
    return (linear + attention_flops(model.config, keys) + head) / len(lengths)


def main() -> None:
    quiet_offline_env()
    torch.set_num_threads(CORES)
    sample = sample_texts(N)
    gemma = EmbeddedGemmaScorer(GemmaOptions(token_prob_only=True), progress=False)
    minilm = base_encoder()
    minilm_lengths = encode(tokenizer(), MINILM, sample)["attention_mask"].sum(1).tolist()
    gemma_lora_lengths = encode(gemma.tokenizer, GEMMA, sample)["attention_mask"].sum(1).tolist()
    flops = {
        "MiniLM pass (the embedding; the MiniLM LoRA)": encoder_flops(
            minilm, minilm.embeddings.word_embeddings, minilm_lengths),
        "embedded Gemma pass (token probability; each sampling)": token_prob_flops(gemma, sample),
        "Gemma LoRA pass": encoder_flops(
            gemma.model.model, gemma.model.model.embed_tokens, gemma_lora_lengths),
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
