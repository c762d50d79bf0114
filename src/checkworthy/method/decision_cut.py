"""The cut on theta that maximises positive-class F1 on the labelled claims. Pure: arrays in, figures out.

theta is a probability calibrated on L, and 0.5 on it (the paper's rule) minimises errors, not
the positive-class F1 the shared task scores: where check-worthy claims are rare, the F1-best cut on
a calibrated probability lies well below 0.5 (about half the best F1 reachable: Lipton et al.,
"Optimal thresholding of classifiers to maximize F1", 2014). The cut is chosen on L's
leave-one-out theta (each labelled claim corrected by its neighbours without itself), over a grid
of :data:`CUTS`; ties go to the cut nearest the run's own threshold.

Under label shift the batch's best cut moves: L sampled balanced (the paper's calibration sample)
against a stream with a fifth check-worthy puts L's best cut far below the batch's (measured on our
held-out debate events: F1 0.798 at 0.5, 0.769 at L's own best cut). Given the batch's estimated
share of check-worthy claims (:mod:`checkworthy.method.prevalence`), each labelled claim weighs by
its class so that L's share becomes the batch's (the F1 L would show were it drawn like the batch,
the classes' theta unchanged: the label-shift assumption the estimate itself makes).

Limits: L's F1 at the chosen cut is optimistic (chosen on the same claims); the weighting holds only
as far as the share estimate and the label-shift assumption do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.metrics import f1_score

#: the cuts on theta tried: 0.05 to 0.95 in steps of 0.01
CUTS = tuple(round(0.05 + 0.01 * i, 2) for i in range(91))


@dataclass(frozen=True)
class F1Cut:
    """The chosen cut, L's positive-class F1 at it and at the run's own threshold."""

    threshold: float
    f1: float
    f1_at_run_threshold: float


def class_weights(y: NDArray[np.int_], batch_share: float) -> NDArray[np.float64]:
    """Each labelled claim's weight so that the weighted share of label 1 is ``batch_share``."""
    share = float(np.mean(y))
    if not 0 < share < 1 or not 0 < batch_share < 1:
        return np.ones(len(y))
    return np.where(y == 1, batch_share / share, (1 - batch_share) / (1 - share))


def f1_cut(theta_l: ArrayLike, y_l: ArrayLike, run_threshold: float,
           batch_share: float | None = None) -> F1Cut:
    """The cut of :data:`CUTS` with the best positive-class F1 of ``theta_l >= cut`` against
    ``y_l`` (ties: nearest ``run_threshold``); with ``batch_share``, L weighted by class to it
    (:func:`class_weights`)."""
    theta, y = np.asarray(theta_l, dtype=np.float64), np.asarray(y_l, dtype=int)
    if theta.shape != y.shape or theta.size == 0 or not np.isfinite(theta).all():
        raise ValueError("theta and the labels must be finite, of one length, and not empty")
    weights = None if batch_share is None else class_weights(y, batch_share)

    def f1(cut: float) -> float:
        return float(f1_score(y, (theta >= cut).astype(int), sample_weight=weights, zero_division=0))

    best = max(CUTS, key=lambda cut: (round(f1(cut), 12), -abs(cut - run_threshold)))
    return F1Cut(best, f1(best), f1(run_threshold))
