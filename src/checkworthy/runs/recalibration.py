"""Incremental recalibration: after a label change, recompute only the claims it can affect.

A calibration result of claim t depends on t's score and on its k nearest labelled claims
(ids, labels, scores). Against the previous complete run P of the same calibration (same
target, score key, k, alpha, threshold, interval, embedding model; an earlier version of the
same label-set lineage), the labelled pool changed by

- ``added``:   claims now eligible as neighbours that P could not see;
- ``removed``: claims P could see that are no longer eligible;
- ``changed``: claims in both whose label differs (a stored score never changes).

Then, exactly:

- t's neighbour list can only change if an added claim is nearer than t's k-th neighbour in P
  (ties broken by claim id, as in the SQL kNN): its new list is the top k of P's list plus
  those added claims, so no kNN over the whole pool is needed. Which added claims can be that
  near is decided against P's stored k-th distance: a vector prefilter (the targets' vectors
  times the added claims', in float32 chunks, with a margin for rounding) keeps the pairs that
  may enter, and only those get their distance from pgvector, the expression the SQL kNN uses;
- t's values change if a neighbour's label or score changed (same neighbours, new residuals);
- a removed neighbour leaves a gap only a real kNN can fill: those claims, and claims new to
  the target, go through the same SQL kNN (``nearest_labelled``) restricted to them.

Every other row is copied from P in SQL. The new run has the same run key as a full run on the
same inputs (so a later full run reuses it), ``mode = 'incremental'``, ``parent_run_id = P``;
copied rows keep the id of the run that computed them in ``computed_in_run``. Distances come
from the same pgvector expression as the full kNN, so the result equals a full recomputation.

Speed (figures in ``bench/bench_recalibration.py``): P's rows and the targets' vectors arrive in
one binary COPY that numpy reads block by block. A block's certainly unaffected rows are copied
(``INSERT ... SELECT`` from P) at once by a worker thread on the store's connection, in the run's
one transaction, so the server inserts (the largest cost: two foreign-key checks and two index
entries per row) while the client reads and filters the next blocks; another worker fetches the
block's candidates' exact distances on a third connection. The recomputed rows go in by one
binary COPY built by numpy.

To be safe when P's pool is not known exactly (a score or embedding stored while P ran), the
sets are over-approximated: a claim counts as added unless its score and embedding predate P,
and as removed if it is eligible now under P's label set but not under the new one. Treating an
old neighbour as added, or a non-neighbour as removed, costs work, never correctness.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from sqlalchemy import Connection, Engine, text
from threadpoolctl import threadpool_limits

from checkworthy.method import nnppi
from checkworthy.runs.calibration_run import RunContext, RunSpec, find_complete_run, run_calibration
from checkworthy.runs.evaluation import metric_rows, store_metrics
from checkworthy.store.knn import nearest_labelled
from checkworthy.store.rows import ScoreKey, claim_scores, current_labels, sha256_text

#: above this share of added claims in the new pool a full run is cheaper
MAX_ADDED_SHARE = 0.5

#: the eligible labelled claims of the new and of the parent's label set in one statement: each
#: claim's score and embedding are looked up once (``since``: when it became usable as a neighbour)
POOLS_SQL = text(
    """
WITH items AS (
    SELECT claim_id, max(label) FILTER (WHERE label_set_id = :new) AS new_label,
           max(label) FILTER (WHERE label_set_id = :old) AS old_label
    FROM label_set_items WHERE label_set_id IN (:new, :old) GROUP BY claim_id)
SELECT i.claim_id, i.new_label, i.old_label, p.score, greatest(p.created_at, e.created_at) AS since
FROM items i
JOIN claims c ON c.id = i.claim_id
JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :em
JOIN predictions p ON p.text_hash = c.text_hash AND p.model_id = :m AND p.prompt_version = :pv
     AND p.params_hash = :ph AND p.score_kind = :sk AND p.score IS NOT NULL
