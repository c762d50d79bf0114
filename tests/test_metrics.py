"""Metrics on hand-computed cases, cross-checked with scikit-learn."""

import numpy as np
import pytest
from sklearn.metrics import f1_score, precision_recall_fscore_support

from checkworthy.method import metrics

Y = [1, 1, 0, 0, 0]
P = [1, 0, 0, 0, 1]


def test_per_class_by_hand():
    pc = metrics.per_class(Y, P)
    # class 1: tp=1 of 2 predicted, 2 gold -> P=R=F1=0.5
    assert pc[1]["precision"] == pc[1]["recall"] == pc[1]["f1"] == pytest.approx(0.5)
    # class 0: tp=2 of 3 predicted, 3 gold -> P=R=F1=2/3
    assert pc[0]["f1"] == pytest.approx(2 / 3)


def test_weighted_f1_by_hand_and_sklearn():
    # (0.5 * 2 + 2/3 * 3) / 5 = 0.6
    assert metrics.weighted_f1(Y, P) == pytest.approx(0.6)
    rng = np.random.default_rng(0)
    y, p = rng.integers(0, 2, 200), rng.integers(0, 2, 200)
    assert metrics.weighted_f1(y, p) == pytest.approx(f1_score(y, p, average="weighted"))
    pr, rc, f1, _ = precision_recall_fscore_support(y, p, zero_division=0)
    pc = metrics.per_class(y, p)
    assert [pc[0]["precision"], pc[1]["recall"], pc[1]["f1"]] == pytest.approx([pr[0], rc[1], f1[1]])


def test_all_positive_predictions_give_zero_f1_for_class_0():
    # what raw Gemma 3 270M does: everything check-worthy
    pc = metrics.per_class([0, 0, 1], [1, 1, 1])
    assert pc[0]["f1"] == 0.0 and pc[1]["precision"] == pytest.approx(1 / 3)


def test_rates_means_and_coverage():
    assert metrics.positive_rate(P) == pytest.approx(0.4)
    assert metrics.mean_score_by_class(Y, [0.9, 0.7, 0.2, 0.4, 0.6]) == pytest.approx({0: 0.4, 1: 0.8})
    cov = metrics.interval_coverage([1, 0, 1], [0.5, -0.1, 1.2], [1.1, 0.3, 1.5])
    assert cov == pytest.approx({"all": 2 / 3, "0": 1.0, "1": 0.5})
    assert metrics.accuracy(Y, P) == pytest.approx(0.6)


def test_reliability_and_ece_by_hand():
    """Bins of width 0.1; theta outside [0, 1] (NN-PPI's is unclipped) is clipped, 1 is in the last bin."""
    y = [0, 1, 1, 1, 0, 0]
    p = [0.05, 0.05, 0.95, 1.0, 1.2, -0.3]
    points = metrics.reliability(y, p)
    assert points == [(pytest.approx(0.1 / 3), pytest.approx(1 / 3), 3),
                      (pytest.approx(2.95 / 3), pytest.approx(2 / 3), 3)]
    expected = 0.5 * abs(1 / 3 - 0.1 / 3) + 0.5 * abs(2 / 3 - 2.95 / 3)
    assert metrics.expected_calibration_error(y, p) == pytest.approx(expected)
    assert metrics.brier(y, p) == pytest.approx(np.mean((np.clip(p, 0, 1) - np.array(y)) ** 2))
    assert np.isnan(metrics.expected_calibration_error([], []))


def test_ece_is_small_for_calibrated_and_large_for_overconfident_probabilities():
    rng = np.random.default_rng(3)
    p = rng.uniform(size=50_000)
    y = (rng.uniform(size=p.size) < p).astype(int)
    assert metrics.expected_calibration_error(y, p) < 0.01
    assert metrics.expected_calibration_error(y, np.where(p >= 0.5, 1.0, 0.0)) == pytest.approx(0.25, abs=0.01)
