"""Decide or review: over many draws of L from a known distribution, the realised risk of the
chosen rule exceeds the bound in at most about delta of them (Learn-then-Test's promise), for
both risks; and the rule automates a useful share when the score is informative."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from checkworthy.method.selective import GRID, ReviewRule, distance, fit_review, needs_review

TRIALS, M, POPULATION = 300, 600, 40_000


def draw(rng: np.random.Generator, n: int, prevalence: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """theta: a noisy, slightly overconfident probability; y drawn from the true one."""
    y = (rng.uniform(size=n) < prevalence).astype(int)
    z = rng.normal(loc=np.where(y == 1, 1.2, -1.2), scale=1.0)
    return 1 / (1 + np.exp(-1.6 * z)), y


def realised(theta: np.ndarray, y: np.ndarray, risk: str, margin: float | None) -> float:
    review = needs_review(theta, 0.5, risk, margin)
    auto = review == 0
    if risk == "error":
        return float(((theta[auto] >= 0.5).astype(int) != y[auto]).mean()) if auto.any() else 0.0
    dismissed = auto & (theta < 0.5)
    return float(y[dismissed].mean()) if dismissed.any() else 0.0


@pytest.mark.parametrize("risk", ["error", "miss"])
@pytest.mark.parametrize("max_risk", [0.1, 0.05])
def test_the_bound_holds_in_all_but_about_delta_of_the_draws(risk, max_risk):
    rng = np.random.default_rng(11)
    delta = 0.1
    theta_p, y_p = draw(rng, POPULATION)
    exceed, shares = 0, []
    for _ in range(TRIALS):
        rule = fit_review(*draw(rng, M), risk=risk, max_risk=max_risk, delta=delta)
        exceed += realised(theta_p, y_p, risk, rule.margin) > max_risk
        shares.append(np.mean(rule.review(theta_p) == 0))
    slack = 3 * np.sqrt(delta * (1 - delta) / TRIALS)
    assert exceed / TRIALS <= delta + slack
    assert np.mean(shares) > 0.5  # an informative score leaves most claims decided automatically


def test_the_distance_scales_each_side_of_the_threshold_to_the_same_length():
    assert distance([0.0, 0.25, 0.625, 1.0], 0.25).tolist() == [0.5, 0.0, 0.25, 0.5]
    theta = np.linspace(0, 1, 11)
    assert np.array_equal(distance(theta, 0.5), np.abs(theta - 0.5))  # the paper's threshold: unscaled


def test_at_a_cut_below_half_the_bound_holds_and_both_sides_are_decided():
    """A cut of 0.3 (where an F1 cut lies for a rarer positive class): the margin on the scaled
    distance still keeps the promise over draws, and automates confident claims on each side,
    where an unscaled margin would first test the claims above the cut alone."""
    rng = np.random.default_rng(5)
    cut, delta, max_risk, trials = 0.3, 0.1, 0.1, 150
    theta_p, y_p = draw(rng, POPULATION, prevalence=0.3)
    exceed, below, above = 0, [], []
    for _ in range(trials):
        rule = fit_review(*draw(rng, M, prevalence=0.3), threshold=cut, max_risk=max_risk, delta=delta)
        auto = rule.review(theta_p) == 0
        exceed += bool(auto.any()) and float(((theta_p[auto] >= cut) != y_p[auto]).mean()) > max_risk
        below.append(np.mean(auto & (theta_p < cut)))
        above.append(np.mean(auto & (theta_p >= cut)))
    assert exceed / trials <= delta + 3 * np.sqrt(delta * (1 - delta) / trials)
    assert np.mean(below) > 0.3 and np.mean(above) > 0.05
    rule = fit_review(*draw(rng, 2_000, prevalence=0.3), threshold=cut)
    assert rule.margin is not None
    assert "|theta - threshold| / 1.40 = 0.4286 >=" in rule.reason(0.9)
    assert "|theta - threshold| / 0.60 = 0.5000 >=" in rule.reason(0.0)
    assert "approximate" not in rule.promise()
    chosen_on_l = replace(rule, threshold_from_labels=True)
    assert chosen_on_l.promise().endswith(", approximate: the threshold was chosen on the same labelled claims")
    assert ReviewRule.from_dict(chosen_on_l.as_dict()) == chosen_on_l


def test_the_margin_follows_the_risk_and_the_rule_is_recorded():
    rng = np.random.default_rng(2)
    theta, y = draw(rng, 2_000)
    loose = fit_review(theta, y, max_risk=0.2)
    tight = fit_review(theta, y, max_risk=0.05)
    assert loose.margin is not None and tight.margin is not None and loose.margin <= tight.margin
    assert loose.margin in GRID and loose.risk_labelled <= 0.2 and loose.p_value <= 0.1
    assert set(loose.as_dict()) >= {"risk", "max_risk", "delta", "margin", "n_automated_labelled"}


def test_no_signal_sends_everything_to_a_person():
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, 500)
    rule = fit_review(rng.uniform(size=500), y, risk="error", max_risk=0.1)
    assert rule.margin is None and rule.review(np.array([0.0, 0.5, 1.0])).tolist() == [1, 1, 1]
    miss = fit_review(rng.uniform(size=500), y, risk="miss", max_risk=0.1)
    assert miss.review(np.array([0.9, 0.1])).tolist() == [0, 1]  # positives go on; dismissals wait


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="unknown risk"):
        fit_review([0.2, 0.8], [0, 1], risk="cost")
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        fit_review([0.2, 0.8], [0, 1], max_risk=0)