"""
)

#: the parent's rows as fixed-size binary records: claim id, score, the k neighbour ids, the k
#: distances (parsed with numpy; one message per row, no per-row Python objects)
PARENT_COPY = """COPY (SELECT r.claim_id, r.score, {neighbours} FROM calibrated_results r WHERE r.run_id = %s)
TO STDOUT (FORMAT BINARY)"""
#: the same with each target's vector (needed when labelled claims were added)
PARENT_VECTORS_COPY = """COPY (SELECT r.claim_id, r.score, {neighbours}, e.embedding FROM calibrated_results r
    JOIN claims c ON c.id = r.claim_id JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = %s
    WHERE r.run_id = %s) TO STDOUT (FORMAT BINARY)"""
#: the parent's rows are examined in blocks of this many, as the COPY delivers them, so that the
#: unaffected rows of a block are being copied while the next blocks arrive
PARENT_BLOCK = 16_384
#: concatenated ``vector_send`` images of a few claims (the labelled pool, never the targets)
VECTORS_SQL = """
SELECT string_agg(int8send(c.id) || vector_send(e.embedding), ''::bytea)
FROM claims c JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = %s
WHERE c.id = ANY(%s)"""
#: slack of the vector prefilter, in cosine distance: pgvector sums 384 float32 products, so its
#: distance may be off by up to ~7e-5 from the exact one; numpy's float32 product by ~1e-6
PREFILTER_MARGIN = 1e-3
#: server settings while the parent's rows and vectors are read (restored afterwards): hash
#: tables in memory, and no parallel workers, which would ship every 1.5 kB vector through shared
#: memory and compete for the CPUs with the copy running alongside
PARENT_READ_SETTINGS = {"work_mem": "64MB", "max_parallel_workers_per_gather": "0"}
#: a parent with at least this share of the embeddings' rows is read by hash joins over sequential
#: scans, whatever the statistics say: right after a large parent run ``calibrated_results`` may not
#: be analysed yet, and the planner would probe the embeddings index once per target (3x slower)
HASH_JOIN_SHARE = 0.1
#: the candidate pairs are sorted with their vectors: in memory, not in a temporary file
EXACT_SETTINGS = {"work_mem": "64MB"}
#: the exact distance of each (target, added claim) pair that passed the prefilter, by pgvector
EXACT_SQL = text(
    """WITH av AS MATERIALIZED (
           SELECT c.id, e.embedding FROM claims c
           JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :em
           WHERE c.id = ANY(CAST(:added AS bigint[])))
       SELECT u.i, av.embedding <=> et.embedding
       FROM unnest(CAST(:t AS bigint[]), CAST(:a AS bigint[])) WITH ORDINALITY AS u(t, a, i)
       JOIN av ON av.id = u.a
       JOIN claims ct ON ct.id = u.t
       JOIN embeddings et ON et.text_hash = ct.text_hash AND et.model = :em"""
)

COLUMNS = ("run_id", "claim_id", "score", "theta", "ci_low", "ci_high", "decision", "knn_mean",
           "neighbor_ids", "neighbor_distances")
#: copy some of the parent's rows unchanged into the new run (``computed_in_run``: who computed
#: them); ``run_id = p AND claim_id = ANY(...)`` is one ordered walk of the primary key over just
#: those rows, whatever the statistics (a join on ``unnest`` may hash the whole parent per call)
COPY_KEPT_SQL = text(
    f"""INSERT INTO calibrated_results ({', '.join(COLUMNS)}, computed_in_run)
        SELECT :new, r.claim_id, r.score, r.theta, r.ci_low, r.ci_high, r.decision, r.knn_mean,
               r.neighbor_ids, r.neighbor_distances, coalesce(r.computed_in_run, r.run_id)
        FROM calibrated_results r WHERE r.run_id = :p AND r.claim_id = ANY(CAST(:keep AS bigint[]))"""
)


@dataclass
class RecalOutcome:
    """How a calibration was brought up to date."""

    run_id: int
    mode: str  # "reused", "full" or "incremental"
    parent_run_id: int | None = None
    n_recomputed: int = 0
    n_copied: int = 0
    recomputed: list[int] = field(default_factory=list)
    changes: dict[str, int] = field(default_factory=dict)


@dataclass
class PoolChanges:
    """How the labelled pool changed since the parent run (see the module docstring)."""

    pool: dict[int, tuple[int, float]]  # the new pool: claim id -> (label, score)
    added: list[int]
    removed: list[int]
    changed: list[int]

    @property
    def counts(self) -> dict[str, int]:
        return {"added": len(self.added), "removed": len(self.removed), "changed": len(self.changed)}

    @property
    def favours_full_run(self) -> bool:
        """Too many added claims: checking each target against them costs more than a full kNN."""
        return len(self.added) > MAX_ADDED_SHARE * max(len(self.pool), 1)


@dataclass
class Plan:
    """Which claims an incremental run recomputes, and how."""

    parent_run_id: int
    scores: dict[int, float]
    pool: dict[int, tuple[int, float]]
    knn: list[int]
    merge: list[int]
    #: unaffected claims whose rows are still to be copied from the parent
    keep: list[int]
    entering: pd.DataFrame
    changes: dict[str, int]
    #: the parent's rows: claim ids (sorted), (n, k) neighbour ids, (n, k) distances
    parent_nb: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    #: unaffected claims whose rows were handed to ``on_kept`` while planning
    n_copied_early: int = 0

    @property
    def recomputed(self) -> list[int]:
        return sorted(set(self.knn) | set(self.merge))

    @property
    def n_copied(self) -> int:
        return self.n_copied_early + len(self.keep)


def _key_params(spec: RunSpec) -> dict[str, Any]:
    return {"m": spec.key.model_id, "pv": spec.key.prompt_version, "ph": spec.key.params_hash,
            "sk": spec.key.score_kind, "em": spec.embed_model}


def incremental_applies(spec: RunSpec) -> bool:
    """Only the paper's NN-PPI (z interval, residual-mean correction) is local to each claim's
    neighbours; fitted corrections, conformal intervals and the CV choice depend on all of L, so a
    label change moves every claim and those calibrations are recomputed in full."""
    return spec.interval_method == "z" and getattr(spec, "correction", "paper") == "paper"


def find_parent(conn: Connection, spec: RunSpec) -> int | None:
    """The newest complete run of the same calibration on an earlier version of the same lineage."""
    return conn.execute(
        text(
            """SELECT r.id FROM calibration_runs r JOIN label_sets ls ON ls.id = r.label_set_id
               WHERE r.status = 'complete' AND r.target = :t
                 AND ls.name = (SELECT name FROM label_sets WHERE id = :ls)
                 AND r.model_id = :m AND r.prompt_version = :pv AND r.params_hash = :ph
                 AND r.score_kind = :sk AND r.embed_model = :em AND r.k = :k AND r.alpha = :a
                 AND r.threshold = :th AND r.interval_method = :im
                 AND coalesce(r.params->>'correction', 'paper') = :corr
               ORDER BY r.id DESC LIMIT 1"""
        ),
        _key_params(spec) | {"t": spec.target, "ls": spec.label_set_id, "k": spec.k, "a": spec.alpha,
                             "th": spec.threshold, "im": spec.interval_method,
                             "corr": getattr(spec, "correction", "paper")},
    ).scalar()


def pool_changes(conn: Connection, spec: RunSpec, parent_run_id: int) -> PoolChanges:
    """Compare the eligible labelled pools of the parent's label set and of ``spec``'s."""
    parent = conn.execute(text("SELECT label_set_id, started_at FROM calibration_runs WHERE id = :i"),
                          {"i": parent_run_id}).one()
    rows = conn.execute(POOLS_SQL, _key_params(spec) | {"new": spec.label_set_id,
                                                        "old": parent.label_set_id}).all()
    df = pd.DataFrame(rows, columns=["claim_id", "new", "old", "score", "since"]).set_index("claim_id")
    new, old = df[df["new"].notna()], df[df["old"].notna()]
    old_strict = set(old.index[old["since"] < parent.started_at])
    both = new.index.intersection(old.index)
    # one row per claim: its score is the same on both sides, so only the label can differ
    changed = both[(new.loc[both, "new"] != new.loc[both, "old"]).to_numpy()]
    pool = dict(zip(new.index.astype(int).tolist(),
                    zip(new["new"].astype(int).tolist(), new["score"].astype(float).tolist())))
    return PoolChanges(pool, sorted(set(new.index) - old_strict), sorted(set(old.index) - set(new.index)),
                       sorted(int(i) for i in changed))


def plan(conn: Connection, spec: RunSpec, parent_run_id: int, changes: PoolChanges | None = None,
         on_kept: Callable[[NDArray[np.int64]], None] | None = None,
         check_conn: Connection | None = None) -> Plan:
    """Find the claims whose neighbours or neighbours' labels/scores changed since the parent run.

    The parent's rows are read in blocks as they arrive; ``on_kept`` (if given) receives each
    block's claims that are certainly unaffected (a wanted target, no removed or relabelled
    neighbour, no added claim even near its k-th distance), so their rows can be copied while the
    rest is read. The plan's ``keep`` holds the unaffected claims not handed over that way. With
    ``check_conn``, the exact distances of a block's candidates are fetched on that connection, in
    a worker thread, while the next blocks are read; else on ``conn`` after the last block.
    """
    changes = changes or pool_changes(conn, spec, parent_run_id)
    # one BLAS thread: the other CPU is the server's (reading the parent, copying rows), and idle
    # BLAS threads spin-wait between blocks
    with (threadpool_limits(1, user_api="blas"),
          ThreadPoolExecutor(max_workers=1, thread_name_prefix="recalibrate-check") as checker):
        return _plan(conn, spec, parent_run_id, changes, on_kept,
                     (checker, check_conn) if check_conn is not None else None)


@contextmanager
def _local_settings(conn: Connection, settings: dict[str, str]) -> Iterator[None]:
    """Apply server settings to the current transaction only, and restore them on leaving.

    After an error they are left as they are: the transaction is failing, and what
    ``set_config(..., true)`` sets ends with it.
    """
    before = {name: conn.execute(text("SELECT current_setting(:n)"), {"n": name}).scalar_one()
              for name in settings}
    for name, value in settings.items():
        conn.execute(text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value})
    yield
    for name, value in before.items():
        conn.execute(text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value})


def _plan(conn: Connection, spec: RunSpec, parent_run_id: int, ch: PoolChanges,
          on_kept: Callable[[NDArray[np.int64]], None] | None,
          checker: tuple[ThreadPoolExecutor, Connection] | None) -> Plan:
    """The body of :func:`plan` (``checker``: where to fetch exact distances while reading)."""
    k = spec.k
    wanted = np.asarray(sorted(set(spec.claim_ids)), dtype=np.int64)
    removed, changed = np.asarray(ch.removed, dtype=np.int64), np.asarray(ch.changed, dtype=np.int64)
    added_ids, added_vectors = _added_vectors(conn, ch.added, spec.embed_model)
    blocks, candidates, checks = [], [], []
    for rows in _parent_blocks(conn, parent_run_id, k, spec.embed_model if ch.added else None):
        ids = rows["id"].astype(np.int64)
        nids = np.stack([rows[f"n{i}"] for i in range(k)], axis=1).astype(np.int64)
        nds = np.stack([rows[f"d{i}"] for i in range(k)], axis=1).astype(float)
        at = np.minimum(np.searchsorted(wanted, ids), max(len(wanted) - 1, 0))
        in_parent = wanted[at] == ids if len(wanted) else np.zeros(len(ids), dtype=bool)
        lost = in_parent & np.isin(nids, removed).any(axis=1)
        relabelled = in_parent & ~lost & np.isin(nids, changed).any(axis=1)
        near = np.zeros(len(ids), dtype=bool)
        if len(added_ids):
            i, j = _prefilter(rows["v"], added_vectors, nds[:, -1], in_parent & ~lost)
            near[i] = True
            pairs = (ids[i], added_ids[j], nds[i, -1], nids[i, -1])
            if checker is None:
                candidates.append(pairs)
            elif len(i):
                checks.append(checker[0].submit(_exact_entering, checker[1], spec.embed_model, *pairs))
        copied = in_parent & ~lost & ~relabelled & ~near
        if on_kept is None:
            copied[:] = False
        elif copied.any():
            on_kept(ids[copied])
        blocks.append((ids, rows["score"].astype(float), nids, nds, in_parent, lost, relabelled, copied))
    if not blocks:  # a parent run without rows
        blocks = [(np.zeros(0, np.int64), np.zeros(0), np.zeros((0, k), np.int64), np.zeros((0, k)),
                   *[np.zeros(0, bool)] * 4)]
    ids, t_scores, nids, nds, in_parent, lost, relabelled, copied = (np.concatenate(c) for c in zip(*blocks))
    order = np.argsort(ids, kind="stable")
    ids, t_scores, nids, nds = ids[order], t_scores[order], nids[order], nds[order]
    in_parent, lost, relabelled, copied = in_parent[order], lost[order], relabelled[order], copied[order]
    # a target's score is in the parent's row (same score key: stored scores never change)
    scores = dict(zip(ids[in_parent].tolist(), t_scores[in_parent].tolist()))
    others = np.setdiff1d(wanted, ids).tolist()
    stored = claim_scores(conn, others, spec.key.model_id, spec.key.prompt_version, spec.key.params_hash,
                          spec.key.score_kind) if others else {}
    need_knn = {i for i, sc in stored.items() if sc is not None}  # new to the target: full SQL kNN
    scores |= {i: stored[i] for i in need_knn}
    need_knn |= set(ids[lost].tolist())
    touched = set(ids[relabelled].tolist())
    found = [job.result() for job in checks]
    if candidates:
        found.append(_exact_entering(conn, spec.embed_model, *(np.concatenate(c) for c in zip(*candidates))))
    found = [f for f in found if len(f)]
    entering = pd.DataFrame(columns=["claim_id", "neighbor_id", "distance"])
    if found:
        entering = pd.concat(found, ignore_index=True)
        touched |= set(entering["claim_id"].tolist())
    merge = sorted(touched - need_knn)
    recomputed = np.fromiter(need_knn | touched, np.int64)
    keep = ids[in_parent & ~copied & ~np.isin(ids, recomputed)].tolist()
    return Plan(parent_run_id, scores, ch.pool, sorted(need_knn), merge, keep, entering, ch.counts,
                (ids[in_parent], nids[in_parent], nds[in_parent]), int(copied.sum()))


def _parent_blocks(conn: Connection, parent_run_id: int, k: int,
                   embed_model: str | None = None) -> Iterator[np.ndarray]:
    """The parent run's rows (with ``embed_model``: and each target's vector), in arrival order, as
    structured arrays of up to ``PARENT_BLOCK`` records: ``id``, ``score``, ``n0..`` (neighbour
    ids), ``d0..`` (distances), ``v`` (the big-endian float32 vector).

    One binary COPY: every record has the same size (k neighbours, no NULLs, one vector
    dimension), so numpy reads a block of records at once, with no Python object per row. The
    connection is busy until the generator is exhausted: use another one meanwhile.
    """
    cols = ", ".join([f"r.neighbor_ids[{i}]" for i in range(1, k + 1)]
                     + [f"r.neighbor_distances[{i}]" for i in range(1, k + 1)])
    sql = (PARENT_VECTORS_COPY if embed_model else PARENT_COPY).format(neighbours=cols)
    params = (embed_model, parent_run_id) if embed_model else (parent_run_id,)
    fields = [("nf", ">i2"), ("l_id", ">i4"), ("id", ">i8"), ("l_sc", ">i4"), ("score", ">f8")]
    fields += [x for i in range(k) for x in ((f"l_n{i}", ">i4"), (f"n{i}", ">i8"))]
    fields += [x for i in range(k) for x in ((f"l_d{i}", ">i4"), (f"d{i}", ">f8"))]
    n_fields = 2 + 2 * k + (1 if embed_model else 0)
    dt: np.dtype | None = None
    buf = bytearray()

    def start(final: bool) -> np.dtype | None:
        """Strip the stream header and fix the record layout (its vector dimension is in the
        first record); None while too few bytes have arrived to do so."""
        nonlocal fields
        if len(buf) < 19 or len(buf) < 19 + int.from_bytes(buf[15:19], "big"):
            if final:
                raise RuntimeError("unexpected COPY stream of the parent run")
            return None
        if not buf.startswith(b"PGCOPY\n\xff\r\n\x00"):
            raise RuntimeError("unexpected COPY stream of the parent run")
        head = 19 + int.from_bytes(buf[15:19], "big")
        at = head + np.dtype(fields).itemsize + 4  # the first record's vector dimension
        if embed_model and len(buf) >= at + 2:
            dim = int.from_bytes(buf[at:at + 2], "big")
            fields += [("l_v", ">i4"), ("dim", ">i2"), ("unused", ">i2"), ("v", ">f4", (dim,))]
        elif embed_model and not final:
            return None
        del buf[:head]
        return np.dtype(fields)

    def take(n: int) -> np.ndarray:
        """The first n records of the buffer, checked; the buffer starts afresh with the rest."""
        nonlocal buf
        assert dt is not None
        rows = np.frombuffer(buf, dtype=dt, count=n)  # a view: the buffer is not copied
        buf = buf[n * dt.itemsize:]
        lengths = [rows[f] for f in dt.names if f.startswith("l_") and f != "l_v"]
        if (rows["nf"] != n_fields).any() or any((x != 8).any() for x in lengths):
            raise RuntimeError("the parent run's rows have NULLs or another k")
        if embed_model and (rows["dim"] != rows["v"].shape[1]).any():
            raise RuntimeError("target vectors of different dimensions")
        return rows

    settings = _parent_read_settings(conn, parent_run_id) if embed_model else PARENT_READ_SETTINGS
    with (_local_settings(conn, settings), conn.connection.driver_connection.cursor() as cur,
          cur.copy(sql, params) as cp):
        for message in cp:
            buf += message
            if dt is None and (dt := start(final=False)) is None:
                continue
            if len(buf) >= PARENT_BLOCK * dt.itemsize:
                yield take(PARENT_BLOCK)
    if dt is None:
        dt = start(final=True)
        assert dt is not None
    n, rest = divmod(len(buf) - 2, dt.itemsize)
    if rest or buf[-2:] != b"\xff\xff":
        raise RuntimeError("the parent run's rows have NULLs or another k")
    if n:
        yield take(n)


def _parent_read_settings(conn: Connection, parent_run_id: int) -> dict[str, str]:
    """``PARENT_READ_SETTINGS``, and no nested loops if the parent is large against the embeddings
    (its row count is in its params; the embeddings' is the catalogue's estimate, -1 if unknown)."""
    n_parent, n_embeddings = conn.execute(
        text("""SELECT (SELECT (params->>'n_calibrated')::float8 FROM calibration_runs WHERE id = :p),
                       (SELECT reltuples FROM pg_class WHERE oid = 'embeddings'::regclass)"""),
        {"p": parent_run_id}).one()
    if n_parent is not None and n_embeddings is not None and 0 <= HASH_JOIN_SHARE * n_embeddings <= n_parent:
        return PARENT_READ_SETTINGS | {"enable_nestloop": "off"}
    return PARENT_READ_SETTINGS


def _added_vectors(conn: Connection, added: list[int],
                   embed_model: str) -> tuple[NDArray[np.int64], np.ndarray]:
    """The added claims' ids and unit float32 vectors (rows), from one statement."""
    if not added:
        return np.zeros(0, np.int64), np.zeros((0, 0), np.float32)
    with conn.connection.driver_connection.cursor(binary=True) as cur:
        cur.execute(VECTORS_SQL, (embed_model, [int(i) for i in added]))
        (blob,) = cur.fetchone()
    if not blob:
        return np.zeros(0, np.int64), np.zeros((0, 0), np.float32)
    dim = int.from_bytes(blob[8:10], "big")
    dt = np.dtype([("id", ">i8"), ("dim", ">i2"), ("unused", ">i2"), ("v", ">f4", (dim,))])
    rows = np.frombuffer(blob, dtype=dt)
    if len(blob) % dt.itemsize or (rows["dim"] != dim).any():
        raise RuntimeError("vectors of different dimensions")
    vectors = rows["v"].astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return rows["id"].astype(np.int64), vectors


