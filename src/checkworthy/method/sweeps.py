"""The k and |L| sweeps of NN-PPI on one run's arrays (pure, no I/O).

Everything here works on what one calibration run already implies (the target claims'
scores and gold labels, the labelled pool's labels and scores) plus each target's neighbour
list over the *whole* pool, nearest first (``k_big`` long, one SQL statement: the caller's, e.g.
:func:`checkworthy.store.knn.neighbour_lists`). From that single list:

- the **k sweep** takes the first k neighbours for every k <= ``k_big``: exactly what the
  SQL kNN returns for that k (same order, same tie-break by claim id);
- the **|L| sweep** draws a class-stratified nested subsample of the pool and keeps, for each
  target, only the neighbours that are in the subsample, in the same order. The first k of
  those are the k nearest neighbours *within the subsample*, provided at least k of the
  ``k_big`` nearest pool members were drawn. When fewer remain, the true neighbours lie
  beyond the list: :func:`knn_within_subset` reports those targets and the caller fills them
  in with an exact kNN restricted to the subsample (a SQL fallback), so the sweep is exact,
  never an approximation.

Results are :class:`Row` objects, the shape of ``analysis_metrics`` (one number per row);
:mod:`checkworthy.method.bins` makes the binned ones and :mod:`checkworthy.runs.analyses` stores them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from checkworthy.method import nnppi
from checkworthy.method.metrics import metric_rows
from checkworthy.method.sampling import nested_subsamples

#: metrics kept per evaluation in the sweeps (method, metric, class)
SWEEP_METRICS: tuple[tuple[str, str, str], ...] = tuple(
    [(m, "weighted_f1", "all") for m in ("baseline", "knn", "nnppi")]
    + [(m, "f1", c) for m in ("knn", "nnppi") for c in ("0", "1")]
    + [(m, "accuracy", "all") for m in ("knn", "nnppi")]
    + [("nnppi", "coverage", "all"), ("nnppi", "mean_width", "all")]
)


@dataclass(frozen=True)
class Row:
    """One figure of an analysis (the columns of ``analysis_metrics``)."""

    method: str
    metric: str
    value: float
    cls: str = "all"
    variant: str = ""
    k: int | None = None
    n_labelled: int | None = None
    seed: int | None = None
    bin: int | None = None
    statistic: str = "value"


class Pool(Protocol):
    """The labelled pool a run calibrates against (:class:`checkworthy.store.knn.Pool`): claim ids
    (sorted), their labels and scores, and the position of given ids in it."""

    ids: NDArray[np.int64]
    labels: NDArray[np.int64]
    scores: NDArray[np.float64]

    def positions(self, claim_ids: ArrayLike) -> NDArray[np.int64]: ...


@dataclass(frozen=True)
class SweepInputs:
    """What both sweeps read: the targets' gold labels ``y`` and scores ``c``, their neighbour lists
    over the whole pool (nearest first), the pool, and the run's alpha and threshold."""

    y: ArrayLike
    c: ArrayLike
    neighbour_lists: ArrayLike
    pool: Pool
    alpha: float
    threshold: float


def evaluate(
    y: ArrayLike, c: ArrayLike, neighbour_ids: ArrayLike, pool: Pool, alpha: float, threshold: float
) -> dict[tuple[str, str, str], float]:
    """All metric rows of NN-PPI (and both baselines) for targets with these neighbours.

    The same :func:`checkworthy.method.metrics.metric_rows` a calibration run stores, so a sweep
    point at the run's own k and pool equals the run's stored metrics.
    """
    pos = pool.positions(np.asarray(neighbour_ids).reshape(-1)).reshape(np.shape(neighbour_ids))
    res = nnppi.nnppi(c, pool.labels[pos], pool.scores[pos], alpha, threshold)
    return {(m, n, cl): v for m, n, cl, v in metric_rows(y, res)}


def _sweep_rows(values: dict[tuple[str, str, str], float], *, k: int, n_labelled: int | None = None,
                seed: int | None = None) -> Iterator[Row]:
    for method, metric, cls in SWEEP_METRICS:
        if (method, metric, cls) in values:
            yield Row(method, metric, float(values[(method, metric, cls)]), cls=cls, k=k,
                      n_labelled=n_labelled, seed=seed)


def k_sweep(inp: SweepInputs, ks: Iterable[int]) -> list[Row]:
    """Metrics for each k, from the first k of each target's full-pool neighbour list."""
    lists = np.asarray(inp.neighbour_lists)
    out: list[Row] = []
    for k in sorted(set(ks)):
        if k > lists.shape[1]:
            raise ValueError(f"k={k} exceeds the neighbour lists' length {lists.shape[1]}")
        out += _sweep_rows(evaluate(inp.y, inp.c, lists[:, :k], inp.pool, inp.alpha, inp.threshold), k=k)
    return out


