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

An HNSW run (``knn: hnsw``) is brought up to date the same way from an HNSW parent with the same
``ef_search``: its lists were found by the index, the added claims that enter them are found
exactly, and claims that need a new search get it through the index. The result is not the list a
fresh search of the new index would return (neither is exact), so the run records its own
recall@k against the exact path, measured on its stored lists like a full HNSW run's.

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

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from sqlalchemy import Connection, Engine
from threadpoolctl import threadpool_limits

from checkworthy.method import nnppi
from checkworthy.runs.calibration import (
    CalibrationOutcome,
    finish_run,
    fit,
    is_paper_default,
    raw_score_prevalence,
    rule_and_drift,
)
from checkworthy.runs.calibration_run import (
    STARTING,
    ensure_run_languages,
    knn_record,
    recall_sample,
    run_calibration,
)
from checkworthy.runs.scoring import score_missing
from checkworthy.scorers.base import Scorer
from checkworthy.scorers.registry import PromptInfo
from checkworthy.store import recalibration as recal_store
from checkworthy.store.calibration_runs import (
    close_abandoned_runs,
    fail_run,
    find_complete_run,
    find_parent_run,
    insert_run,
    load_run,
    lock_run_key,
    result_values,
    runs_in_force,
    stored_neighbour_ids,
    unlock_run_key,
)
from checkworthy.store.knn import nearest_labelled
from checkworthy.store.lineages import target_claim_ids
from checkworthy.store.rows import (
    ScoreKey,
    claim_scores,
    claim_text_hashes,
    label_set_claims_without_score,
    label_set_fingerprint,
    model_spec,
)
from checkworthy.store.run_spec import RunContext, RunRecord, RunSpec, run_key

#: above this share of added claims in the new pool a full run is cheaper
MAX_ADDED_SHARE = 0.5

#: the parent's rows are examined in blocks of this many, as the COPY delivers them, so that the
#: unaffected rows of a block are being copied while the next blocks arrive
PARENT_BLOCK = 16_384
#: slack of the vector prefilter, in cosine distance: pgvector sums 384 (MiniLM) or 512 (USE)
#: float32 products, so its distance may be off by up to ~7e-5 (~1e-4) from the exact one; numpy's
#: float32 product by ~1e-6
PREFILTER_MARGIN = 1e-3


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


def incremental_applies(spec: RunSpec) -> bool:
    """Only the paper's NN-PPI (z interval, residual-mean correction) is local to each claim's
    neighbours; fitted corrections, conformal intervals and the CV choice depend on all of L, so a
    label change moves every claim and those calibrations are recomputed in full (so does a
    decision for the batch's prior, which depends on every claim of the batch). Both kNN paths."""
    return is_paper_default(spec)


def find_parent(conn: Connection, spec: RunSpec) -> int | None:
    """The newest complete run of the same calibration, by the same kNN path, on a version of the
    same lineage."""
    return find_parent_run(conn, spec)


def same_knn_path(run: Any, spec: RunSpec) -> bool:
    """Whether ``run`` found its neighbours the way ``spec`` does: an exact run's lists are merged
    exactly, an HNSW run's keep the index's approximation (so its ``ef_search`` and the index's
    build must match too)."""
    return spec.methods.knn_path.found(RunRecord.of(run).knn)


def pool_changes(conn: Connection, spec: RunSpec, parent_run_id: int) -> PoolChanges:
    """Compare the eligible labelled pools of the parent's label set and of ``spec``'s."""
    parent = load_run(conn, parent_run_id)
    rows = recal_store.pools(conn, spec.label_set_id, parent["label_set_id"], spec.key,
                             spec.methods.embed_model)
    df = pd.DataFrame(rows, columns=["claim_id", "new", "old", "score", "since"]).set_index("claim_id")
    new, old = df[df["new"].notna()], df[df["old"].notna()]
    old_strict = set(old.index[old["since"] < parent["started_at"]])
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


