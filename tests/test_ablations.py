"""The report's analyses on arrays (sweeps and bins): each function against values worked out by hand."""

import numpy as np
import pytest

from checkworthy.method import bins, sweeps
from checkworthy.method.sweeps import Row, SweepInputs
from checkworthy.store.knn import Pool

# a pool of 6 labelled claims (ids 10..60) and 3 targets whose full-pool neighbour lists are given
POOL = Pool(np.array([10, 20, 30, 40, 50, 60]), np.array([1, 1, 1, 0, 0, 0]),
            np.array([0.9, 0.6, 0.5, 0.3, 0.4, 0.1]))
LISTS = np.array([[10, 40, 20, 50, 30, 60],
                  [40, 50, 60, 10, 20, 30],
                  [20, 30, 10, 60, 40, 50]])
Y = np.array([1, 0, 1])
C = np.array([0.55, 0.45, 0.40])
INP = SweepInputs(Y, C, LISTS, POOL, alpha=0.05, threshold=0.5)


def value(rows, method, metric, cls="all", **where):
    hits = [r.value for r in rows if (r.method, r.metric, r.cls) == (method, metric, cls)
            and all(getattr(r, k) == v for k, v in where.items())]
    assert len(hits) == 1, (method, metric, where, hits)
    return hits[0]


def test_k_sweep_takes_the_first_k_of_each_list():
    rows = sweeps.k_sweep(INP, [1, 2])
    # k=1: residuals 0.1 (id 10), -0.3 (id 40), 0.4 (id 20) -> theta 0.65, 0.15, 0.80 -> decisions 1,0,1
    assert value(rows, "nnppi", "weighted_f1", k=1) == pytest.approx(1.0)
    # KNN k=1: labels 1, 0, 1 -> perfect too
    assert value(rows, "knn", "weighted_f1", k=1) == pytest.approx(1.0)
    # k=2: target 0: (0.1 - 0.3)/2 = -0.1 -> theta 0.45 -> 0 (gold 1); target 1: (-0.3 - 0.4)/2 -> 0.10 -> 0;
    # target 2: (0.4 + 0.5)/2 = 0.45 -> 0.85 -> 1. Decisions 0,0,1 vs gold 1,0,1:
    # class 0: P 1/2, R 1 -> F1 2/3 (support 1); class 1: P 1, R 1/2 -> F1 2/3 (support 2) -> weighted 2/3
    assert value(rows, "nnppi", "weighted_f1", k=2) == pytest.approx(2 / 3)
    assert value(rows, "nnppi", "accuracy", k=2) == pytest.approx(2 / 3)
    # baseline (raw score >= 0.5): 1,0,0 vs 1,0,1 -> same 2/3, independent of k
    assert value(rows, "baseline", "weighted_f1", k=1) == value(rows, "baseline", "weighted_f1", k=2) \
        == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        sweeps.k_sweep(INP, [7])


def test_knn_within_subset_keeps_list_order_and_flags_short_rows():
    ids, short = sweeps.knn_within_subset(LISTS, [20, 40, 60], k=2)
    assert ids.tolist() == [[40, 20], [40, 60], [20, 60]]
    assert short.tolist() == [False, False, False]
    ids, short = sweeps.knn_within_subset(LISTS[:, :3], [20, 40, 60], k=2)
    # target 0's first three are 10, 40, 20 -> 40, 20; target 2's are 20, 30, 10 -> only 20: short
    assert short.tolist() == [False, False, True]
    assert ids[0].tolist() == [40, 20] and ids[2].tolist() == [-1, -1]


