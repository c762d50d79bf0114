"""The share of check-worthy claims in a batch, with a valid interval, under label shift.

L is balanced by design while a debate is a few percent check-worthy, so neither L's share nor
the share a classifier calls positive (classify and count) estimates the batch's. Under label
shift (P(x | y) the same in L and the batch, only the prior moves) the confusion matrix on L
turns the classifier's positive share in the batch into the true one:
``p = (q - fpr) / (tpr - fpr)``. The interval is prediction-powered inference's for a
discrete distribution under label shift (``ppi_py.ppi_distribution_label_shift_ci``,
Angelopoulos et al., Science 2023, section on label shift): finite-sample, valid whatever the
classifier, and narrow when the classifier is good. The predictions on L must not have seen
their own label (out-of-fold, or a model fitted elsewhere).

Limits: the guarantee needs label shift, not a change of what check-worthy claims look like;
a classifier no better than chance on L (tpr = fpr) gives no estimate, and a batch given one
decision throughout, or a class of L given one decision throughout, gives no interval. A batch
that drifted from L (:mod:`checkworthy.method.drift`: many claims far from every labelled one)
breaks label shift outright; :func:`under_drift` then withdraws the estimate and its interval.

:func:`prior_threshold` turns the estimate into a decision rule: the threshold on a probability
calibrated under L's prior that decides as the same probability would under the batch's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
from numpy.typing import ArrayLike
from ppi_py import ppi_distribution_label_shift_ci
from scipy.stats import binomtest

from checkworthy.method.calibrators import adjust_prevalence


@dataclass(frozen=True)
class Prevalence:
    """Share of label 1 in the batch: the label-shift estimate and its interval, the naive
    (classify and count) share, and L's own share with its exact binomial interval."""

    estimate: float | None
    low: float | None
    high: float | None
    naive: float
    labelled: float
    labelled_low: float
    labelled_high: float
    level: float
    n_labelled: int
    n_batch: int
    #: why there is no estimate although L separates its classes (``"drift"``), else None
    not_estimable: str | None = None

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def share_positive(y_l: ArrayLike, yhat_l: ArrayLike, yhat_u: ArrayLike, alpha: float = 0.05) -> Prevalence:
    """Estimate the share of label 1 among the batch's claims from 0/1 predictions.

    Parameters
    ----------
    y_l, yhat_l
        L's labels and the classifier's 0/1 predictions on L (out-of-fold).
    yhat_u
        The classifier's 0/1 predictions on the batch.
    alpha
        1 - the interval's level.
    """
    y = np.asarray(y_l, dtype=int)
    yl = np.asarray(yhat_l, dtype=int)
    yu = np.asarray(yhat_u, dtype=int)
    exact = binomtest(int(y.sum()), len(y)).proportion_ci(1 - alpha)
    naive = float(yu.mean()) if len(yu) else float("nan")
    tpr = yl[y == 1].mean() if (y == 1).any() else np.nan
    fpr = yl[y == 0].mean() if (y == 0).any() else np.nan
    estimate = low = high = None
    if np.isfinite(tpr) and np.isfinite(fpr) and tpr - fpr > 1e-9 and len(yu):
        estimate = float(np.clip((naive - fpr) / (tpr - fpr), 0.0, 1.0))
        # ppi_py's interval is undefined when one decision never occurs in the batch, or a class
        # of L always gets one decision (its confusion matrix is then singular): estimate only
        if 0 < naive < 1 and 0 < fpr and tpr < 1:
            lo, hi = ppi_distribution_label_shift_ci(y, yl, yu, 2, np.array([0.0, 1.0]), alpha=alpha,
                                                     return_counts=False)
            low, high = float(np.clip(lo, 0.0, 1.0)), float(np.clip(hi, 0.0, 1.0))
    return Prevalence(estimate, low, high, naive, float(y.mean()), float(exact.low), float(exact.high),
                      1 - alpha, len(y), len(yu))


def under_drift(p: Prevalence) -> Prevalence:
    """``p`` without its estimate and interval, for a batch that drifted from L: label shift assumes
    the claims of each class look like L's, which a batch lying far from L contradicts, so the
    confusion matrix on L says nothing about it (the naive share and L's own stay, as facts)."""
    return replace(p, estimate=None, low=None, high=None, not_estimable="drift")


def prior_threshold(labelled: float, batch: float, threshold: float = 0.5) -> float:
    """The threshold on theta (a probability under L's share ``labelled``) that decides as
    ``threshold`` does on the probability under the batch's share ``batch``: ``threshold`` moved
    from the batch's prior to L's by Bayes' rule (:func:`checkworthy.method.calibrators.
    adjust_prevalence`). Shares of exactly 0 or 1 are clipped to [1e-3, 1 - 1e-3] (finite odds).
    """
    lab, bat = (float(np.clip(v, 1e-3, 1 - 1e-3)) for v in (labelled, batch))
    return float(adjust_prevalence(np.array([threshold]), bat, lab)[0])
