"""Score calibrators (parameter recovery, agreement with scikit-learn) and conformal sets."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit, logit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.calibration import CalibratedClassifierCV
from sklearn.frozen import FrozenEstimator
from venn_abers import VennAbers

from checkworthy.method import metrics
from checkworthy.method.calibrators import (
    CALIBRATORS,
    ConformalSets,
    IdentityCalibrator,
    IsotonicCalibrator,
    PlattCalibrator,
    TemperatureCalibrator,
    VennAbersCalibrator,
    adjust_prevalence,
    make_calibrator,
    prediction_sets,
)
from checkworthy.method.intervals import conformal_quantile, label_sets, summarise_sets

ALPHA = 0.05


class ScoreAsClassifier(ClassifierMixin, BaseEstimator):
    """The score column itself as a fitted binary classifier, to feed scikit-learn's calibrators."""

    def fit(self, X, y):
        self.classes_ = np.array([0, 1])
        return self

    def decision_function(self, X):
        return logit(np.clip(np.asarray(X)[:, 0], 1e-6, 1 - 1e-6))

    def predict_proba(self, X):
        c = np.asarray(X)[:, 0]
        return np.column_stack([1 - c, c])

    def predict(self, X):
        return (np.asarray(X)[:, 0] >= 0.5).astype(int)


def sklearn_calibrated(method: str, c, y):
    clf = ScoreAsClassifier().fit(c.reshape(-1, 1), y)
    cal = CalibratedClassifierCV(FrozenEstimator(clf), method=method).fit(c.reshape(-1, 1), y)
    return lambda s: cal.predict_proba(np.asarray(s).reshape(-1, 1))[:, 1]


def logistic_data(rng, n: int, a: float, b: float):
    """Scores ``c = sigmoid(z)``; labels with known ``P(Y = 1 | c) = sigmoid(a logit(c) + b)``."""
    z = rng.normal(0, 1.5, n)
    y = (rng.random(n) < expit(a * z + b)).astype(int)
    return expit(z), y


def test_registry():
    assert set(CALIBRATORS) == {"identity", "platt", "platt-score", "isotonic", "temperature", "venn-abers"}
    for name in CALIBRATORS:
        cal = make_calibrator(name).fit(np.array([0.1, 0.4, 0.6, 0.9]), np.array([0, 0, 1, 1]))
        p = cal.predict_proba(np.array([0.0, 0.5, 1.0]))
        assert p.shape == (3, 2) and np.allclose(p.sum(axis=1), 1) and (p >= 0).all()
    with pytest.raises(ValueError):
        make_calibrator("beta")
    with pytest.raises(ValueError):
        IdentityCalibrator().fit(np.array([1.2]), np.array([1]))


def test_platt_recovers_known_parameters():
    rng = np.random.default_rng(0)
    c, y = logistic_data(rng, 40_000, a=0.5, b=-0.8)
    m = PlattCalibrator().fit(c, y).model_
    assert m.coef_[0, 0] == pytest.approx(0.5, abs=0.03)
    assert m.intercept_[0] == pytest.approx(-0.8, abs=0.03)


def test_platt_temperature_isotonic_agree_with_scikit_learn():
    rng = np.random.default_rng(1)
    c, y = logistic_data(rng, 5_000, a=0.6, b=0.3)
    grid = np.linspace(0.01, 0.99, 50)
    # scikit-learn's sigmoid is Platt on the decision function (logit) with smoothed targets
    ours = PlattCalibrator().fit(c, y).predict_proba(grid)[:, 1]
    np.testing.assert_allclose(ours, sklearn_calibrated("sigmoid", c, y)(grid), atol=2e-3)
    ours = TemperatureCalibrator().fit(c, y).predict_proba(grid)[:, 1]
    np.testing.assert_allclose(ours, sklearn_calibrated("temperature", c, y)(grid), atol=1e-5)
    ours = IsotonicCalibrator().fit(c, y).predict_proba(grid)[:, 1]
    # same steps; linear interpolation between knots differs (sklearn works on the logit)
    np.testing.assert_allclose(ours, sklearn_calibrated("isotonic", c, y)(grid), atol=1e-5)


def test_temperature_recovers_known_temperature():
    rng = np.random.default_rng(2)
    c, y = logistic_data(rng, 40_000, a=1 / 2.5, b=0.0)  # P = sigmoid(logit(c) / 2.5)
    assert TemperatureCalibrator().fit(c, y).temperature_ == pytest.approx(2.5, rel=0.05)


def test_isotonic_by_hand():
    c = np.array([0.2, 0.2, 0.5, 0.5, 0.8, 0.8, 0.8, 0.9])
    y = np.array([0, 1, 1, 0, 0, 1, 1, 1])
    p = IsotonicCalibrator().fit(c, y).predict_proba(np.array([0.0, 0.2, 0.5, 0.8, 0.9, 1.0]))[:, 1]
    np.testing.assert_allclose(p, [0.5, 0.5, 0.5, 2 / 3, 1.0, 1.0])


