"""Report analyses on arrays (pure, no I/O): k sweep, |L| sweep, reliability bins, histograms.

Everything here works on what one calibration run already implies (the target claims'
scores and gold labels, the labelled pool's labels and scores) plus each target's neighbour
list over the *whole* pool, nearest first (``k_big`` long, one SQL statement; see
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

Results are :class:`Row` objects, the shape of ``analysis_metrics`` (one number per row).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from checkworthy.method import metrics, nnppi
from checkworthy.method.metrics import metric_rows
from checkworthy.method.sampling import nested_subsamples
from checkworthy.store.knn import Pool

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


def _sweep_rows(values: dict[tuple[str, str, str], float], **where: int | None) -> Iterator[Row]:
    for method, metric, cls in SWEEP_METRICS:
        if (method, metric, cls) in values:
            yield Row(method, metric, float(values[(method, metric, cls)]), cls=cls, **where)


def k_sweep(
    y: ArrayLike, c: ArrayLike, neighbour_lists: ArrayLike, pool: Pool, ks: Iterable[int],
    alpha: float, threshold: float,
) -> list[Row]:
    """Metrics for each k, from the first k of each target's full-pool neighbour list."""
    lists = np.asarray(neighbour_lists)
    out: list[Row] = []
    for k in sorted(set(ks)):
        if k > lists.shape[1]:
            raise ValueError(f"k={k} exceeds the neighbour lists' length {lists.shape[1]}")
        out += _sweep_rows(evaluate(y, c, lists[:, :k], pool, alpha, threshold), k=k)
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
    y: ArrayLike, c: ArrayLike, neighbour_lists: ArrayLike, pool: Pool, sizes: Sequence[int],
    seeds: Sequence[int], ks: Sequence[int], alpha: float, threshold: float, fallback: Fallback,
) -> tuple[list[Row], int]:
    """Metrics per (|L|, seed, k) on stratified nested subsamples of the pool.

    Returns the rows and how many (target, size, seed, k) neighbour lists needed the exact
    fallback. Sizes above the pool size or below k are skipped for that k.
    """
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
                ids, short = knn_within_subset(neighbour_lists, subset_ids, k)
                if short.any():
                    rows_short = np.flatnonzero(short)
                    ids[rows_short] = fallback(rows_short, subset_ids, k)
                    n_fallback += len(rows_short)
                values = evaluate(y, c, ids, pool, alpha, threshold)
                rows += _sweep_rows(values, k=k, n_labelled=size, seed=int(seed))
    return rows + aggregate_over_seeds(rows), n_fallback


def aggregate_over_seeds(rows: Iterable[Row]) -> list[Row]:
    """Mean, sample sd, min, max and count over seeds of each (|L|, k, method, metric, class)."""
    groups: dict[tuple, list[tuple[int, float]]] = {}
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


def reliability_rows(
    y: ArrayLike, values: dict[str, ArrayLike], n_bins: int = 10
) -> list[Row]:
    """Reliability bins of each method's value (raw score, kNN mean, theta) against the label.

    Bins split [0, 1] into ``n_bins`` equal parts; values outside [0, 1] (theta is not
    clipped) fall into the end bins. Per bin: count, mean value, observed positive rate;
    per method: the expected calibration error ``sum_b n_b/n * |mean_b - rate_b|``.
    """
    t = np.asarray(y, dtype=float)
    out: list[Row] = []
    for method, raw in values.items():
        v = np.asarray(raw, dtype=float)
        b = np.clip(np.floor(v * n_bins).astype(int), 0, n_bins - 1)
        ece = 0.0
        for i in range(n_bins):
            m = b == i
            n = int(m.sum())
            out.append(Row(method, "count", float(n), bin=i))
            if n:
                mean, rate = float(v[m].mean()), float(t[m].mean())
                out += [Row(method, "mean_value", mean, bin=i), Row(method, "positive_rate", rate, bin=i)]
                ece += n / len(t) * abs(mean - rate)
        out.append(Row(method, "ece", ece if len(t) else float("nan")))
    return out


def histogram_rows(
    y: ArrayLike, values: dict[str, ArrayLike], edges: dict[str, Sequence[float]]
) -> list[Row]:
    """Counts of each method's value per bin and gold class; outside values go to end bins."""
    t = np.asarray(y, dtype=int)
    out: list[Row] = []
    for method, raw in values.items():
        e = np.asarray(edges[method], dtype=float)
        v = np.clip(np.asarray(raw, dtype=float), e[0], e[-1])
        b = np.clip(np.searchsorted(e, v, side="right") - 1, 0, len(e) - 2)
        for cls in metrics.CLASSES:
            counts = np.bincount(b[t == cls], minlength=len(e) - 1)
            out += [Row(method, "count", float(n), cls=str(cls), bin=i) for i, n in enumerate(counts)]
    return out