def stratified_nested_subsamples(
    labels: ArrayLike, sizes: Sequence[int], seed: int
) -> list[NDArray[np.int64]]:
    """Nested subsamples of pool positions that keep the pool's class proportions.

    The paper balances L by class on purpose (a one-sided L pulls every theta towards one
    class); a plain random subsample of a balanced pool is only balanced on average, which at
    |L| = 50 adds noise that has nothing to do with |L|. Each class gets
    ``round(size * share)`` items (the other class the rest), drawn with
    :func:`checkworthy.method.sampling.nested_subsamples` under seed ``2 * seed + class``, so the
    subsample of each size contains the smaller ones.
    """
    y = np.asarray(labels, dtype=int)
    pos0, pos1 = np.flatnonzero(y == 0), np.flatnonzero(y == 1)
    share0 = len(pos0) / max(len(y), 1)
    n0 = [min(int(np.floor(s * share0 + 0.5)), len(pos0)) for s in sizes]
    n1 = [s - a for s, a in zip(sizes, n0)]
    if any(b > len(pos1) or b < 0 for b in n1):
        raise ValueError(f"sizes {list(sizes)} do not fit a pool of {len(y)}")
    sub0 = nested_subsamples(pos0, n0, seed=2 * seed)
    sub1 = nested_subsamples(pos1, n1, seed=2 * seed + 1)
    return [np.sort(np.concatenate([a, b])) for a, b in zip(sub0, sub1)]


def knn_within_subset(
    neighbour_lists: ArrayLike, subset_ids: ArrayLike, k: int
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """The first k neighbours of each target that belong to ``subset_ids``.

    Returns ``(ids, short)``: ``ids`` (n, k) holds the neighbours (-1 where a row is short),
    ``short`` marks targets with fewer than k subset members in their list; only for those
    does the answer need an exact kNN restricted to the subset.
    """
    lists = np.asarray(neighbour_lists, dtype=np.int64)
    member = np.isin(lists, np.asarray(subset_ids, dtype=np.int64))
    rank = np.cumsum(member, axis=1)
    short = rank[:, -1] < k if lists.shape[1] else np.ones(len(lists), dtype=bool)
    take = member & (rank <= k)
    out = np.full((len(lists), k), -1, dtype=np.int64)
    ok = ~short
    out[ok] = lists[ok][take[ok]].reshape(-1, k)
    return out, short


#: fallback: (target row indices, subset claim ids, k) -> (len(rows), k) neighbour ids
Fallback = Callable[[NDArray[np.int64], NDArray[np.int64], int], NDArray[np.int64]]


def label_set_size_sweep(
    inp: SweepInputs, sizes: Sequence[int], seeds: Sequence[int], ks: Sequence[int], fallback: Fallback,
) -> tuple[list[Row], int]:
    """Metrics per (|L|, seed, k) on stratified nested subsamples of the pool.

    Returns the rows and how many (target, size, seed, k) neighbour lists needed the exact
    fallback. Sizes above the pool size or below k are skipped for that k.
    """
    pool = inp.pool
    n_pool = len(pool.ids)
    sizes = sorted({int(s) for s in sizes if 0 < s <= n_pool})
    rows: list[Row] = []
    n_fallback = 0
    for seed in seeds:
        subsets = stratified_nested_subsamples(pool.labels, sizes, seed)
        for size, positions in zip(sizes, subsets):
            subset_ids = pool.ids[positions]
            for k in sorted(set(ks)):
                if size < k:
                    continue
                ids, short = knn_within_subset(inp.neighbour_lists, subset_ids, k)
                if short.any():
                    rows_short = np.flatnonzero(short)
                    ids[rows_short] = fallback(rows_short, subset_ids, k)
                    n_fallback += len(rows_short)
                values = evaluate(inp.y, inp.c, ids, pool, inp.alpha, inp.threshold)
                rows += _sweep_rows(values, k=k, n_labelled=size, seed=int(seed))
    return rows + aggregate_over_seeds(rows), n_fallback


def aggregate_over_seeds(rows: Iterable[Row]) -> list[Row]:
    """Mean, sample sd, min, max and count over seeds of each (|L|, k, method, metric, class)."""
    groups: dict[tuple[str, int | None, int | None, str, str, str], list[tuple[int, float]]] = {}
    for r in rows:
        if r.statistic == "value" and r.seed is not None:
            key = (r.variant, r.k, r.n_labelled, r.method, r.metric, r.cls)
            groups.setdefault(key, []).append((r.seed, r.value))
    out = []
    for (variant, k, n, method, metric, cls), vals in sorted(groups.items(), key=lambda kv: str(kv[0])):
        v = np.array([x for _, x in sorted(vals)], dtype=float)
        stats = {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if len(v) > 1 else 0.0,
                 "min": float(v.min()), "max": float(v.max()), "n": float(len(v))}
        out += [Row(method, metric, val, cls=cls, variant=variant, k=k, n_labelled=n, statistic=s)
                for s, val in stats.items()]
    return out

