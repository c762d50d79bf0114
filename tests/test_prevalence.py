"""The batch's share of check-worthy claims under label shift: Monte-Carlo coverage, as ppi_py
tests its intervals, and the naive share's bias it corrects."""

from __future__ import annotations

import numpy as np
import pytest

from checkworthy.method.prevalence import prior_threshold, share_positive


def _draw(rng: np.random.Generator, n: int, share: float, tpr: float = 0.8, fpr: float = 0.2):
    y = (rng.random(n) < share).astype(int)
    return y, np.where(y == 1, rng.random(n) < tpr, rng.random(n) < fpr).astype(int)


def test_the_interval_covers_the_batch_share_under_label_shift():
    """L balanced (as in the paper), the batch 10% positive: the interval covers the batch's
    share at least at its level, where the naive share (called positive) is about 0.26."""
    rng = np.random.default_rng(0)
    covered, naive, estimates = 0, [], []
    for _ in range(200):
        y_l, yhat_l = _draw(rng, 300, 0.5)
        y_u, yhat_u = _draw(rng, 2000, 0.1)
        p = share_positive(y_l, yhat_l, yhat_u, alpha=0.05)
        covered += p.low <= y_u.mean() <= p.high
        naive.append(p.naive)
        estimates.append(p.estimate)
    assert covered / 200 >= 0.95
    assert abs(np.mean(estimates) - 0.1) < 0.02 and abs(np.mean(naive) - 0.26) < 0.02


def test_no_estimate_from_a_classifier_no_better_than_chance():
    y = np.array([0, 0, 1, 1])
    p = share_positive(y, np.array([1, 1, 1, 1]), np.array([1, 0, 1]))
    assert p.estimate is None and p.low is None and p.naive == 2 / 3
    assert p.labelled == 0.5 and p.labelled_low < 0.5 < p.labelled_high


def test_no_interval_where_ppi_is_undefined():
    """A batch given one decision throughout, or a class of L given one decision throughout, has an
    estimate and no interval (ppi_py's label-shift interval is singular there)."""
    y = np.array([0] * 50 + [1] * 50)
    yhat = np.array([0] * 45 + [1] * 5 + [0] * 10 + [1] * 40)
    for batch in (np.zeros(30, int), np.ones(30, int)):
        p = share_positive(y, yhat, batch)
        assert p.estimate == float(batch[0]) and p.low is None and p.high is None
    perfect = share_positive(y, y, np.array([0, 1, 1, 0]))
    assert perfect.estimate == 0.5 and perfect.low is None


def test_prior_threshold_is_bayes_rule_under_label_shift():
    """Moving theta's odds by the prior ratio and thresholding at 0.5 decides as the threshold does."""
    assert prior_threshold(0.5, 0.5) == 0.5
    assert prior_threshold(0.5, 0.25) == pytest.approx(0.75)
    assert prior_threshold(0.5, 0.75) == pytest.approx(0.25)
    rng = np.random.default_rng(1)
    for lab, bat, thr in rng.uniform(0.05, 0.95, size=(50, 3)):
        t = prior_threshold(lab, bat, thr)
        for theta in (t - 1e-6, t + 1e-6):
            odds = theta / (1 - theta) * (bat / (1 - bat)) / (lab / (1 - lab))
            assert (odds / (1 + odds) >= thr) == (theta >= t)
    assert 0 < prior_threshold(0.5, 0.0) < 1 and prior_threshold(0.5, 0.5, 1.0) == 1.0