def _plan(conn: Connection, spec: RunSpec, parent_run_id: int, ch: PoolChanges,
          on_kept: Callable[[NDArray[np.int64]], None] | None,
          checker: tuple[ThreadPoolExecutor, Connection] | None) -> Plan:
    """The body of :func:`plan` (``checker``: where to fetch exact distances while reading)."""
    k, embed_model = spec.methods.k, spec.methods.embed_model
    wanted = np.asarray(sorted(set(spec.claim_ids)), dtype=np.int64)
    removed, changed = np.asarray(ch.removed, dtype=np.int64), np.asarray(ch.changed, dtype=np.int64)
    added_ids, added_vectors = _added_vectors(conn, ch.added, embed_model)
    blocks: list[tuple[np.ndarray, ...]] = []
    candidates: list[tuple[np.ndarray, ...]] = []
    checks: list[Future[pd.DataFrame]] = []
    for rows in recal_store.parent_blocks(conn, parent_run_id, k, PARENT_BLOCK,
                                          spec.methods.embed_model if ch.added else None):
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
                checks.append(checker[0].submit(_exact_entering, checker[1], embed_model, *pairs))
        copied = in_parent & ~lost & ~relabelled & ~near
        if on_kept is None:
            copied[:] = False
        elif copied.any():
            on_kept(ids[copied])
        blocks.append((ids, rows["score"].astype(float), nids, nds, in_parent, lost, relabelled, copied))
    entering = _entering(conn, embed_model, checks, candidates)
    return _assemble(conn, spec, parent_run_id, ch, wanted, blocks, entering)


def _entering(conn: Connection, embed_model: str, checks: list[Future[pd.DataFrame]],
              candidates: list[tuple[np.ndarray, ...]]) -> pd.DataFrame:
    """The added claims that enter a target's k nearest (claim_id, neighbour_id, distance): those
    the checks found while the parent was read, and those of the ``candidates`` left to check."""
    found = [job.result() for job in checks]
    if candidates:
        found.append(_exact_entering(conn, embed_model, *(np.concatenate(c) for c in zip(*candidates))))
    found = [f for f in found if len(f)]
    if not found:
        return pd.DataFrame(columns=["claim_id", "neighbour_id", "distance"])
    return pd.concat(found, ignore_index=True)


def _assemble(conn: Connection, spec: RunSpec, parent_run_id: int, ch: PoolChanges, wanted: np.ndarray,
              blocks: list[tuple[np.ndarray, ...]], entering: pd.DataFrame) -> Plan:
    """The plan from the parent's blocks as :func:`_plan` read them (claim ids, scores, neighbour
    ids and distances, and which are wanted, lost a neighbour, lost a label, were copied) and the
    added claims that enter some target's neighbours."""
    k = spec.methods.k
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
    touched = set(ids[relabelled].tolist()) | set(entering["claim_id"].tolist())
    merge = sorted(touched - need_knn)
    recomputed = np.fromiter(need_knn | touched, np.int64)
    keep = ids[in_parent & ~copied & ~np.isin(ids, recomputed)].tolist()
    return Plan(parent_run_id, scores, ch.pool, sorted(need_knn), merge, keep, entering, ch.counts,
                (ids[in_parent], nids[in_parent], nds[in_parent]), int(copied.sum()))


def _added_vectors(conn: Connection, added: list[int],
                   embed_model: str) -> tuple[NDArray[np.int64], np.ndarray]:
    """The added claims' ids and unit float32 vectors (rows)."""
    ids, vectors = recal_store.claim_vectors(conn, added, embed_model)
    if len(ids):
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return ids, vectors


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
    rows, cols = np.nonzero(T @ added.T >= limit[:, None])  # cos >= 1 - (kth + margin)
    return rows, cols


def _exact_entering(conn: Connection, embed_model: str, cand_t: NDArray[np.int64], cand_a: NDArray[np.int64],
                    kth_distance: NDArray[np.float64], kth_id: NDArray[np.int64]) -> pd.DataFrame:
    """(target, added claim, distance) of the candidate pairs ``(cand_t[i], cand_a[i])`` where the
    added claim enters the target's top k, whose k-th neighbour is ``kth_id[i]`` at ``kth_distance[i]``.

    The distance is pgvector's own (the expression the SQL kNN orders by), and the test the kNN's
    order: ``(distance, id) < (k-th distance, k-th id)``.
    """
    if not len(cand_t):
        return pd.DataFrame(columns=["claim_id", "neighbour_id", "distance"])
    i, d = recal_store.exact_distances(conn, cand_t, cand_a, embed_model)
    enters = (d < kth_distance[i]) | ((d == kth_distance[i]) & (cand_a[i] < kth_id[i]))
    i = i[enters]
    return pd.DataFrame({"claim_id": cand_t[i], "neighbour_id": cand_a[i], "distance": d[enters]})


