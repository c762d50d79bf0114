"""kNN in SQL: the labelled pool a calibration draws neighbours from, and the nearest of them.

The pool of a label set under a score key is its claims that have an embedding and a valid
score (NN-PPI needs each neighbour's residual ``y - c``); :data:`SCORED_AND_EMBEDDED` is that
join, written once, and every query here (and the recalibration's) is composed from it.
Distances are pgvector's cosine distance, written once too (:func:`cosine_distance`).

Exact by default: the labelled set is materialised once and each query claim's neighbours are
a top-k sort over all of it, so no approximate index is involved. Ties are broken by the
neighbour's claim id, so the answer is deterministic.

Every statement reads the vectors of one model (``:embed_model``, the run's: its lineage's space),
so a distance is always between two vectors of one space.

Approximate on request (:class:`KnnPath` ``hnsw``): the pool's texts are searched in
``knn_vectors`` under pgvector's HNSW index of the run's model (migrations 0012 and 0022: one
partial index per model, the vectors at half precision of the model's dimension, which only
guides the search), restricted to the pool by pgvector's iterative index scan (strict order),
``ef_search`` candidates per layer-0 search; each text found expands to its pool claims, nearest
first by the full-precision distance, ties by claim id as on the exact path. Same answer shape,
same distances for the neighbours it finds; it may miss a true neighbour (a run records its recall
against the exact path on a sample of its claims).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sqlalchemy import Connection, TextClause, text

from checkworthy.config import EF_SEARCH, EMBED_MODEL
from checkworthy.store.embeddings import model_dimension
from checkworthy.store.engine import local_settings
from checkworthy.store.rows import ScoreKey, bigint_array


def cosine_distance(a: str, b: str) -> str:
    """pgvector's cosine distance of two vector expressions: the one distance every kNN orders by."""
    return f"{a} <=> {b}"


#: the claims of a relation ``i`` with a ``claim_id`` column that can be neighbours: they have an
#: ``:embed_model`` embedding (``e``) and a valid score under the key (``p``; ``c`` is the claim)
SCORED_AND_EMBEDDED = """JOIN claims c ON c.id = i.claim_id
    JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :embed_model
    JOIN predictions p ON p.text_hash = c.text_hash AND p.model_id = :model_id
         AND p.prompt_version = :prompt_version AND p.params_hash = :params_hash
         AND p.score_kind = :score_kind AND p.score IS NOT NULL"""
#: a label set's labelled pool (``FROM`` this): its items ``i`` with ``c``, ``e`` and ``p`` as above
LABELLED_POOL = f"""label_set_items i
    {SCORED_AND_EMBEDDED}
    WHERE i.label_set_id = :label_set_id"""
#: the query claims ``:claim_ids`` with their embeddings (claims without one are left out)
QUERY_CLAIMS = """SELECT c.id AS claim_id, c.text_hash, e.embedding
    FROM unnest(CAST(:claim_ids AS bigint[])) AS u(id)
    JOIN claims c ON c.id = u.id
    JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :embed_model"""
#: a query claim's distance to a pool member, inside the kNN statements below
NEIGHBOUR_DISTANCE = cosine_distance("lab.embedding", "q.embedding")


def half_precision_distance(dim: int) -> str:
    """The expression a model's HNSW index orders by: its index expression (migration 0022's partial
    index of ``dim``-dimensional vectors, at half precision)."""
    return cosine_distance(f"(v.embedding::halfvec({dim}))", f"(q.embedding::halfvec({dim}))")


KNN_SQL = text(
    f"""
WITH lab AS MATERIALIZED (
    SELECT i.claim_id, i.label, c.text_hash, e.embedding, p.score
    FROM {LABELLED_POOL}
), q AS MATERIALIZED (
    {QUERY_CLAIMS}
)
SELECT q.claim_id, n.neighbour_id, n.distance, n.label, n.score
FROM q
CROSS JOIN LATERAL (
    SELECT lab.claim_id AS neighbour_id, {NEIGHBOUR_DISTANCE} AS distance,
           lab.label, lab.score
    FROM lab
    WHERE NOT (:leave_one_out AND lab.text_hash = q.text_hash)
    ORDER BY {NEIGHBOUR_DISTANCE}, lab.claim_id
    LIMIT :k
) n
ORDER BY q.claim_id, n.distance, n.neighbour_id
"""
)

