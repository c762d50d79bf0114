"""kNN in SQL: one set-based statement finds every claim's k nearest labelled claims.

Exact by default: the labelled set is materialised once and each query claim's neighbours are
a top-k sort over all of it by cosine distance (pgvector ``<=>``), so no approximate index is
involved. Ties are broken by the neighbour's claim id, so the answer is deterministic.

Only labelled claims that have a valid score under the given score key can be neighbours
(NN-PPI needs each neighbour's residual ``y - c``); the statement returns each neighbour's
label and score beside its distance, so calibration needs no further query.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from sqlalchemy import Connection, text

from checkworthy.config import EMBED_MODEL
from checkworthy.store.rows import ScoreKey

KNN_SQL = text(
    """
WITH lab AS MATERIALIZED (
    SELECT i.claim_id, i.label, c.text_hash, e.embedding, p.score
    FROM label_set_items i
    JOIN claims c ON c.id = i.claim_id
    JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :embed_model
    JOIN predictions p ON p.text_hash = c.text_hash AND p.model_id = :model_id
         AND p.prompt_version = :prompt_version AND p.params_hash = :params_hash
         AND p.score_kind = :score_kind AND p.score IS NOT NULL
    WHERE i.label_set_id = :label_set_id
), q AS MATERIALIZED (
    SELECT c.id AS claim_id, c.text_hash, e.embedding
    FROM unnest(CAST(:claim_ids AS bigint[])) AS u(id)
    JOIN claims c ON c.id = u.id
    JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :embed_model
)
SELECT q.claim_id, n.neighbor_id, n.distance, n.label, n.score
FROM q
CROSS JOIN LATERAL (
    SELECT lab.claim_id AS neighbor_id, lab.embedding <=> q.embedding AS distance,
           lab.label, lab.score
    FROM lab
    WHERE NOT (:leave_one_out AND lab.text_hash = q.text_hash)
    ORDER BY lab.embedding <=> q.embedding, lab.claim_id
    LIMIT :k
) n
ORDER BY q.claim_id, n.distance, n.neighbor_id
"""
)


@dataclass(frozen=True)
class Neighbours:
    """kNN answer for n query claims: (n, k) matrices, nearest first."""

    claim_ids: NDArray[np.int64]
    neighbor_ids: NDArray[np.int64]
    distances: NDArray[np.float64]
    labels: NDArray[np.int64]
    scores: NDArray[np.float64]


def nearest_labelled(
    conn: Connection,
    label_set_id: int,
    claim_ids: Sequence[int],
    k: int,
    key: ScoreKey,
    leave_one_out: bool = False,
    embed_model: str = EMBED_MODEL,
) -> Neighbours:
    """The k nearest labelled claims of each claim in ``claim_ids``, in one statement.

    ``leave_one_out`` excludes labelled claims with the query's own text (for cross-validation
    on the labelled set itself). Claims with no embedding are absent from the answer; a claim
    with fewer than k eligible neighbours raises ``ValueError``.
    """
    rows = conn.execute(
        KNN_SQL,
        {
            "label_set_id": label_set_id,
            "claim_ids": list(map(int, claim_ids)),
            "k": k,
            "embed_model": embed_model,
            "model_id": key.model_id,
            "prompt_version": key.prompt_version,
            "params_hash": key.params_hash,
            "score_kind": key.score_kind,
            "leave_one_out": leave_one_out,
        },
    ).all()
    if len(rows) % k:
        raise ValueError(f"label set {label_set_id} has fewer than k={k} scored, embedded claims")
    arr = np.array([(r.claim_id, r.neighbor_id, r.distance, r.label, r.score) for r in rows])
    arr = arr.reshape(-1, k, 5) if len(rows) else np.zeros((0, k, 5))
    return Neighbours(
        claim_ids=arr[:, 0, 0].astype(np.int64),
        neighbor_ids=arr[:, :, 1].astype(np.int64),
        distances=arr[:, :, 2].astype(float),
        labels=arr[:, :, 3].astype(np.int64),
        scores=arr[:, :, 4].astype(float),
    )
