"""What the cores allow: each model pass's floating-point operations on real claims and the best
rate this machine multiplies fp32 matrices at (``bench_compute_ceiling``, ``bench_scoring_cost``,
``bench_api``).

Counted per token read: linear layers, 2 x the parameters outside the token embedding; attention,
4 x query heads x head size x keys attended, per layer; the embedded Gemma's LM head where its full
distribution is read (the first answer token). Decode steps, LoRA adapters (merged or not, the
same shapes), heads, tokenising and the store are left out, so a ceiling from these is an upper
bound for any implementation at fp32.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from checkworthy.scorers.embedded_gemma import EmbeddedGemmaScorer
from checkworthy.scorers.lora_classifier import (
    MINILM,
    Base,
    LoraClassifierScorer,
    base_tokenizer,
    encode,
    load_base,
)


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


def base_flops(base: Base, sample: Sequence[str]) -> float:
    """One pass of ``base`` over each claim as a LoRA classifier reads it (its template), per claim;
    MiniLM's is also the embedding's (the same tokens, no template)."""
    model, _ = load_base(base)
    embedding = model.get_input_embeddings()
    lengths = encode(base_tokenizer(base), base, sample)["attention_mask"].sum(1).tolist()
    return encoder_flops(model, embedding, lengths)


def token_prob_flops(scorer: EmbeddedGemmaScorer, sample: Sequence[str]) -> float:
    """The embedded Gemma's one forward pass a claim: its suffix and the forced ``0.`` on the shared
    prefix, and the LM head at the first answer token."""
    model, n_prefix = scorer.model, len(scorer.prefix_ids)
    lengths = [len(scorer.encode_suffix(t)[0]) + 2 for t in sample]
    linear = 2 * body_parameters(model.model, model.model.embed_tokens) * sum(lengths)
    keys = [n_prefix + i for length in lengths for i in range(1, length + 1)]
    head = 2 * model.config.vocab_size * model.config.hidden_size * len(lengths)
    return (linear + attention_flops(model.config, keys) + head) / len(lengths)


def pass_flops(scorer: Any, sample: Sequence[str], bases: dict[str, float]) -> float:
    """A pass's floating-point operations a claim: the embedded Gemma's forward pass, a LoRA
    classifier's base, else MiniLM's (the logistic head reads its vector); ``bases`` caches a base's."""
    if isinstance(scorer, EmbeddedGemmaScorer):
        return token_prob_flops(scorer, sample)
    base = scorer.artefact.base if isinstance(scorer, LoraClassifierScorer) else MINILM
    if base.model not in bases:
        bases[base.model] = base_flops(base, sample)
    return bases[base.model]