@cache
def hnsw_knn_sql(dim: int) -> TextClause:
    """:data:`KNN_SQL` through the HNSW index of ``dim``-dimensional vectors: each query's :k
    nearest pool texts (``:pool_hashes``, the pool's distinct texts) by an ordered index scan at
    half precision, with their full-precision distances, then (one hash join, after every search:
    ``near`` is materialised, else the planner may probe the whole pool once per query) their pool
    claims, nearest first, ties by claim id; k texts hold at least k claims. The model's partial
    index serves it because the statement is planned for its values (``plan_cache_mode``)."""
    return text(f"""
WITH pool AS MATERIALIZED (
    SELECT i.claim_id, i.label, c.text_hash, p.score
    FROM {LABELLED_POOL}
), q AS MATERIALIZED (
    {QUERY_CLAIMS}
), near AS MATERIALIZED (
    SELECT q.claim_id, t.text_hash, t.distance
    FROM q CROSS JOIN LATERAL (
        SELECT v.text_hash, {cosine_distance("v.embedding", "q.embedding")} AS distance
        FROM knn_vectors v
        WHERE v.model = :embed_model AND v.text_hash = ANY(CAST(:pool_hashes AS text[]))
          AND NOT (:leave_one_out AND v.text_hash = q.text_hash)
        ORDER BY {half_precision_distance(dim)}
        LIMIT :k) t
), ranked AS (
    SELECT near.claim_id, pool.claim_id AS neighbour_id, near.distance, pool.label, pool.score,
           row_number() OVER (PARTITION BY near.claim_id ORDER BY near.distance, pool.claim_id) AS n
    FROM near JOIN pool ON pool.text_hash = near.text_hash
)
SELECT claim_id, neighbour_id, distance, label, score FROM ranked WHERE n <= :k
ORDER BY claim_id, distance, neighbour_id
""")

#: copy the embeddings of a label set's texts into the HNSW-indexed table (what is there stays)
INDEX_LABELLED_SQL = text(
    """INSERT INTO knn_vectors (text_hash, model, embedding)
       SELECT DISTINCT ON (c.text_hash) c.text_hash, e.model, e.embedding
       FROM label_set_items i JOIN claims c ON c.id = i.claim_id
       JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :embed_model
       WHERE i.label_set_id = :label_set_id
       ORDER BY c.text_hash
       ON CONFLICT DO NOTHING"""
)

#: the pool's distinct texts
POOL_TEXTS_SQL = text(f"SELECT DISTINCT c.text_hash FROM {LABELLED_POOL}")

#: the pool's members with their labels and scores, by claim id
POOL_SQL = text(f"SELECT i.claim_id, i.label, p.score FROM {LABELLED_POOL} ORDER BY i.claim_id")

#: like :data:`KNN_SQL` (same pool, same order and tie-break) but returning each target's first
#: :k neighbours as one array, optionally only among the claims in :subset
NEIGHBOUR_LISTS_SQL = text(
    f"""
WITH lab AS MATERIALIZED (
    SELECT i.claim_id, e.embedding
    FROM {LABELLED_POOL}
      AND (CAST(:subset AS bigint[]) IS NULL OR i.claim_id = ANY(CAST(:subset AS bigint[])))
), q AS MATERIALIZED (
    {QUERY_CLAIMS}
)
SELECT q.claim_id, n.ids
FROM q CROSS JOIN LATERAL (
    SELECT array_agg(x.claim_id ORDER BY x.distance, x.claim_id) AS ids FROM (
        SELECT lab.claim_id, {NEIGHBOUR_DISTANCE} AS distance FROM lab
        ORDER BY {NEIGHBOUR_DISTANCE}, lab.claim_id LIMIT :k) x
) n
ORDER BY q.claim_id
"""
)

#: the distance of each pair (``:t[i]``, ``:a[i]``) by its 1-based position ``i``, for pairs whose
#: claims both have an embedding (``:others`` holds the distinct ``:a``, looked up once)
PAIR_DISTANCES_SQL = text(
    f"""WITH av AS MATERIALIZED (
           SELECT c.id, e.embedding FROM claims c
           JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :embed_model
           WHERE c.id = ANY(CAST(:others AS bigint[])))
       SELECT u.i, {cosine_distance("av.embedding", "et.embedding")}
       FROM unnest(CAST(:t AS bigint[]), CAST(:a AS bigint[])) WITH ORDINALITY AS u(t, a, i)
       JOIN av ON av.id = u.a
       JOIN claims ct ON ct.id = u.t
       JOIN embeddings et ON et.text_hash = ct.text_hash AND et.model = :embed_model"""
)


def key_params(label_set_id: int, key: ScoreKey, embed_model: str = EMBED_MODEL) -> dict[str, Any]:
    """The bind parameters of :data:`LABELLED_POOL`."""
    return {"label_set_id": label_set_id, "embed_model": embed_model, "model_id": key.model_id,
            "prompt_version": key.prompt_version, "params_hash": key.params_hash,
            "score_kind": key.score_kind}


