"""Stored sentence embeddings (pgvector): which texts lack a vector, storing and reading vectors.

The vectors are computed above the store (:func:`checkworthy.runs.embedding.ensure_embeddings`
embeds the texts :func:`missing_texts` names); kNN itself runs in SQL (:mod:`checkworthy.store.knn`).
Every function takes the model: a vector is stored and read under its model, whose dimension is
the database's (``embedding_models``, migration 0022: it refuses a vector of another dimension).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pgvector.sqlalchemy import Vector
from sqlalchemy import Connection, Row, bindparam, text

from checkworthy.config import EMBED_MODEL


def model_dimension(conn: Connection, model: str) -> int:
    """The dimension of ``model``'s vectors (``embedding_models``); ``ValueError`` for a model the
    store does not know."""
    dim = conn.execute(text("SELECT dimension FROM embedding_models WHERE name = :m"), {"m": model}).scalar()
    if dim is None:
        raise ValueError(f"unknown embedding model {model!r}: not in the store's embedding_models")
    return int(dim)


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
    """Store one ``model`` vector per text hash (a vector already stored stays)."""
    insert = text(
        "INSERT INTO embeddings (text_hash, model, embedding) VALUES (:h, :m, :v) "
        "ON CONFLICT DO NOTHING"
    ).bindparams(bindparam("v", type_=Vector(model_dimension(conn, model))))
    conn.execute(insert, [{"h": h, "m": model, "v": v} for h, v in zip(text_hashes, vectors)])


def load_embeddings(
    conn: Connection, text_hashes: Sequence[str], model: str = EMBED_MODEL
) -> dict[str, NDArray[np.float32]]:
    """Stored ``model`` vectors by text hash (for checks and benchmarks; kNN itself runs in SQL)."""
    rows = conn.execute(
        text("SELECT text_hash, embedding FROM embeddings WHERE text_hash = ANY(:h) AND model = :m")
        .columns(embedding=Vector(model_dimension(conn, model))),
        {"h": list(text_hashes), "m": model},
    ).all()
    return {r.text_hash: np.asarray(r.embedding, dtype=np.float32) for r in rows}


def claim_embeddings(
    conn: Connection, claim_ids: Sequence[int], model: str = EMBED_MODEL
) -> NDArray[np.float64]:
    """(n, dimension) ``model`` vectors of the claims, in the order given (for fitted heads; kNN
    runs in SQL)."""
    dim = model_dimension(conn, model)
    rows = conn.execute(
        text("""SELECT e.embedding FROM unnest(CAST(:c AS bigint[])) WITH ORDINALITY AS q(id, i)
                JOIN claims c ON c.id = q.id
                JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :m ORDER BY q.i""")
        .columns(embedding=Vector(dim)),
        {"c": [int(i) for i in claim_ids], "m": model},
    ).scalars().all()
    if len(rows) != len(claim_ids):
        raise ValueError(f"{len(claim_ids) - len(rows)} of {len(claim_ids)} claims have no {model} embedding")
    return np.asarray(rows, dtype=float).reshape(len(rows), dim)
