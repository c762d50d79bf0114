"""Attention over one shared copy of a prompt prefix's KV cache, as a transformers attention kernel.

The embedded scorers compute the KV cache of the prompt prefix (the same for every claim) once and
pass it to every forward as ``shared_prefix``; :func:`shared_prefix_attention` attends to that
single copy, so the prefix is never copied per row and its KV head never repeated per query head.
The kernel is registered with transformers by :func:`use_shared_prefix_attention`, when a model
is loaded, not on import (registering is idempotent: the same function under the same name).
"""

from __future__ import annotations

from typing import Any

import torch

#: the name the kernel is registered under (``model.set_attn_implementation``)
ATTENTION_IMPLEMENTATION = "checkworthy_shared_prefix"


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention over one shared copy of the prefix KV plus each row's own KV (plain sdpa otherwise).

    Saves, per layer and forward, materialising the prefix cache for every row and repeating the
    KV head for every query head (1 KV head, 4 query heads in Gemma 3 270M): the queries of all
    rows and heads meet the single prefix copy in one matrix product. ``attention_mask`` is a
    boolean (batch, 1, q, prefix + own slots) mask; ``kwargs`` are transformers' (``scaling``,
    ``dropout``, ...) plus ``shared_prefix``, the prefix's (keys, values) per layer.
    """
    shared_prefix = kwargs.pop("shared_prefix", None)
    if shared_prefix is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    scaling = kwargs.get("scaling")
    k_prefix, v_prefix = shared_prefix[module.layer_idx]  # (kv_heads, prefix, dim)
    batch, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    q = query.reshape(batch, kv_heads, group * q_len, dim)  # query heads grouped by their KV head
    scores = torch.cat([torch.einsum("bhqd,hpd->bhqp", q, k_prefix), q @ key.transpose(-1, -2)], dim=-1) * (
        dim**-0.5 if scaling is None else scaling
    )
    mask = attention_mask[:, :, None].expand(-1, -1, group, -1, -1).reshape(batch, 1, group * q_len, -1)
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    n_prefix = k_prefix.shape[1]
    out = torch.einsum("bhqp,hpd->bhqd", probs[..., :n_prefix], v_prefix) + probs[..., n_prefix:] @ value
    return out.reshape(batch, heads, q_len, dim).transpose(1, 2).contiguous(), None


def use_shared_prefix_attention(model: Any) -> None:
    """Register the kernel with transformers (masks built as for sdpa) and switch ``model`` to it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ATTENTION_IMPLEMENTATION, shared_prefix_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION_IMPLEMENTATION, sdpa_mask)
    model.set_attn_implementation(ATTENTION_IMPLEMENTATION)