def _prefilter(targets: np.ndarray, added: np.ndarray, kth: NDArray[np.float64],
               eligible: NDArray[np.bool_]) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """(target row, added row) pairs whose float32 cosine distance is within ``PREFILTER_MARGIN`` of
    the target's k-th distance ``kth``: a superset of the pairs where the added claim enters.

    ``added`` holds unit vectors; the targets' are compared unnormalised, ``t·a >= (1 - d) |t|``,
    which saves a pass over the block.
    """
    T = targets.astype(np.float32)  # the big-endian vectors, decoded
    norms = np.sqrt(np.einsum("ij,ij->i", T, T))
    limit = (1.0 - kth - PREFILTER_MARGIN).astype(np.float32) * norms
    limit[~eligible] = np.inf  # never a candidate
    return np.nonzero(T @ added.T >= limit[:, None])  # cos >= 1 - (kth + margin)


def _exact_entering(conn: Connection, embed_model: str, cand_t: NDArray[np.int64], cand_a: NDArray[np.int64],
                    kth_distance: NDArray[np.float64], kth_id: NDArray[np.int64]) -> pd.DataFrame:
    """(target, added claim, distance) of the candidate pairs ``(cand_t[i], cand_a[i])`` where the
    added claim enters the target's top k, whose k-th neighbour is ``kth_id[i]`` at ``kth_distance[i]``.

    The distance is pgvector's own (the expression the SQL kNN orders by), and the test the kNN's
    order: ``(distance, id) < (k-th distance, k-th id)``.
    """
    if not len(cand_t):
        return pd.DataFrame(columns=["claim_id", "neighbor_id", "distance"])
    with _local_settings(conn, EXACT_SETTINGS):
        got = conn.execute(EXACT_SQL, {"t": _bigint_array(cand_t), "a": _bigint_array(cand_a),
                                       "added": _bigint_array(np.unique(cand_a)), "em": embed_model}).all()
    i = np.fromiter((r[0] for r in got), np.int64, len(got)) - 1  # the pair's (1-based) ordinality
    d = np.fromiter((r[1] for r in got), float, len(got))
    enters = (d < kth_distance[i]) | ((d == kth_distance[i]) & (cand_a[i] < kth_id[i]))
    i = i[enters]
    return pd.DataFrame({"claim_id": cand_t[i], "neighbor_id": cand_a[i], "distance": d[enters]})


