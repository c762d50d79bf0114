"""Decide or review on a mixed labelled set: L holds many claims of kind A and a few of kind B, on
which the score is overconfident. Over many draws, the rule certified on all of L exceeds its bound
on a batch of kind B almost every time; the rule certified on the batch's labelled neighbours
(kNN density ratio weights, Kish's effective size) exceeds it in at most about delta of the draws,
and a batch like L keeps (nearly) the same automated share."""

from __future__ import annotations

import numpy as np
import pytest

from checkworthy.method.selective import fit_review, kish, needs_review, neighbour_weights

TRIALS, N_A, N_BATCH, K, DELTA, MAX_RISK = 300, 900, 200, 10, 0.1, 0.1


def draw(rng: np.random.Generator, n: int, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, theta, y) of n claims of one kind: A in a cluster at the origin with an informative,
    well-scaled score; B in a cluster 6 away with a weaker score squeezed towards 0 and 1."""
    y = (rng.uniform(size=n) < 0.5).astype(int)
    sign = np.where(y == 1, 1.0, -1.0)
    if kind == "A":
        z, slope, centre = rng.normal(1.5 * sign, 1.0), 1.6, (0.0, 0.0)
    else:
        z, slope, centre = rng.normal(1.0 * sign, 1.0), 3.0, (6.0, 0.0)
    return rng.normal(0.0, 1.0, (n, 2)) + centre, 1 / (1 + np.exp(-slope * z)), y


def nearest(q: np.ndarray, labelled: np.ndarray, k: int) -> np.ndarray:
    """Positions of each query's k nearest labelled claims (Euclidean)."""
    d = ((q[:, None, :] - labelled[None, :, :]) ** 2).sum(-1)
    return np.argpartition(d, k, axis=1)[:, :k]


def realised(theta: np.ndarray, y: np.ndarray, margin: float | None) -> tuple[float, float]:
    """(error among the automatic decisions, 0 when none; the automated share)."""
    auto = needs_review(theta, 0.5, "error", margin) == 0
    wrong = ((theta[auto] >= 0.5).astype(int) != y[auto]).mean() if auto.any() else 0.0
    return float(wrong), float(auto.mean())


@pytest.mark.parametrize("n_b", [50, 300])
def test_on_a_batch_of_the_rare_kind_only_the_weighted_rule_keeps_its_promise(n_b):
    rng = np.random.default_rng(17)
    population = draw(rng, 40_000, "B")[1:]
    exceed = {"all of L": 0, "the batch's neighbours": 0}
    shares = []
    for _ in range(TRIALS):
        x, theta, y = (np.concatenate(p) for p in zip(draw(rng, N_A, "A"), draw(rng, n_b, "B")))
        weights = neighbour_weights(nearest(draw(rng, N_BATCH, "B")[0], x, K), len(y))
        for name, rule in (("all of L", fit_review(theta, y)),
                           ("the batch's neighbours", fit_review(theta, y, weights=weights))):
            risk, share = realised(*population, rule.margin)
            exceed[name] += risk > MAX_RISK
            if name == "the batch's neighbours":
                shares.append(share)
    slack = 3 * np.sqrt(DELTA * (1 - DELTA) / TRIALS)
    assert exceed["all of L"] / TRIALS > 0.9  # the old rule: mostly A's margin, wrong for B
    assert exceed["the batch's neighbours"] / TRIALS <= DELTA + slack
    assert np.mean(shares) > (0.1 if n_b == 50 else 0.5)  # B's confident claims are still decided


def test_a_batch_like_l_keeps_its_automated_share():
    rng = np.random.default_rng(23)
    pop_a, pop_b = draw(rng, 40_000, "A")[1:], draw(rng, 40_000, "B")[1:]
    n_b, kept = 50, []
    for _ in range(TRIALS // 3):
        x, theta, y = (np.concatenate(p) for p in zip(draw(rng, N_A, "A"), draw(rng, n_b, "B")))
        n_batch_a = N_BATCH * N_A // (N_A + n_b)
        batch = np.concatenate([draw(rng, n_batch_a, "A")[0], draw(rng, N_BATCH - n_batch_a, "B")[0]])
        weights = neighbour_weights(nearest(batch, x, K), len(y))
        old, new = fit_review(theta, y), fit_review(theta, y, weights=weights)
        assert new.n_neighbours is not None and new.n_effective > 0.5 * len(y)
        share = [sum(f * realised(*pop, rule.margin)[1] for f, pop in ((N_A, pop_a), (n_b, pop_b)))
                 / (N_A + n_b) for rule in (old, new)]
        kept.append(share[1] / share[0])
    assert np.mean(kept) > 0.95


def test_weights_count_the_batch_neighbours_and_equal_weights_are_the_unweighted_test():
    w = neighbour_weights(np.array([[0, 1], [0, 2]]), 4)
    assert w.tolist() == [2.0, 1.0, 1.0, 0.0] and kish(w) == pytest.approx(16 / 6)
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 800)
    theta = 1 / (1 + np.exp(-1.6 * rng.normal(np.where(y == 1, 1.2, -1.2), 1.0)))
    plain, equal = fit_review(theta, y), fit_review(theta, y, weights=np.full(800, 3.0))
    assert (plain.margin, plain.n_automated_labelled, plain.risk_labelled) == (
        equal.margin, equal.n_automated_labelled, equal.risk_labelled)
    assert plain.p_value == pytest.approx(equal.p_value) and equal.n_effective == 800


def test_too_few_like_the_batch_says_so():
    rng = np.random.default_rng(8)
    y = rng.integers(0, 2, 500)
    theta = np.where(y == 1, 0.95, 0.05)
    weights = np.zeros(500)
    weights[:12] = 1.0  # the batch resembles 12 labelled claims: fewer than any test can use
    rule = fit_review(theta, y, weights=weights)
    assert rule.margin is None and rule.too_few() and rule.n_neighbours == 12
    assert "too few labelled claims like this batch" in rule.reason(0.99)
    assert "checkworthy review export" in rule.reason(0.99)
    with pytest.raises(ValueError, match="weights"):
        fit_review(theta, y, weights=np.ones(3))
