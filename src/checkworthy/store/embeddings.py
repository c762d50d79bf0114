"""Stored sentence embeddings (pgvector): which texts lack a vector, storing and reading vectors.

The vectors are computed above the store (:func:`checkworthy.runs.embedding.ensure_embeddings`
embeds the texts :func:`missing_texts` names); kNN itself runs in SQL (:mod:`checkworthy.store.knn`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pgvector.sqlalchemy import Vector
from sqlalchemy import Connection, Row, bindparam, text

from checkworthy.config import EMBED_DIM, EMBED_MODEL


def missing_texts(
    conn: Connection, text_hashes: Sequence[str], model: str = EMBED_MODEL
) -> Sequence[Row[Any]]:
    """(text_hash, text) of the texts in ``text_hashes`` that have no ``model`` vector yet."""
    return conn.execute(
        text(
            """SELECT t.text_hash, t.text FROM texts t
               WHERE t.text_hash = ANY(:h) AND NOT EXISTS (
                 SELECT 1 FROM embeddings e WHERE e.text_hash = t.text_hash AND e.model = :m)
               ORDER BY t.text_hash"""
        ),
        {"h": list(set(text_hashes)), "m": model},
    ).all()


def store_embeddings(
    conn: Connection, text_hashes: Sequence[str], vectors: NDArray[np.float32], model: str = EMBED_MODEL
) -> None:
    """Store one vector per text hash (a vector already stored stays)."""
    insert = text(
        "INSERT INTO embeddings (text_hash, model, embedding) VALUES (:h, :m, :v) "
        "ON CONFLICT DO NOTHING"
    ).bindparams(bindparam("v", type_=Vector(EMBED_DIM)))
    conn.execute(insert, [{"h": h, "m": model, "v": v} for h, v in zip(text_hashes, vectors)])


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