def _merge_neighbours(conn: Connection, spec: RunSpec, p: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """New top-k of the merge claims: the parent's k neighbours plus the added claims that enter."""
    k = spec.k
    t_ids, nids, nds = p.parent_nb
    sel = np.isin(t_ids, np.asarray(p.merge, dtype=np.int64))
    ids, nid, nd = t_ids[sel], nids[sel], nds[sel]
    old = pd.DataFrame({"claim_id": np.repeat(ids, k), "neighbor_id": nid.ravel(), "distance": nd.ravel()})
    enter = p.entering[p.entering["claim_id"].isin(set(p.merge))]
    cand = pd.concat([old, enter], ignore_index=True).astype({"claim_id": np.int64, "neighbor_id": np.int64,
                                                               "distance": float})
    cand = cand.drop_duplicates(["claim_id", "neighbor_id"])
    cand = cand.sort_values(["claim_id", "distance", "neighbor_id"], kind="mergesort")
    top = cand.groupby("claim_id", sort=True).head(k)
    out_ids = top["claim_id"].to_numpy()[::k]
    if len(top) != len(out_ids) * k or len(out_ids) != len(p.merge):
        raise RuntimeError("incremental merge lost neighbours: the parent run is inconsistent")
    return out_ids, top["neighbor_id"].to_numpy().reshape(-1, k), top["distance"].to_numpy().reshape(-1, k)


@dataclass
class ResultRows:
    """Recomputed result rows as columns (one entry per claim), ready for a binary COPY."""

    claim_ids: NDArray[np.int64]
    result: nnppi.NNPPIResult
    neighbor_ids: NDArray[np.int64]  # (n, k), nearest first
    neighbor_distances: NDArray[np.float64]  # (n, k)

    def __len__(self) -> int:
        return len(self.claim_ids)


def compute_incremental(conn: Connection, spec: RunSpec, p: Plan) -> ResultRows:
    """Result rows of the recomputed claims: the SQL-kNN claims, then the merged ones."""
    k = spec.k
    # (claim ids, neighbour ids, distances, neighbour labels, neighbour scores) per way of finding them
    parts = [(np.zeros(0, np.int64), np.zeros((0, k), np.int64), np.zeros((0, k)), np.zeros((0, k), np.int64),
              np.zeros((0, k)))]
    if p.knn:
        nb = nearest_labelled(conn, spec.label_set_id, p.knn, k, spec.key, embed_model=spec.embed_model)
        parts.append((nb.claim_ids, nb.neighbor_ids, nb.distances, nb.labels, nb.scores))
    if p.merge:
        ids, nid, dist = _merge_neighbours(conn, spec, p)
        pool_ids = np.array(sorted(p.pool), dtype=np.int64)
        at = np.searchsorted(pool_ids, nid)
        if (at >= len(pool_ids)).any() or (pool_ids[np.minimum(at, len(pool_ids) - 1)] != nid).any():
            raise RuntimeError("a merged neighbour is not in the labelled pool")
        lab = np.array([p.pool[int(i)][0] for i in pool_ids], dtype=np.int64)[at]
        sc = np.array([p.pool[int(i)][1] for i in pool_ids], dtype=float)[at]
        parts.append((ids, nid, dist, lab, sc))
    ids, nid, dist, lab, sc = (np.concatenate(column) for column in zip(*parts))
    c = np.array([p.scores[i] for i in ids.tolist()], dtype=float)
    res = nnppi.nnppi(c, lab, sc, spec.alpha, spec.threshold)
    return ResultRows(ids.astype(np.int64), res, nid.astype(np.int64), dist.astype(float))


#: header and trailer of a binary COPY stream (no flags, no header extension)
COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
COPY_TRAILER = b"\xff\xff"
#: type oids of the array elements (``array_recv`` checks them): int8, float8
INT8_OID, FLOAT8_OID = 20, 701


def _array_dtype(element: str, k: int) -> np.dtype:
    """A one-dimensional array without NULLs of k fixed-size elements, in binary COPY layout."""
    return np.dtype([("len", ">i4"), ("ndim", ">i4"), ("flags", ">i4"), ("oid", ">u4"), ("dim", ">i4"),
                     ("lbound", ">i4"), ("items", [("len", ">i4"), ("v", element)], (k,))])


def _fill_array(field: np.ndarray, oid: int, values: np.ndarray) -> None:
    """Write (n, k) ``values`` into a column of :func:`_array_dtype` records."""
    k = values.shape[1]
    field["len"] = field.dtype.itemsize - 4
    field["ndim"], field["flags"], field["oid"], field["dim"], field["lbound"] = 1, 0, oid, k, 1
    field["items"]["len"] = values.dtype.itemsize
    field["items"]["v"] = values


def _copy_rows(conn: Connection, run_id: int, rows: ResultRows) -> None:
    """Bulk-insert result rows with one binary COPY built by numpy.

    Every row has the same size (k neighbours, no NULLs), so the whole stream is one structured
    array: no Python object or text formatting per row, and floats travel bit for bit.
    """
    n, k = rows.neighbor_ids.shape
    floats = ("score", "theta", "ci_low", "ci_high")
    dt = np.dtype([("nf", ">i2"), ("l_run", ">i4"), ("run", ">i8"), ("l_id", ">i4"), ("id", ">i8")]
                  + [x for c in floats for x in ((f"l_{c}", ">i4"), (c, ">f8"))]
                  + [("l_decision", ">i4"), ("decision", "u1"), ("l_knn_mean", ">i4"), ("knn_mean", ">f8"),
                     ("nids", _array_dtype(">i8", k)), ("nds", _array_dtype(">f8", k))])
    rec = np.zeros(n, dt)
    rec["nf"] = len(COLUMNS)
    rec["l_run"], rec["run"], rec["l_id"], rec["id"] = 8, run_id, 8, rows.claim_ids
    res = rows.result
    for c in floats + ("knn_mean",):
        rec[f"l_{c}"], rec[c] = 8, getattr(res, c)
    rec["l_decision"], rec["decision"] = 1, np.asarray(res.decision).astype(bool)
    _fill_array(rec["nids"], INT8_OID, rows.neighbor_ids.astype(np.int64))
    _fill_array(rec["nds"], FLOAT8_OID, rows.neighbor_distances.astype(np.float64))
    raw = conn.connection.driver_connection
    sql = f"COPY calibrated_results ({', '.join(COLUMNS)}) FROM STDIN (FORMAT BINARY)"
    with raw.cursor() as cur, cur.copy(sql) as cp:
        cp.write(COPY_SIGNATURE + rec.tobytes() + COPY_TRAILER)


def _bigint_array(ids: Any) -> str:
    """A ``bigint[]`` literal: psycopg adapts a list element by element (~1 µs each), while one
    string of 100k ids is built and parsed in milliseconds."""
    return "{" + ",".join(map(str, np.asarray(ids, dtype=np.int64).tolist())) + "}"


def _copy_kept(conn: Connection, run_id: int, parent_run_id: int, claim_ids: Sequence[int] | NDArray[np.int64]
               ) -> None:
    """Copy these claims' rows from the parent into the new run (:data:`COPY_KEPT_SQL`)."""
    conn.execute(COPY_KEPT_SQL, {"new": run_id, "keep": _bigint_array(claim_ids), "p": parent_run_id})


class KeptRowsCopier:
    """Copies unaffected rows from the parent into the new run, on the store's connection, in a
    worker thread, while the plan goes on reading the parent on its own connection.

    Inserting ~100k rows (two foreign-key checks and two index entries per row) is the
    largest single cost of an incremental run and is all server work, so it overlaps with the
    client's reading and filtering. Calls run in order on one thread; the connection is used by
    nothing else until :meth:`wait` returns.
    """

    def __init__(self, conn: Connection, run_id: int, parent_run_id: int) -> None:
        self.conn, self.run_id, self.parent_run_id = conn, run_id, parent_run_id
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recalibrate-copy")
        self._jobs: list[Future[None]] = []

    def __call__(self, claim_ids: Sequence[int] | NDArray[np.int64]) -> None:
        """Queue the copy of these claims' parent rows."""
        if len(claim_ids):
            self._jobs.append(self._worker.submit(_copy_kept, self.conn, self.run_id, self.parent_run_id,
                                                  claim_ids))

    def wait(self) -> None:
        """Wait for every queued copy; raise the first failure."""
        for job in self._jobs:
            job.result()

    def close(self) -> None:
        """Wait for the worker to finish (also after a failure elsewhere) and stop it."""
        self._worker.shutdown(wait=True, cancel_futures=True)


#: does a calibrated claim of the run have no label (then no metrics: they need every gold label)
UNLABELLED_SQL = text(
    """SELECT EXISTS (SELECT 1 FROM calibrated_results r WHERE r.run_id = :r
                      AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.claim_id = r.claim_id))"""
)


def _store(conn: Connection, spec: RunSpec, run_id: int, p: Plan, rows: ResultRows,
           copier: KeptRowsCopier | None = None) -> None:
    """Finish the run's rows (the copies ``copier`` was given while planning, the rest of the
    unaffected rows from the parent in SQL, the recomputed ones by COPY), its metrics and status."""
    if copier is not None:
        copier.wait()
    if p.keep:
        _copy_kept(conn, run_id, p.parent_run_id, p.keep)
    _copy_rows(conn, run_id, rows)
    n_cal = p.n_copied + len(rows)
    if n_cal and not conn.execute(UNLABELLED_SQL, {"r": run_id}).scalar_one():
        res = conn.execute(
            text("""SELECT claim_id, score, theta, ci_low, ci_high, decision, knn_mean FROM calibrated_results
                    WHERE run_id = :r ORDER BY claim_id"""), {"r": run_id}).all()
        gold = current_labels(conn, [r.claim_id for r in res])
        arr = {c: np.array([getattr(r, c) for r in res], dtype=float)
               for c in ("score", "theta", "ci_low", "ci_high", "knn_mean")}
        result = nnppi.NNPPIResult(
            score=arr["score"], theta=arr["theta"], ci_low=arr["ci_low"], ci_high=arr["ci_high"],
            knn_mean=arr["knn_mean"], decision=np.array([int(r.decision) for r in res]),
            knn_decision=nnppi.decide(arr["knn_mean"], spec.threshold),
            baseline_decision=nnppi.decide(arr["score"], spec.threshold))
        store_metrics(conn, run_id, metric_rows(np.array([gold[r.claim_id] for r in res]), result))
    counts = {"n_claims": len(spec.claim_ids), "n_calibrated": n_cal,
              "n_without_score": len(spec.claim_ids) - n_cal, "n_recomputed": len(rows),
              "n_copied": p.n_copied} | {f"n_{k}_labelled": v for k, v in p.changes.items()}
    conn.execute(
        text("""UPDATE calibration_runs SET status = 'complete', finished_at = now(),
                params = params || CAST(:p AS jsonb) WHERE id = :i"""),
        {"i": run_id, "p": json.dumps(counts)},
    )


def _start(conn: Connection, spec: RunSpec, key: str, fingerprint: str, ctx: RunContext,
           parent_run_id: int) -> int:
    return conn.execute(
        text(
            """INSERT INTO calibration_runs (run_key, target, label_set_id, label_set_fingerprint,
               model_id, prompt_version, params_hash, score_kind, embed_model, k, alpha, threshold,
               interval_method, params, status, flow_run_id, code_rev, data_version_id, parent_run_id,
               mode)
               VALUES (:key, :t, :ls, :fp, :m, :pv, :ph, :sk, :em, :k, :a, :th, :im, CAST(:p AS jsonb),
               'running', :fr, :cr, :dv, :parent, 'incremental') RETURNING id"""
        ),
        _key_params(spec) | {
            "key": key, "t": spec.target, "ls": spec.label_set_id, "fp": fingerprint, "k": spec.k,
            "a": spec.alpha, "th": spec.threshold, "im": spec.interval_method,
            "p": json.dumps(ctx.extra | {"n_claims": len(spec.claim_ids)}), "fr": ctx.flow_run_id,
            "cr": ctx.code_rev, "dv": ctx.data_version_id, "parent": parent_run_id},
    ).scalar_one()


def fast_run_key(spec: RunSpec, fingerprint: str) -> str:
    """:func:`checkworthy.runs.calibration_run.run_key`, without ``asdict`` deep-copying 100k claim ids.

    Must equal ``run_key`` (tests check it): an incremental run and a full run of the same inputs
    share one key, so either is reused by the other.
    """
    body: dict[str, Any] = {f.name: getattr(spec, f.name) for f in fields(spec)}
    body |= {"key": asdict(spec.key), "claim_ids": sorted(spec.claim_ids), "fingerprint": fingerprint,
             "label_set_id": None}
    return sha256_text(json.dumps(body, sort_keys=True, default=str))


def recalibrate(
    engine: Engine, spec: RunSpec, ctx: RunContext | None = None, parent_run_id: int | None = None,
    validation_run_id: int | None = None, force_full: bool = False,
) -> RecalOutcome:
    """Bring calibration ``spec`` up to date: reuse it, recompute it incrementally from a parent run,
    or run it in full. ``validation_run_id`` (the suite run that cleared the label set) is kept in
    the run's params."""
    ctx = ctx or RunContext()
    if validation_run_id is not None:
        ctx = replace(ctx, extra=ctx.extra | {"validation_run_id": validation_run_id})
    with engine.connect() as lock:
        fingerprint = lock.execute(text("SELECT fingerprint FROM label_sets WHERE id = :i"),
                                   {"i": spec.label_set_id}).scalar_one()
        key = fast_run_key(spec, fingerprint)
        existing = find_complete_run(lock, key)
        parent = None
        if not force_full and incremental_applies(spec):
            parent = parent_run_id or find_parent(lock, spec)
        lock.commit()
    if existing is not None:
        return RecalOutcome(existing, "reused")
    if parent is None:
        run_id = run_calibration(engine, spec, ctx)
        return RecalOutcome(run_id, "full", n_recomputed=len(spec.claim_ids))
    with engine.connect() as lock:
        lock.execute(text("SELECT pg_advisory_lock(hashtextextended(:k, 0))"), {"k": key})
        lock.commit()
        held = True
        try:
            existing = find_complete_run(lock, key)
            lock.commit()
            if existing is not None:
                return RecalOutcome(existing, "reused")
            with engine.connect() as conn:
                changes = pool_changes(conn, spec, parent)
                conn.commit()
            if changes.favours_full_run:
                lock.execute(text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))"), {"k": key})
                lock.commit()
                held = False  # the full run takes the same lock on its own connection
                return recalibrate(engine, spec, ctx, force_full=True)
            with engine.begin() as conn:
                run_id = _start(conn, spec, key, fingerprint, ctx, parent)
            try:
                # the plan reads on one connection while a second fetches exact distances and the
                # store's transaction copies the unaffected rows it reports on a third
                with engine.connect() as reader, engine.connect() as checker, engine.begin() as conn:
                    copier = KeptRowsCopier(conn, run_id, parent)
                    try:
                        p = plan(reader, spec, parent, changes, on_kept=copier, check_conn=checker)
                        rows = compute_incremental(reader, spec, p)
                        _store(conn, spec, run_id, p, rows, copier)
                    finally:
                        copier.close()
            except BaseException:
                with engine.begin() as conn:
                    conn.execute(text("UPDATE calibration_runs SET status = 'failed', finished_at = now() "
                                      "WHERE id = :i"), {"i": run_id})
                raise
            return RecalOutcome(run_id, "incremental", parent, len(rows), p.n_copied, p.recomputed,
                                p.changes)
        finally:
            if held:
                lock.execute(text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))"), {"k": key})
                lock.commit()