def run_key_params(run: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`key_params` of a ``calibration_runs`` row."""
    key = ScoreKey(run["model_id"], run["prompt_version"], run["params_hash"], run["score_kind"])
    return key_params(run["label_set_id"], key, run["embed_model"])


@dataclass(frozen=True)
class Neighbours:
    """kNN answer for n query claims: (n, k) matrices, nearest first."""

    claim_ids: NDArray[np.int64]
    neighbour_ids: NDArray[np.int64]
    distances: NDArray[np.float64]
    labels: NDArray[np.int64]
    scores: NDArray[np.float64]


@dataclass(frozen=True)
class Pool:
    """The labelled pool a run calibrates against: claim ids (sorted), labels, scores."""

    ids: NDArray[np.int64]
    labels: NDArray[np.int64]
    scores: NDArray[np.float64]

    def __post_init__(self) -> None:
        if len(self.ids) and np.any(np.diff(self.ids) <= 0):
            raise ValueError("pool ids must be sorted and unique")

    def positions(self, claim_ids: ArrayLike) -> NDArray[np.int64]:
        """Positions in the pool of the given claim ids (all must be members)."""
        ids = np.asarray(claim_ids, dtype=np.int64)
        pos = np.searchsorted(self.ids, ids)
        pos = np.clip(pos, 0, max(len(self.ids) - 1, 0))
        if ids.size and not np.array_equal(self.ids[pos], ids):
            raise ValueError("neighbour ids outside the labelled pool")
        return pos


#: the kNN paths a run may take
KNN_PATHS = ("exact", "hnsw")
#: the HNSW index's build parameters (migration 0012; since 0022, each model's partial index); the
#: candidates a search keeps by default are ``config.EF_SEARCH``
HNSW_M, HNSW_EF_CONSTRUCTION = 16, 200


#: what a run that records no kNN path took: runs stored before the HNSW path were all exact
UNRECORDED: Mapping[str, Any] = {"path": "exact"}


@dataclass(frozen=True)
class KnnPath:
    """How neighbours are found: ``exact`` (a top-k sort over the whole pool) or ``hnsw``
    (pgvector's HNSW index, ``ef_search`` candidates; the index's build is migration 0012's)."""

    path: str = "exact"
    ef_search: int = EF_SEARCH

    def __post_init__(self) -> None:
        if self.path not in KNN_PATHS:
            raise ValueError(f"unknown kNN path {self.path!r}; choose from {list(KNN_PATHS)}")
        if not 1 <= self.ef_search <= 1000:
            raise ValueError(f"ef_search must lie in [1, 1000] (pgvector's range), got {self.ef_search}")

    def as_dict(self) -> dict[str, Any]:
        """What a run records about its kNN path."""
        if self.path == "exact":
            return {"path": "exact"}
        return {"path": "hnsw", "ef_search": self.ef_search, "m": HNSW_M,
                "ef_construction": HNSW_EF_CONSTRUCTION, "index_vectors": "halfvec",
                "iterative_scan": "strict_order"}

    @classmethod
    def recorded_by(cls, recorded: Mapping[str, Any] | None) -> KnnPath:
        """The path a run took, from what it recorded (its ``params->'knn'``)."""
        knn = recorded or UNRECORDED
        return cls(knn["path"], knn.get("ef_search", EF_SEARCH))

    def found(self, recorded: Mapping[str, Any] | None) -> bool:
        """Whether a run that recorded ``recorded`` (its ``params->'knn'``) found its neighbours
        this way, on this index build: only then may a recalibration keep its lists."""
        return (recorded or UNRECORDED).items() >= self.as_dict().items()


EXACT = KnnPath()


def nearest_labelled(
    conn: Connection, label_set_id: int, claim_ids: Sequence[int], k: int, key: ScoreKey,
    embed_model: str = EMBED_MODEL, knn: KnnPath = EXACT,
) -> Neighbours:
    """The k nearest labelled claims of each claim in ``claim_ids``, in one statement.

    Claims with no embedding are absent from the answer; a claim with fewer than k eligible
    neighbours raises ``ValueError``. ``knn`` picks the path (the HNSW path first copies the
    label set's vectors into the index, once).
    """
    return _nearest(conn, key_params(label_set_id, key, embed_model) | {
        "claim_ids": list(map(int, claim_ids)), "k": k, "leave_one_out": False}, knn)


def leave_one_out_neighbours(
    conn: Connection, label_set_id: int, claim_ids: Sequence[int], k: int, key: ScoreKey,
    embed_model: str = EMBED_MODEL, knn: KnnPath = EXACT,
) -> Neighbours:
    """:func:`nearest_labelled` leaving out the labelled claims with the query's own text (its
    leave-one-out lists, for cross-validation on the labelled set itself)."""
    return _nearest(conn, key_params(label_set_id, key, embed_model) | {
        "claim_ids": list(map(int, claim_ids)), "k": k, "leave_one_out": True}, knn)


def _nearest(conn: Connection, params: dict[str, Any], knn: KnnPath) -> Neighbours:
    """The kNN statement of ``knn``'s path with ``params`` (:func:`key_params`, the claim ids,
    ``k`` and ``leave_one_out``)."""
    label_set_id, k = params["label_set_id"], params["k"]
    if knn.path == "exact":
        rows = conn.execute(KNN_SQL, params).all()
    else:
        conn.execute(INDEX_LABELLED_SQL, {"label_set_id": label_set_id, "embed_model": params["embed_model"]})
        params["pool_hashes"] = list(conn.execute(POOL_TEXTS_SQL, params).scalars())
        # an ordered scan of the HNSW index whatever the statistics say: without these, a pool that
        # is most of the index is read through the primary key and sorted (an exact search, 50x
        # slower at 25,000 labelled claims), and a fresh table without statistics is scanned; and a
        # plan for these values (a cached generic plan tests each candidate against the pool's
        # texts one by one, 2.4x slower at 25,000, instead of by a hash)
        settings = {"hnsw.ef_search": str(knn.ef_search), "hnsw.iterative_scan": "strict_order",
                    "enable_seqscan": "off", "enable_sort": "off", "plan_cache_mode": "force_custom_plan"}
        with local_settings(conn, settings):
            rows = conn.execute(hnsw_knn_sql(model_dimension(conn, params["embed_model"])), params).all()
    if len(rows) % k:
        raise ValueError(f"label set {label_set_id} has fewer than k={k} scored, embedded claims")
    arr = np.array([(r.claim_id, r.neighbour_id, r.distance, r.label, r.score) for r in rows])
    arr = arr.reshape(-1, k, 5) if len(rows) else np.zeros((0, k, 5))
    return Neighbours(
        claim_ids=arr[:, 0, 0].astype(np.int64),
        neighbour_ids=arr[:, :, 1].astype(np.int64),
        distances=arr[:, :, 2].astype(float),
        labels=arr[:, :, 3].astype(np.int64),
        scores=arr[:, :, 4].astype(float),
    )


def load_pool(conn: Connection, label_set_id: int, key: ScoreKey, embed_model: str = EMBED_MODEL) -> Pool:
    """The labelled claims that can be neighbours under ``key`` (scored and embedded), by claim id."""
    return _pool(conn, key_params(label_set_id, key, embed_model))


def pool_of(conn: Connection, run: Mapping[str, Any]) -> Pool:
    """:func:`load_pool` of a ``calibration_runs`` row."""
    return _pool(conn, run_key_params(run))


def _pool(conn: Connection, params: dict[str, Any]) -> Pool:
    rows = conn.execute(POOL_SQL, params).all()
    return Pool(np.array([r.claim_id for r in rows], dtype=np.int64),
                np.array([r.label for r in rows], dtype=np.int64),
                np.array([r.score for r in rows], dtype=float))


def neighbour_lists(
    conn: Connection, run: Mapping[str, Any], claim_ids: Sequence[int], k: int,
    subset: Sequence[int] | NDArray[np.int64] | None = None,
) -> NDArray[np.int64]:
    """Each claim's first k labelled neighbours under a run's key (rows in ``claim_ids`` order),
    optionally only among ``subset``, in one statement."""
    rows = conn.execute(NEIGHBOUR_LISTS_SQL, run_key_params(run) | {
        "claim_ids": [int(i) for i in claim_ids], "k": int(k),
        "subset": None if subset is None else [int(i) for i in subset]}).all()
    by_id = {r.claim_id: r.ids for r in rows}
    if len(by_id) != len(set(claim_ids)) or any(len(v) < k for v in by_id.values()):
        raise ValueError(f"run {run['id']}: fewer than k={k} labelled neighbours for some claims")
    return np.array([by_id[int(i)] for i in claim_ids], dtype=np.int64).reshape(len(claim_ids), k)


def pair_distances(
    conn: Connection, target_ids: ArrayLike, other_ids: ArrayLike, embed_model: str = EMBED_MODEL,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """The distance of each pair (``target_ids[i]``, ``other_ids[i]``), by the expression the kNN
    orders by: (positions ``i`` of the pairs whose claims both have an embedding, their distances),
    in no particular order."""
    got = conn.execute(PAIR_DISTANCES_SQL, {
        "t": bigint_array(target_ids), "a": bigint_array(other_ids),
        "others": bigint_array(np.unique(np.asarray(other_ids, dtype=np.int64))),
        "embed_model": embed_model}).all()
    i = np.fromiter((r[0] for r in got), np.int64, len(got)) - 1  # the pair's (1-based) ordinality
    return i, np.fromiter((r[1] for r in got), float, len(got))