def _merge_neighbours(conn: Connection, spec: RunSpec, p: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """New top-k of the merge claims: the parent's k neighbours plus the added claims that enter."""
    k = spec.methods.k
    if p.parent_nb is None:
        raise RuntimeError("the plan holds no parent rows to merge")
    t_ids, nids, nds = p.parent_nb
    sel = np.isin(t_ids, np.asarray(p.merge, dtype=np.int64))
    ids, nid, nd = t_ids[sel], nids[sel], nds[sel]
    old = pd.DataFrame({"claim_id": np.repeat(ids, k), "neighbour_id": nid.ravel(), "distance": nd.ravel()})
    enter = p.entering[p.entering["claim_id"].isin(set(p.merge))]
    cand = pd.concat([old, enter], ignore_index=True).astype({"claim_id": np.int64, "neighbour_id": np.int64,
                                                               "distance": float})
    cand = cand.drop_duplicates(["claim_id", "neighbour_id"])
    cand = cand.sort_values(["claim_id", "distance", "neighbour_id"], kind="mergesort")
    top = cand.groupby("claim_id", sort=True).head(k)
    out_ids = top["claim_id"].to_numpy()[::k]
    if len(top) != len(out_ids) * k or len(out_ids) != len(p.merge):
        raise RuntimeError("incremental merge lost neighbours: the parent run is inconsistent")
    return out_ids, top["neighbour_id"].to_numpy().reshape(-1, k), top["distance"].to_numpy().reshape(-1, k)


@dataclass
class ResultRows:
    """Recomputed result rows as columns (one entry per claim), ready for a binary COPY."""

    claim_ids: NDArray[np.int64]
    result: nnppi.NNPPIResult
    neighbour_ids: NDArray[np.int64]  # (n, k), nearest first
    neighbour_distances: NDArray[np.float64]  # (n, k)

    def __len__(self) -> int:
        return len(self.claim_ids)


def compute_incremental(conn: Connection, spec: RunSpec, p: Plan) -> ResultRows:
    """Result rows of the recomputed claims: the SQL-kNN claims, then the merged ones."""
    k = spec.methods.k
    # (claim ids, neighbour ids, distances, neighbour labels, neighbour scores) per way of finding them
    parts = [(np.zeros(0, np.int64), np.zeros((0, k), np.int64), np.zeros((0, k)), np.zeros((0, k), np.int64),
              np.zeros((0, k)))]
    if p.knn:
        nb = nearest_labelled(conn, spec.label_set_id, p.knn, k, spec.key,
                              embed_model=spec.methods.embed_model, knn=spec.methods.knn_path)
        parts.append((nb.claim_ids, nb.neighbour_ids, nb.distances, nb.labels, nb.scores))
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
    res = nnppi.nnppi(c, lab, sc, spec.methods.alpha, spec.methods.threshold)
    return ResultRows(ids.astype(np.int64), res, nid.astype(np.int64), dist.astype(float))


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
            self._jobs.append(self._worker.submit(recal_store.copy_kept, self.conn, self.run_id,
                                                  self.parent_run_id, claim_ids))

    def wait(self) -> None:
        """Wait for every queued copy; raise the first failure."""
        for job in self._jobs:
            job.result()

    def close(self) -> None:
        """Wait for the worker to finish (also after a failure elsewhere) and stop it."""
        self._worker.shutdown(wait=True, cancel_futures=True)


def store_incremental(conn: Connection, spec: RunSpec, run_id: int, p: Plan, rows: ResultRows,
                      copier: KeptRowsCopier | None = None) -> None:
    """Finish the run's rows (the copies ``copier`` was given while planning, the rest of the
    unaffected rows from the parent in SQL, the recomputed ones by COPY), then the run itself
    (:func:`checkworthy.runs.calibration.finish_run`) with what its stored rows give."""
    if copier is not None:
        copier.wait()
    if p.keep:
        recal_store.copy_kept(conn, run_id, p.parent_run_id, p.keep)
    recal_store.copy_results(conn, run_id, rows.claim_ids, rows.result, rows.neighbour_ids,
                             rows.neighbour_distances)
    finish_run(conn, run_id, stored_outcome(conn, spec, run_id, p, len(rows)))


def stored_outcome(conn: Connection, spec: RunSpec, run_id: int, p: Plan, n_recomputed: int
                   ) -> CalibrationOutcome:
    """An incremental run's outcome read back from its stored rows (copied and recomputed): the
    results, their drift figure and rule on the run's label set, the batch's share, and the counts
    of what was recomputed, copied and changed."""
    n_cal = p.n_copied + n_recomputed
    stored = result_values(conn, run_id) if n_cal else []
    ids = [r.claim_id for r in stored]
    arr = {c: np.array([getattr(r, c) for r in stored], dtype=float)
           for c in ("score", "theta", "ci_low", "ci_high", "knn_mean", "nearest")}
    result = nnppi.NNPPIResult.decided(arr["score"], arr["theta"], arr["ci_low"], arr["ci_high"],
                                       arr["knn_mean"], spec.methods.threshold,
                                       np.array([int(r.decision) for r in stored]))
    record = RunRecord(n_claims=len(spec.claim_ids), n_calibrated=n_cal,
                       n_without_score=len(spec.claim_ids) - n_cal,
                       extra={"n_recomputed": n_recomputed, "n_copied": p.n_copied}
                       | {f"n_{k}_labelled": v for k, v in p.changes.items()})
    if n_cal:
        figures = rule_and_drift(conn, fit(conn, spec), result.theta, arr["nearest"],
                                 stored_neighbour_ids(conn, run_id, ids), ids)
        record |= replace(figures, knn=incremental_knn_record(conn, spec, run_id, ids),
                          prevalence=raw_score_prevalence(conn, spec, result.score, figures.drift))
    return CalibrationOutcome(np.asarray(ids, dtype=np.int64), result, arr["nearest"], record)


def incremental_knn_record(conn: Connection, spec: RunSpec, run_id: int, claim_ids: list[int]
                           ) -> dict[str, Any]:
    """The run's kNN record (:func:`checkworthy.runs.calibration_run.knn_record`), its HNSW recall
    measured on the stored lists: the parent's index-found lists with entering labels merged."""
    if spec.methods.knn == "exact":
        return spec.methods.knn_path.as_dict()
    ids = np.asarray(claim_ids, dtype=np.int64)
    rows = recall_sample(len(ids))
    return knn_record(conn, spec, ids[rows], stored_neighbour_ids(conn, run_id, ids[rows].tolist()))


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
        fingerprint = label_set_fingerprint(lock, spec.label_set_id)
        key = run_key(spec, fingerprint)
        existing = find_complete_run(lock, key)
        parent = None
        if not force_full and incremental_applies(spec):
            if parent_run_id is not None and same_knn_path(load_run(lock, parent_run_id), spec):
                parent = parent_run_id
            else:
                parent = find_parent(lock, spec)
        lock.commit()
    if existing is not None:
        return RecalOutcome(existing, "reused")
    if parent is None:
        run_id = run_calibration(engine, spec, ctx)
        return RecalOutcome(run_id, "full", n_recomputed=len(spec.claim_ids))
    return _recalibrate_from(engine, spec, ctx, (key, fingerprint), parent)


def _recalibrate_from(engine: Engine, spec: RunSpec, ctx: RunContext, keyed: tuple[str, str],
                      parent: int) -> RecalOutcome:
    """:func:`recalibrate` from ``parent`` under the run's key (``keyed``: the key and the label
    set's fingerprint), holding the key's lock: the run stored meanwhile is reused, and too many
    added labels make it a full run."""
    key, fingerprint = keyed
    with engine.connect() as lock:
        lock_run_key(lock, key)
        held = True
        try:
            close_abandoned_runs(lock, STARTING)
            existing = find_complete_run(lock, key)
            lock.commit()
            if existing is not None:
                return RecalOutcome(existing, "reused")
            with engine.connect() as conn:
                changes = pool_changes(conn, spec, parent)
                conn.commit()
            if changes.favours_full_run:
                unlock_run_key(lock, key)
                held = False  # the full run takes the same lock on its own connection
                return recalibrate(engine, spec, ctx, force_full=True)
            params = ctx.extra | {"n_claims": len(spec.claim_ids)}
            with engine.begin() as conn:
                ensure_run_languages(conn, spec)
                run_id = insert_run(conn, spec, key, fingerprint, params, ctx, parent, "incremental")
            return _incremental_run(engine, spec, run_id, parent, changes)
        finally:
            if held:
                unlock_run_key(lock, key)


def _incremental_run(engine: Engine, spec: RunSpec, run_id: int, parent: int, changes: PoolChanges
                     ) -> RecalOutcome:
    """Compute and store the running incremental run ``run_id`` from ``parent`` (failed on any
    error). The plan reads on one connection while a second fetches exact distances and the
    store's transaction copies the unaffected rows it reports on a third."""
    try:
        with engine.connect() as reader, engine.connect() as checker, engine.begin() as conn:
            copier = KeptRowsCopier(conn, run_id, parent)
            try:
                p = plan(reader, spec, parent, changes, on_kept=copier, check_conn=checker)
                rows = compute_incremental(reader, spec, p)
                store_incremental(conn, spec, run_id, p, rows, copier)
            finally:
                copier.close()
    except BaseException:
        with engine.begin() as conn:
            fail_run(conn, run_id)
        raise
    return RecalOutcome(run_id, "incremental", parent, len(rows), p.n_copied, p.recomputed, p.changes)


# --------------------------------------------------------------------------- what is in force


def spec_from_run(run: Any, label_set_id: int, claim_ids: Sequence[int]) -> RunSpec:
    """The same calibration as ``run`` on another label set and the target's current claims."""
    return RunSpec.from_row(run, label_set_id, claim_ids)


def recalibrate_lineage(
    engine: Engine, label_set_name: str, label_set_id: int, ctx: RunContext | None = None,
    validation_run_id: int | None = None,
) -> list[RecalOutcome]:
    """Recalibrate every calibration in force for a lineage's targets on its (new) label set."""
    with engine.connect() as conn:
        runs = runs_in_force(conn, label_set_name)
        targets = target_claim_ids(conn, label_set_name)
    return [recalibrate(engine, spec_from_run(r, label_set_id, targets[r["target"]]), ctx,
                        parent_run_id=r["id"], validation_run_id=validation_run_id)
            for r in runs if r["target"] in targets]


def unscored_in_force(conn: Connection, label_set_name: str, label_set_id: int
                      ) -> dict[tuple[str, str, str], list[int]]:
    """Claims of a label set with no stored prediction under a score key in force, by the key's
    (model spec, params hash, prompt version).

    Newly labelled claims must be scored (and embedded) before they can act as neighbours.
    """
    out: dict[tuple[str, str, str], list[int]] = {}
    for run in runs_in_force(conn, label_set_name):
        key = ScoreKey(run["model_id"], run["prompt_version"], run["params_hash"], run["score_kind"])
        ids = label_set_claims_without_score(conn, label_set_id, key)
        if ids:
            spec = (model_spec(conn, run["model_id"]), run["params_hash"], run["prompt_version"])
            out[spec] = sorted(set(out.get(spec, [])) | set(ids))
    return out


@dataclass(frozen=True)
class Unscorable:
    """Newly labelled claims no configured scorer gives the run's scores for: they join the label
    set, but act as neighbours only once scored under the run's key."""

    model: str
    claim_ids: list[int]
    reason: str


def score_unscored_in_force(
    engine: Engine, label_set_name: str, label_set_id: int,
    scorer_for: Callable[[str, str, str], tuple[Scorer, PromptInfo]],
) -> tuple[int, list[Unscorable]]:
    """Score the label set's claims each score key in force lacks, with the scorer that gives
    that key's scores (``scorer_for(model spec, params hash, prompt version)``, ValueError when
    none does); return how many texts were scored and what could not be."""
    with engine.connect() as conn:
        missing = unscored_in_force(conn, label_set_name, label_set_id)
    n, left = 0, []
    for (spec, params_hash, prompt_version), ids in sorted(missing.items()):
        try:
            scorer, prompt = scorer_for(spec, params_hash, prompt_version)
        except ValueError as exc:
            left.append(Unscorable(spec, ids, str(exc)))
            continue
        with engine.connect() as conn:
            hashes = claim_text_hashes(conn, ids)
        n += score_missing(engine, scorer, hashes, prompt)[0]
    return n, left