# --------------------------------------------------------------------------- what is in force


def runs_in_force(conn: Connection, label_set_name: str) -> list[Any]:
    """The newest complete run of every calibration (target x score key x k x ...) of a lineage's targets.

    Only the newest prompt version per model and score kind counts: a guideline change supersedes
    the calibrations made under the older prompt.
    """
    return list(conn.execute(
        text(
            """WITH r AS (
                 SELECT r.*, row_number() OVER (
                   PARTITION BY r.target, r.model_id, r.params_hash, r.score_kind, r.embed_model, r.k,
                                r.alpha, r.threshold, r.interval_method,
                                coalesce(r.params->>'correction', 'paper') ORDER BY r.id DESC) AS n,
                   rank() OVER (PARTITION BY r.target, r.model_id, r.score_kind
                                ORDER BY pv.created_at DESC) AS prompt_rank
                 FROM calibration_runs r JOIN calibration_targets t ON t.name = r.target
                 JOIN label_sets ls ON ls.id = r.label_set_id AND ls.name = t.label_set_name
                 JOIN prompt_versions pv ON pv.id = r.prompt_version
                 WHERE t.label_set_name = :n AND r.status = 'complete')
               SELECT * FROM r WHERE n = 1 AND prompt_rank = 1 ORDER BY id"""
        ),
        {"n": label_set_name},
    ).mappings())


