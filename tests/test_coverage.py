"""Greedy k-center: its 2-approximation checked against the exact optimum on small cases, anchors
respected, seeded and total."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from checkworthy.method.coverage import coverage_order, covering_radius, k_center


def _points(rng: np.random.Generator, n: int, d: int = 5) -> np.ndarray:
    v = rng.normal(size=(n, d)) + np.where(rng.random((n, 1)) < 0.5, 2.0, -2.0)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.parametrize("seed", range(40))
def test_greedy_k_center_is_within_twice_the_optimal_radius(seed):
    rng = np.random.default_rng(seed)
    x, k = _points(rng, 12), int(rng.integers(1, 5))
    greedy = covering_radius(x, k_center(x, k, seed=seed))
    best = min(covering_radius(x, c) for c in combinations(range(len(x)), k))
    assert best <= greedy <= 2 * best + 1e-9


def test_picks_are_distinct_seeded_and_all_when_k_exceeds_them():
    x = _points(np.random.default_rng(0), 30)
    a, b = k_center(x, 10, seed=3), k_center(x, 10, seed=3)
    assert np.array_equal(a, b) and len(set(a.tolist())) == 10
    assert sorted(k_center(x, 99, seed=1).tolist()) == list(range(30))
    assert k_center(x, 0).size == 0 and k_center(np.empty((0, 5)), 3).size == 0


def test_with_anchors_the_first_picks_are_the_farthest_from_them():
    """Candidates near the anchors and a far cluster: the far cluster is covered first."""
    rng = np.random.default_rng(1)
    near = np.array([1.0, 0, 0]) + rng.normal(0, 0.05, (20, 3))
    far = np.array([0, 0, 1.0]) + rng.normal(0, 0.05, (5, 3))
    anchors = np.array([1.0, 0, 0]) + rng.normal(0, 0.05, (50, 3))
    picks = k_center(np.vstack([near, far]), 3, anchors=anchors)
    assert picks[0] >= 20 and k_center(near, 3, anchors=anchors).size == 3


def test_the_coverage_order_puts_the_claims_beyond_first_spread_then_the_most_uncertain():
    rng = np.random.default_rng(2)
    x = _points(rng, 20)
    beyond = np.arange(20) % 3 == 0
    priority = rng.random(20)
    order = coverage_order(x, beyond, priority, seed=4)
    far = np.flatnonzero(beyond)
    assert sorted(order.tolist()) == list(range(20))
    assert np.array_equal(order[:len(far)], far[k_center(x[far], len(far), seed=4)])
    assert list(order[len(far):]) == sorted(np.flatnonzero(~beyond), key=lambda i: -priority[i])