def test_size_sweep_uses_the_fallback_only_for_short_lists_and_is_exact():
    calls = []

    def fallback(rows, subset, k):
        calls.append((rows.tolist(), sorted(subset.tolist()), k))
        # the exact answer from the full lists (what SQL restricted to the subset returns)
        return sweeps.knn_within_subset(LISTS[rows], subset, k)[0]

    short_lists = LISTS[:, :2]  # k_big = 2: most subsets leave some target short
    rows, n_fallback = sweeps.label_set_size_sweep(SweepInputs(Y, C, short_lists, POOL, 0.05, 0.5),
                                                    sizes=[2, 4, 6], seeds=[0, 1], ks=[1, 2], fallback=fallback)
    full, _ = sweeps.label_set_size_sweep(INP, sizes=[2, 4, 6], seeds=[0, 1], ks=[1, 2], fallback=fallback)
    assert n_fallback == sum(len(c[0]) for c in calls) > 0
    def as_dict(rs):
        return {(r.k, r.n_labelled, r.seed, r.method, r.metric, r.cls, r.statistic): r.value for r in rs}

    assert as_dict(rows) == pytest.approx(as_dict(full))
    # the whole pool: every seed gives the k sweep's figure, sd 0
    ksw = sweeps.k_sweep(INP, [2])
    assert value(rows, "nnppi", "weighted_f1", k=2, n_labelled=6, statistic="mean") == \
        pytest.approx(value(ksw, "nnppi", "weighted_f1", k=2))
    assert value(rows, "nnppi", "weighted_f1", k=2, n_labelled=6, statistic="sd") == 0.0
    assert value(rows, "nnppi", "weighted_f1", k=2, n_labelled=6, statistic="n") == 2.0


def test_stratified_subsamples_keep_the_class_shares_and_nest():
    labels = np.array([0] * 30 + [1] * 10)
    subs = sweeps.stratified_nested_subsamples(labels, [4, 8, 20, 40], seed=3)
    assert [len(s) for s in subs] == [4, 8, 20, 40]
    assert [int(labels[s].sum()) for s in subs] == [1, 2, 5, 10]  # 25% positives: round(n/4)
    for small, big in zip(subs, subs[1:]):
        assert set(small) <= set(big)
    again = sweeps.stratified_nested_subsamples(labels, [4, 8, 20, 40], seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(subs, again))
    other = sweeps.stratified_nested_subsamples(labels, [4, 8, 20, 40], seed=4)
    assert not np.array_equal(subs[1], other[1])


def test_aggregate_over_seeds():
    rows = [Row("nnppi", "weighted_f1", v, k=3, n_labelled=50, seed=s)
            for s, v in [(0, 0.5), (1, 0.7), (2, 0.6)]]
    agg = {r.statistic: r.value for r in sweeps.aggregate_over_seeds(rows)}
    assert agg == pytest.approx({"mean": 0.6, "sd": 0.1, "min": 0.5, "max": 0.7, "n": 3.0})


def test_reliability_rows_by_hand():
    y = [0, 1, 1, 0]
    rows = bins.reliability_rows(y, {"nnppi": [0.05, 0.12, 1.3, -0.2]}, n_bins=2)
    # bin 0 [0, .5): 0.05, 0.12, -0.2 (clipped in) -> mean -0.01, rate 1/3; bin 1: 1.3 -> rate 1
    assert value(rows, "nnppi", "count", bin=0) == 3 and value(rows, "nnppi", "count", bin=1) == 1
    assert value(rows, "nnppi", "mean_value", bin=0) == pytest.approx(-0.01)
    assert value(rows, "nnppi", "positive_rate", bin=0) == pytest.approx(1 / 3)
    assert value(rows, "nnppi", "ece") == pytest.approx(3 / 4 * abs(-0.01 - 1 / 3) + 1 / 4 * 0.3)


def test_histogram_rows_by_hand():
    rows = bins.histogram_rows([0, 0, 1, 1, 1], {"nnppi": [-1.0, 0.2, 0.5, 0.99, 2.0]},
                               {"nnppi": [0.0, 0.5, 1.0]})
    counts = {(r.cls, r.bin): r.value for r in rows}
    assert counts == {("0", 0): 2, ("0", 1): 0, ("1", 0): 0, ("1", 1): 3}