def spec_from_run(run: Any, label_set_id: int, claim_ids: Sequence[int]) -> RunSpec:
    """The same calibration as ``run`` on another label set and the target's current claims."""
    extra = {}
    if "correction" in {f.name for f in fields(RunSpec)}:
        extra["correction"] = (run["params"] or {}).get("correction", "paper")
    return RunSpec(
        target=run["target"], claim_ids=tuple(sorted(claim_ids)), label_set_id=label_set_id,
        key=ScoreKey(run["model_id"], run["prompt_version"], run["params_hash"], run["score_kind"]),
        k=run["k"], alpha=run["alpha"], threshold=run["threshold"], interval_method=run["interval_method"],
        embed_model=run["embed_model"], **extra,
    )


def recalibrate_lineage(
    engine: Engine, label_set_name: str, label_set_id: int, ctx: RunContext | None = None,
    validation_run_id: int | None = None,
) -> list[RecalOutcome]:
    """Recalibrate every calibration in force for a lineage's targets on its (new) label set."""
    from checkworthy.runs.label_updates import target_claim_ids

    with engine.connect() as conn:
        runs = runs_in_force(conn, label_set_name)
        targets = target_claim_ids(conn, label_set_name)
    return [recalibrate(engine, spec_from_run(r, label_set_id, targets[r["target"]]), ctx,
                        parent_run_id=r["id"], validation_run_id=validation_run_id)
            for r in runs if r["target"] in targets]


