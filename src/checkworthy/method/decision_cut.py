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

The ``auto`` prior (:func:`auto_prior`) guards against that case: it takes the cut where L's share
of check-worthy claims is the batch's as far as the batch's estimate can tell (L a sample of the
team's own stream), and the paper's 0.5 where it is not (a balanced calibration sample against a
stream, the paper's set-up) or where the share cannot be estimated.

Limits: L's F1 at the chosen cut is optimistic (chosen on the same claims); the weighting holds only
as far as the share estimate and the label-shift assumption do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from sklearn.metrics import f1_score

from checkworthy.method.corrections import class_weights
from checkworthy.method.prevalence import Prevalence

#: the cuts on theta tried: 0.05 to 0.95 in steps of 0.01
CUTS = tuple(round(0.05 + 0.01 * i, 2) for i in range(91))


@dataclass(frozen=True)
class F1Cut:
    """The chosen cut, L's positive-class F1 at it and at the run's own threshold."""

    threshold: float
    f1: float
    f1_at_run_threshold: float


def f1_cut(theta_l: ArrayLike, y_l: ArrayLike, run_threshold: float,
           batch_share: float | None = None) -> F1Cut:
    """The cut of :data:`CUTS` with the best positive-class F1 of ``theta_l >= cut`` against
    ``y_l`` (ties: nearest ``run_threshold``); with ``batch_share`` strictly between 0 and 1 and
    both classes in L, L weighted by class to it (:func:`~checkworthy.method.corrections.class_weights`),
    else unweighted."""
    theta, y = np.asarray(theta_l, dtype=np.float64), np.asarray(y_l, dtype=int)
    if theta.shape != y.shape or theta.size == 0 or not np.isfinite(theta).all():
        raise ValueError("theta and the labels must be finite, of one length, and not empty")
    weighable = batch_share is not None and 0 < batch_share < 1 and 0 < float(np.mean(y)) < 1
    weights = class_weights(y, batch_share) if weighable else None

    def f1(cut: float) -> float:
        return float(f1_score(y, (theta >= cut).astype(int), sample_weight=weights, zero_division=0))

    best = max(CUTS, key=lambda cut: (round(f1(cut), 12), -abs(cut - run_threshold)))
    return F1Cut(best, f1(best), f1(run_threshold))


def auto_prior(p: Prevalence) -> tuple[str, str]:
    """What the ``auto`` prior decides at, ``f1`` (:func:`f1_cut`) or ``labelled`` (the run's own
    threshold), and why in words: ``f1`` when L's share of label 1 lies within the batch's estimated
    share's interval (or, with an estimate but no interval, the estimate within L's exact interval),
    so that the cut chosen on L speaks for the batch."""
    if p.estimate is None:
        return "labelled", f"the batch's share of check-worthy claims is not estimated ({p.not_estimable})"
    if p.low is not None and p.high is not None:
        inside = p.low <= p.labelled <= p.high
        what = (f"the labelled file's share of check-worthy claims {p.labelled:.3f} lies "
                f"{'within' if inside else 'outside'} the batch's {p.level:.0%} interval "
                f"{p.low:.3f}-{p.high:.3f}")
    else:
        inside = p.labelled_low <= p.estimate <= p.labelled_high
        what = (f"the batch's estimated share of check-worthy claims {p.estimate:.3f} (no interval) lies "
                f"{'within' if inside else 'outside'} the labelled file's exact {p.level:.0%} interval "
                f"{p.labelled_low:.3f}-{p.labelled_high:.3f}")
    if inside:
        return "f1", f"{what}: a cut chosen on the labelled file speaks for the batch"
    return "labelled", f"{what}: a cut chosen on the labelled file would not speak for the batch"
