"""NN-PPI: correct a model's score with the residuals of its nearest labelled neighbours.

Pure functions on arrays, no I/O. Notation follows the paper (Amatya et al. 2026):
``c`` (n,) are model scores in [0, 1] for the claims being calibrated; ``y_nbr`` and
``c_nbr`` (n, k) are the labels (0/1) and scores of each claim's k nearest labelled claims,
nearest first (what :func:`checkworthy.store.knn.nearest_labelled` returns).

    theta_i = c_i + mean_{j in S_i} (y_j - c_j)

The decision is check-worthy iff ``theta_i >= threshold`` (the paper writes "><"; we pick
">=" and say so). Like the paper, theta is not clipped to [0, 1]: it reports values such
as 1.03 and -0.33.

Limits: the z-interval below is the paper's, kept to reproduce its figures. It treats the k
residuals as an i.i.d. normal sample and ignores that Y is binary, so it covers far fewer
than 1 - alpha of the labels (the paper measures 47-69% at nominal 95%). Intervals that keep
their promise are in :mod:`checkworthy.method.intervals`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.stats import norm

THRESHOLD = 0.5


def residuals(y_nbr: ArrayLike, c_nbr: ArrayLike) -> NDArray[np.float64]:
    """Residuals ``y_j - c_j`` of each claim's neighbours, shape (n, k)."""
    r: NDArray[np.float64] = np.atleast_2d(np.asarray(y_nbr, dtype=float)) - np.atleast_2d(
        np.asarray(c_nbr, dtype=float)
    )
    return r


def nnppi_theta(c: ArrayLike, y_nbr: ArrayLike, c_nbr: ArrayLike) -> NDArray[np.float64]:
    """The NN-PPI estimate ``theta_i = c_i + mean(y_j - c_j)`` over each claim's neighbours."""
    theta: NDArray[np.float64] = np.asarray(c, dtype=float) + residuals(y_nbr, c_nbr).mean(axis=1)
    return theta


def knn_mean(y_nbr: ArrayLike) -> NDArray[np.float64]:
    """The KNN baseline: the mean label of each claim's neighbours (ignores the model)."""
    mean: NDArray[np.float64] = np.atleast_2d(np.asarray(y_nbr, dtype=float)).mean(axis=1)
    return mean


def z_interval(
    theta: ArrayLike, res: ArrayLike, alpha: float = 0.05
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The paper's interval ``theta +/- z_{1-alpha/2} * sd(r) / sqrt(k)``.

    ``sd`` is the sample standard deviation (ddof=1) of the k residuals; with k = 1 it is
    undefined and the half-width is taken as 0.
    """
    theta = np.asarray(theta, dtype=float)
    res = np.atleast_2d(np.asarray(res, dtype=float))
    k = res.shape[1]
    sd = res.std(axis=1, ddof=1) if k > 1 else np.zeros(len(theta))
    half = norm.ppf(1 - alpha / 2) * sd / np.sqrt(k)
    return theta - half, theta + half


def decide(values: ArrayLike, threshold: float = THRESHOLD) -> NDArray[np.int_]:
    """1 (check-worthy) where ``value >= threshold``, else 0."""
    return (np.asarray(values, dtype=float) >= threshold).astype(int)


@dataclass(frozen=True)
class NNPPIResult:
    """Everything one calibration produces per claim (arrays of length n)."""

    score: NDArray[np.float64]
    theta: NDArray[np.float64]
    ci_low: NDArray[np.float64]
    ci_high: NDArray[np.float64]
    knn_mean: NDArray[np.float64]
    decision: NDArray[np.int_]
    knn_decision: NDArray[np.int_]
    baseline_decision: NDArray[np.int_]

    @classmethod
    def decided(cls, score: ArrayLike, theta: ArrayLike, ci_low: ArrayLike, ci_high: ArrayLike,
                knn_mean: ArrayLike, threshold: float = THRESHOLD, decision: ArrayLike | None = None,
                ) -> NNPPIResult:
        """Every claim's figures with the decisions made on them at ``threshold``: theta's unless
        ``decision`` is given (made at another threshold on theta, or stored), the kNN baseline's
        and the raw score's."""
        return cls(score=np.asarray(score), theta=np.asarray(theta), ci_low=np.asarray(ci_low),
                   ci_high=np.asarray(ci_high), knn_mean=np.asarray(knn_mean),
                   decision=decide(theta, threshold) if decision is None else np.asarray(decision),
                   knn_decision=decide(knn_mean, threshold), baseline_decision=decide(score, threshold))


def nnppi(
    c: ArrayLike,
    y_nbr: ArrayLike,
    c_nbr: ArrayLike,
    alpha: float = 0.05,
    threshold: float = THRESHOLD,
) -> NNPPIResult:
    """Calibrate scores ``c`` with NN-PPI and compute both baselines on the same neighbours."""
    c = np.asarray(c, dtype=float)
    res = residuals(y_nbr, c_nbr)
    theta = c + res.mean(axis=1)
    lo, hi = z_interval(theta, res, alpha)
    return NNPPIResult.decided(c, theta, lo, hi, knn_mean(y_nbr), threshold)