def test_adjust_prevalence():
    assert adjust_prevalence(np.array([0.5]), 0.5, 0.25)[0] == pytest.approx(0.25)
    # a balanced-L probability p clears 0.5 at prevalence 0.265 iff p >= 1 - 0.265
    p = np.array([0.73, 0.74])
    np.testing.assert_array_equal(adjust_prevalence(p, 0.5, 0.265) >= 0.5, [False, True])
    np.testing.assert_allclose(adjust_prevalence(p, 0.3, 0.3), p)


# ------------------------------------------------------------------- conformal sets


def test_identity_sets_match_the_interval_construction():
    rng = np.random.default_rng(3)
    c_l, y_l = logistic_data(rng, 500, a=1.0, b=0.0)
    c = rng.random(300)
    sets = ConformalSets(None, class_cond=False).fit(c_l, y_l).predict_set(c, ALPHA)
    q = conformal_quantile(np.abs(y_l - c_l), ALPHA)  # hinge score 1 - P(y) = |y - c|
    np.testing.assert_array_equal(sets, label_sets(c - q, c + q))
    sets = ConformalSets(None, class_cond=True).fit(c_l, y_l).predict_set(c, ALPHA)
    q0 = conformal_quantile(c_l[y_l == 0], ALPHA)
    q1 = conformal_quantile(1 - c_l[y_l == 1], ALPHA)
    np.testing.assert_array_equal(sets, np.column_stack([c <= q0, 1 - c <= q1]))


def test_set_summary_by_hand():
    sets = np.array([[1, 0], [1, 1], [0, 1], [0, 0]], dtype=bool)
    s = summarise_sets(sets, np.array([0, 1, 0, 1]))
    assert (s.coverage, s.coverage_0, s.coverage_1) == (0.5, 0.5, 0.5)
    assert (s.mean_set_size, s.singleton_rate, s.empty_rate) == (1.0, 0.5, 0.25)


def biased_world(rng, n: int, prevalence_shift: float = 0.0):
    """Weak, upward-biased scores (like Gemma 3 270M); P(Y | c) known by construction."""
    z = rng.normal(0, 1, n)
    p = expit(1.2 * z - 0.3 + prevalence_shift)
    y = (rng.random(n) < p).astype(int)
    return expit(0.6 * z + 1.5), y


@pytest.mark.parametrize("calibrator", [None, "platt", "isotonic"])
def test_marginal_sets_cover(calibrator):
    rng = np.random.default_rng(4)
    cov = []
    for t in range(100):
        c_l, y_l = biased_world(rng, 400)
        c, y = biased_world(rng, 400)
        _, s = prediction_sets(c_l, y_l, c, y=y, conformal=ConformalSets(calibrator, class_cond=False, seed=t))
        cov.append((s.coverage, s.mean_set_size))
    cov = np.array(cov)
    assert cov[:, 0].mean() >= 1 - ALPHA - 0.01  # 100 trials: SE of the mean ~ 0.0015
    assert cov[:, 0].mean() <= 1 - ALPHA + 0.02
    assert cov[:, 1].mean() < 2.0


def test_class_conditional_sets_cover_each_class_under_label_shift():
    rng = np.random.default_rng(5)
    cov = []
    for _ in range(100):
        # L class-balanced from a pool; test claims at their natural prevalence (~30%)
        c_p, y_p = biased_world(rng, 4000, prevalence_shift=-1.0)
        sel = np.concatenate([rng.choice(np.flatnonzero(y_p == v), 200, replace=False) for v in (0, 1)])
        c, y = biased_world(rng, 400, prevalence_shift=-1.0)
        _, s = prediction_sets(c_p[sel], y_p[sel], c, y=y, conformal=ConformalSets(class_cond=True))
        cov.append((s.coverage, s.coverage_0, s.coverage_1))
    cov = np.array(cov)
    assert cov[:, 1].mean() >= 1 - ALPHA - 0.015
    assert cov[:, 2].mean() >= 1 - ALPHA - 0.015
    assert cov[:, 0].mean() >= 1 - ALPHA - 0.01


def test_venn_abers_brackets_its_probability_and_is_calibrated():
    """The package's own multiprobability brackets the merged probability, the map is monotone, and
    on fresh claims from the same distribution its probability is calibrated (ECE near 0) where the
    raw, distorted score is not."""
    rng = np.random.default_rng(5)
    c, y = logistic_data(rng, 4_000, a=0.4, b=0.7)
    va = VennAbersCalibrator().fit(c, y)
    c_new, y_new = logistic_data(rng, 20_000, a=0.4, b=0.7)
    p = va.predict_proba(c_new)[:, 1]
    p0, p1 = va.bounds(c_new).T
    assert np.all(p0 <= p + 1e-12) and np.all(p <= p1 + 1e-12) and np.median(p1 - p0) < 0.01
    order = np.argsort(c_new)
    assert np.all(np.diff(p[order]) >= -1e-12)
    assert metrics.expected_calibration_error(y_new, p) < 0.02
    assert metrics.expected_calibration_error(y_new, c_new) > 0.1
    direct, _ = VennAbers().fit(np.column_stack([1 - c, c]), y).predict_proba(np.column_stack([1 - c_new, c_new]))
    np.testing.assert_allclose(p, direct[:, 1])
