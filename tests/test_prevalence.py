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


def test_decisions_without_signal_are_not_estimable_never_a_zero_width_interval_at_a_bound():
    """Decisions on L unrelated to its labels: ppi_py's interval, centred on a ratio that divides by
    noise and clipped to [0, 1], had no width at 0 or 1 in a sixth of the draws; now there is no
    estimate, with the reason and TPR and FPR, wherever TPR > FPR is not shown at the level."""
    rng = np.random.default_rng(0)
    reasons = []
    for _ in range(300):
        y = (rng.random(150) < 0.3).astype(int)
        p = share_positive(y, (rng.random(150) < 0.5).astype(int), (rng.random(150) < 0.5).astype(int))
        assert p.estimate is not None or p.not_estimable is not None
        assert p.low is None or not (p.low == p.high and p.low in (0.0, 1.0)), p
        reasons.append(p.not_estimable)
    assert reasons.count("no signal") >= 0.9 * len(reasons)
    p = share_positive(y, (rng.random(150) < 0.5).astype(int), np.ones(20, int))
    assert p.estimate is None and "do not separate its classes (TPR" in p.why and "FPR" in p.why


def test_an_adjusted_share_beyond_the_bounds_is_not_estimable():
    """A real signal on L, a batch whose share called positive lies far below L's FPR: the adjusted
    share is negative beyond its interval, which label shift cannot produce; withdrawn, with why."""
    y = np.array([0] * 200 + [1] * 200)
    yhat = np.array([0] * 120 + [1] * 80 + [0] * 40 + [1] * 160)  # FPR 0.4, TPR 0.8
    p = share_positive(y, yhat, np.array([1] * 5 + [0] * 495))  # naive 0.01
    assert p.estimate is None and p.low is None and p.not_estimable == "beyond [0, 1]"
    assert "lies beyond [0, 1]" in p.why and p.naive == 0.01


def test_a_stored_zero_width_interval_at_a_bound_is_withdrawn_when_read():
    """A run stored before the withdrawal is read back without its degenerate estimate."""
    from checkworthy.method.prevalence import stored_share

    stored = {"estimate": 0.0, "low": 0.0, "high": 0.0, "naive": 0.47, "labelled": 0.27, "labelled_low": 0.2,
              "labelled_high": 0.35, "level": 0.95, "n_labelled": 150, "n_batch": 150, "not_estimable": None,
              "from": "raw score"}
    p = stored_share(stored)
    assert p.estimate is None and p.not_estimable == "beyond [0, 1]" and p.naive == 0.47
    assert stored_share({**stored, "low": 0.0, "high": 0.2}).estimate == 0.0
