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

Limits: the guarantee needs label shift, not a change of what check-worthy claims look like.
Where the estimator degenerates there is no estimate, and :attr:`Prevalence.not_estimable` says
why, in words in :attr:`Prevalence.why`: decisions on L that do not separate its classes (tpr - fpr
not above 0 at the interval's level, so the ratio divides by noise: ``"no signal"``), or an
adjusted share whose whole interval lies beyond [0, 1] (clipped, it would print as a zero-width
interval at 0 or 1: ``"beyond [0, 1]"``). A batch given one decision throughout, or a class of L
given one decision throughout, gives an estimate without an interval. A batch that drifted from L
(:mod:`checkworthy.method.drift`: many claims far from every labelled one) breaks label shift
outright; :func:`under_drift` then withdraws the estimate and its interval (``"drift"``).

:func:`prior_threshold` turns the estimate into a decision rule: the threshold on a probability
calibrated under L's prior that decides as the same probability would under the batch's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike
from ppi_py import ppi_distribution_label_shift_ci
from scipy.stats import binomtest, fisher_exact

from checkworthy.method.calibrators import adjust_prevalence

#: why a batch's share is not estimated: it drifted from L; the decisions on L do not separate its
#: classes; the adjusted share lies beyond [0, 1] by more than its interval
NotEstimable = Literal["drift", "no signal", "beyond [0, 1]"]
#: what :func:`under_drift` says
DRIFT_WHY = ("the batch drifted from the labelled set, so its claims of each class need not look like "
             "the labelled ones, which label shift assumes")


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
    #: why there is no estimate (None where there is one, or the batch is empty)
    not_estimable: NotEstimable | None = None
    #: the same in words, with the figures that show it, for every place that prints the share
    why: str | None = None

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
    p = Prevalence(None, None, None, naive, float(y.mean()), float(exact.low), float(exact.high), 1 - alpha,
                   len(y), len(yu))
    if not len(yu):
        return p
    if not ((y == 1).any() and (y == 0).any()):
        return replace(p, not_estimable="no signal", why="the labelled file holds one class only, so the "
                       "decisions' rates on each class are unknown")
    tpr, fpr = float(yl[y == 1].mean()), float(yl[y == 0].mean())
    tp, fp = int(yl[y == 1].sum()), int(yl[y == 0].sum())
    signal = fisher_exact([[tp, int((y == 1).sum()) - tp], [fp, int((y == 0).sum()) - fp]],
                          alternative="greater").pvalue
    if signal >= alpha:  # tpr - fpr not above 0 at the level: the denominator is noise
        return replace(p, not_estimable="no signal", why=(
            f"the decisions on the labelled file do not separate its classes (TPR {tpr:.3f}, FPR {fpr:.3f}; "
            f"TPR > FPR one-sided Fisher p = {signal:.2f}), so (naive - FPR) / (TPR - FPR) divides by noise"))
    raw = (naive - fpr) / (tpr - fpr)
    estimate, low, high = float(np.clip(raw, 0.0, 1.0)), None, None
    # ppi_py's interval is undefined when one decision never occurs in the batch, or a class
    # of L always gets one decision (its confusion matrix is then singular): estimate only
    if 0 < naive < 1 and 0 < fpr and tpr < 1:
        lo, hi = ppi_distribution_label_shift_ci(y, yl, yu, 2, np.array([0.0, 1.0]), alpha=alpha,
                                                 return_counts=False)
        low, high = float(np.clip(lo, 0.0, 1.0)), float(np.clip(hi, 0.0, 1.0))
    p = replace(p, estimate=estimate, low=low, high=high)
    return beyond_bounds(p, f"the adjusted share (naive - FPR) / (TPR - FPR) = {raw:.3f} (TPR {tpr:.3f}, "
                            f"FPR {fpr:.3f})")


def beyond_bounds(p: Prevalence, what: str = "the adjusted share") -> Prevalence:
    """``p`` withdrawn when its interval, clipped to [0, 1], has no width at 0 or 1: the whole
    interval lay beyond the bound, which label shift from L cannot produce, so the clipped figure
    would be a confident wrong one. ``what`` names the unclipped figure."""
    if p.low is None or p.low != p.high or p.low not in (0.0, 1.0):
        return p
    return replace(p, estimate=None, low=None, high=None, not_estimable="beyond [0, 1]", why=(
        f"{what} lies beyond [0, 1] by more than its {p.level:.0%} interval: the batch contradicts label "
        "shift from the labelled file, or the decisions' rates on it are not the labelled file's"))


def stored_share(stored: Mapping[str, Any] | None) -> Prevalence | None:
    """A run's stored share (``params->'prevalence'``, :meth:`Prevalence.as_dict`) as a
    :class:`Prevalence`; one stored before degenerate estimates were withdrawn is checked again
    (:func:`beyond_bounds`), so a reused run never prints a zero-width interval at a bound."""
    if not stored:
        return None
    p = Prevalence(**{f.name: stored[f.name] for f in fields(Prevalence) if f.name in stored})
    if p.not_estimable == "drift" and p.why is None:
        p = replace(p, why=DRIFT_WHY)
    return beyond_bounds(p)


def under_drift(p: Prevalence) -> Prevalence:
    """``p`` without its estimate and interval, for a batch that drifted from L: label shift assumes
    the claims of each class look like L's, which a batch lying far from L contradicts, so the
    confusion matrix on L says nothing about it (the naive share and L's own stay, as facts)."""
    return replace(p, estimate=None, low=None, high=None, not_estimable="drift", why=DRIFT_WHY)


def prior_threshold(labelled: float, batch: float, threshold: float = 0.5) -> float:
    """The threshold on theta (a probability under L's share ``labelled``) that decides as
    ``threshold`` does on the probability under the batch's share ``batch``: ``threshold`` moved
    from the batch's prior to L's by Bayes' rule (:func:`checkworthy.method.calibrators.
    adjust_prevalence`). Shares of exactly 0 or 1 are clipped to [1e-3, 1 - 1e-3] (finite odds).
    """
    lab, bat = (float(np.clip(v, 1e-3, 1 - 1e-3)) for v in (labelled, batch))
    return float(adjust_prevalence(np.array([threshold]), bat, lab)[0])
