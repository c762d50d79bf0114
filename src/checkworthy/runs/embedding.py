"""Sentence embeddings of stored texts: the texts without a vector are embedded here (model
inference, in the runs layer) and their vectors handed to :mod:`checkworthy.store.embeddings`,
which only stores and reads them. Each distinct text is embedded once per model."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection

from checkworthy.scorers.sentence_encoder import Embedder, embed
from checkworthy.store.embeddings import missing_texts, store_embeddings


def ensure_embeddings(
    conn: Connection, text_hashes: Sequence[str], batch_size: int = 256, embedder: Embedder = embed
) -> int:
    """Embed (with ``embedder``, whose model loads on first use) and store every text in
    ``text_hashes`` that has no vector yet; return how many."""
    missing = missing_texts(conn, text_hashes)
    for start in range(0, len(missing), batch_size):
        chunk = missing[start : start + batch_size]
        store_embeddings(conn, [row.text_hash for row in chunk], embedder([row.text for row in chunk]))
    return len(missing)