def targets_needing_work(conn: Connection, label_set_names: Sequence[str] | None = None) -> list[str]:
    """Targets with no complete run yet, or with more claims than their newest complete run covered.

    Cheap enough to run on every schedule tick, so that loading a model is skipped when nothing
    has arrived.
    """
    return list(conn.execute(
        text(
            """SELECT DISTINCT t.name FROM calibration_targets t
               LEFT JOIN LATERAL (SELECT (r.params->>'n_claims')::int AS n FROM calibration_runs r
                                  JOIN label_sets ls ON ls.id = r.label_set_id
                                  WHERE r.target = t.name AND ls.name = t.label_set_name
                                    AND r.status = 'complete'
                                  ORDER BY r.id DESC LIMIT 1) last ON true
               WHERE (last.n IS NULL
                      OR last.n < (SELECT count(*) FROM target_claims tc WHERE tc.target = t.name))
                 AND (CAST(:names AS text[]) IS NULL OR t.label_set_name = ANY(CAST(:names AS text[])))
               ORDER BY t.name"""
        ),
        {"names": list(label_set_names) if label_set_names is not None else None},
    ).scalars())


def unscored_in_force(conn: Connection, label_set_name: str, label_set_id: int) -> dict[str, list[int]]:
    """Claims of a label set with no stored prediction under a score key in force, by model spec.

    Newly labelled claims must be scored (and embedded) before they can act as neighbours.
    """
    out: dict[str, list[int]] = {}
    for run in runs_in_force(conn, label_set_name):
        ids = conn.execute(
            text(
                """SELECT i.claim_id FROM label_set_items i JOIN claims c ON c.id = i.claim_id
                   WHERE i.label_set_id = :ls AND NOT EXISTS (
                     SELECT 1 FROM predictions p WHERE p.text_hash = c.text_hash AND p.model_id = :m
                       AND p.prompt_version = :pv AND p.params_hash = :ph AND p.score_kind = :sk)"""
            ),
            {"ls": label_set_id, "m": run["model_id"], "pv": run["prompt_version"], "ph": run["params_hash"],
             "sk": run["score_kind"]},
        ).scalars().all()
        if ids:
            spec = conn.execute(text("SELECT spec FROM models WHERE id = :m"),
                                {"m": run["model_id"]}).scalar_one()
            out[spec] = sorted(set(out.get(spec, [])) | set(ids))
    return out
