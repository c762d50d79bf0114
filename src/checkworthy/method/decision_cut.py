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

:func:`decide_prior` applies a run's ``prior`` setting and returns the threshold with what to record
(:class:`PriorDecision`, a run's ``params.prior``).

Limits: L's F1 at the chosen cut is optimistic (chosen on the same claims); the weighting holds only
as far as the share estimate and the label-shift assumption do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from sklearn.metrics import f1_score

from checkworthy.method.corrections import class_weights
from checkworthy.method.prevalence import Prevalence, prior_threshold

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


@dataclass(frozen=True)
class PriorDecision:
    """What a run decided at when not at its own threshold for L's prior (a run's ``params.prior``):
    its ``mode`` (``batch``, ``f1`` or ``auto``) and ``threshold_on_theta``; ``auto``'s
    ``decided_as`` (``f1`` or ``labelled``) and ``why``; the batch prior's shares (``labelled``,
    ``batch``) or ``note`` (no estimate); the F1 cut's leave-one-out F1 on L at it and at the run's
    threshold, and the share L was weighted to (None: unweighted)."""

    mode: str
    #: None only in a record that predates it (decisions at the run's own threshold)
    threshold_on_theta: float | None = None
    decided_as: str | None = None
    why: str | None = None
    labelled: float | None = None
    batch: float | None = None
    note: str | None = None
    f1_labelled: float | None = None
    f1_labelled_at_run_threshold: float | None = None
    weighted_to_batch_share: float | None = None

    @property
    def at_f1_cut(self) -> bool:
        """Whether the decisions are at L's F1 cut."""
        return self.f1_labelled is not None

    @property
    def from_labels(self) -> bool:
        """Whether the threshold was derived from L's labels (the F1 cut, or the batch prior's
        shares, whose estimate reads L's confusion matrix), so a bound certified on L at it is
        approximate."""
        return self.at_f1_cut or self.batch is not None

    def as_dict(self) -> dict[str, Any]:
        """The record as a run stores it: every field that is set (an F1 cut's share even when
        None: it was not weighted)."""
        return {k: v for k, v in asdict(self).items()
                if v is not None or (k == "weighted_to_batch_share" and self.at_f1_cut)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PriorDecision:
        """A stored record (:meth:`as_dict`)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def decide_prior(mode: str, p: Prevalence, theta_l: ArrayLike, y_l: ArrayLike, threshold: float
                 ) -> tuple[float, PriorDecision | None]:
    """The threshold on theta a run decides at for its prior setting ``mode`` (``labelled``,
    ``batch``, ``f1`` or ``auto``), given the batch's share ``p``, L's leave-one-out theta and labels
    and the run's own ``threshold``, with what to record (None: ``labelled``, at ``threshold``)."""
    decided_as, why = auto_prior(p) if mode == "auto" else (mode, None)
    prior: PriorDecision | None = None
    if decided_as == "batch" and p.estimate is not None:
        threshold = prior_threshold(p.labelled, p.estimate, threshold)
        prior = PriorDecision("batch", threshold, labelled=p.labelled, batch=p.estimate)
    elif decided_as == "batch":
        prior = PriorDecision("batch", threshold, note=f"no batch estimate ({p.not_estimable}): L's prior")
    elif decided_as == "f1":
        cut = f1_cut(theta_l, y_l, threshold, p.estimate)
        threshold = cut.threshold
        prior = PriorDecision("f1", cut.threshold, f1_labelled=cut.f1,
                              f1_labelled_at_run_threshold=cut.f1_at_run_threshold,
                              weighted_to_batch_share=p.estimate)
    if mode == "auto":
        prior = PriorDecision(**(asdict(prior) if prior else {"threshold_on_theta": threshold})
                              | {"mode": "auto", "decided_as": decided_as, "why": why})
    return threshold, prior
