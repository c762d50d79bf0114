"""NN-PPI math on hand-computed cases."""

import numpy as np
import pytest

from checkworthy.method import nnppi as cal


def test_theta_is_score_plus_mean_residual():
    # residuals: 1-0.8=0.2, 0-0.6=-0.6, 0-0.7=-0.7 -> mean -0.36667; theta = 0.9 - 0.36667
    theta = cal.nnppi_theta([0.9], [[1, 0, 0]], [[0.8, 0.6, 0.7]])
    assert theta == pytest.approx([0.533333], abs=1e-6)


def test_paper_z_interval_by_hand():
    # sd(ddof=1) of (0.2, -0.6, -0.7) = sqrt(0.486667/2) = 0.493288
    # half width = 1.959964 * 0.493288 / sqrt(3) = 0.558198
    res = cal.nnppi([0.9], [[1, 0, 0]], [[0.8, 0.6, 0.7]], alpha=0.05)
    assert res.ci_low == pytest.approx([0.533333 - 0.558198], abs=1e-5)
    assert res.ci_high == pytest.approx([0.533333 + 0.558198], abs=1e-5)
    assert res.knn_mean == pytest.approx([1 / 3])
    assert list(res.decision) == [1]  # 0.5333 >= 0.5
    assert list(res.knn_decision) == [0]
    assert list(res.baseline_decision) == [1]


def test_threshold_is_inclusive_and_theta_not_clipped():
    assert list(cal.decide([0.5, 0.4999, 0.51])) == [1, 0, 1]
    # a positive neighbourhood pushes theta above 1: the paper does not clip
    theta = cal.nnppi_theta([0.9], [[1, 1]], [[0.7, 0.8]])
    assert theta[0] == pytest.approx(1.15)


def test_k1_interval_has_zero_width():
    res = cal.nnppi([0.3], [[1]], [[0.2]])
    assert res.ci_low[0] == res.ci_high[0] == pytest.approx(1.1)


def test_vectorised_over_claims():
    c = np.array([0.2, 0.8])
    y = np.array([[0, 0, 1], [1, 1, 1]])
    cn = np.array([[0.1, 0.3, 0.5], [0.9, 0.6, 0.6]])
    theta = cal.nnppi_theta(c, y, cn)
    assert theta == pytest.approx([0.2 + (-0.1 - 0.3 + 0.5) / 3, 0.8 + (0.1 + 0.4 + 0.4) / 3])
