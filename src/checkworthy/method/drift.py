"""Drift: are the claims being decided still like the labelled ones? NN-PPI borrows the residuals
of a claim's nearest labelled claims; far from every labelled claim, those neighbours say little.

The measure is each claim's cosine distance to its nearest labelled claim. On L, each claim's
distance to its nearest *other* labelled claim gives the reference: the radius is the
``ceil((m + 1) q)``-th smallest of those m distances, so that a new claim exchangeable with L lies
beyond it with probability at most ``1 - q`` (the split-conformal quantile). A batch is flagged when
the share of its claims beyond the radius is significantly above ``tolerance`` (three times
``1 - q`` by default): the one-sided exact binomial p-value of "share <= tolerance" at most
``alpha``. The tolerance keeps a mild, expected difference (a new debate against last year's
labels: 11% beyond instead of 5% in our tests) from raising an alarm; a batch of another kind lies
beyond almost entirely.

Limits: the claims of a batch are treated as independent given L (a batch of near-duplicates counts
each); a batch that is only easier (closer to L) is never flagged. Pure: arrays in and out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import binom

#: the default share of L's own claims inside the radius, the share beyond it tolerated in a batch,
#: and the test level of an alert
QUANTILE, TOLERANCE, ALPHA = 0.95, 0.15, 0.01


@dataclass(frozen=True)
class Drift:
    """A batch against L: the radius, how many claims lie beyond it, their share against the
    expected ``1 - quantile`` and the tolerated one, the p-value and whether it is an alert."""

    quantile: float
    radius: float | None
    n: int
    n_beyond: int
    share: float
    expected: float
    tolerance: float
    p_value: float
    alert: bool

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def fit_radius(loo_nearest: ArrayLike, quantile: float = QUANTILE) -> float | None:
    """The split-conformal radius of L's leave-one-out nearest distances (None when L is too small
    for the quantile: then no claim is ever beyond it)."""
    d = np.sort(np.asarray(loo_nearest, dtype=float))
    if not 0 < quantile < 1:
        raise ValueError("quantile must lie in (0, 1)")
    rank = int(np.ceil((len(d) + 1) * quantile))
    return float(d[rank - 1]) if rank <= len(d) else None


def check_drift(nearest: ArrayLike, radius: float | None, quantile: float = QUANTILE,
                tolerance: float = TOLERANCE, alpha: float = ALPHA) -> Drift:
    """The batch's claims (their nearest labelled distances) against the radius."""
    if not 1 - quantile <= tolerance < 1:
        raise ValueError("tolerance must lie in [1 - quantile, 1)")
    d = np.asarray(nearest, dtype=float)
    n, beyond = len(d), 0 if radius is None else int(np.sum(d > radius))
    p = float(binom.sf(beyond - 1, n, tolerance)) if n else 1.0
    return Drift(quantile, radius, n, beyond, beyond / n if n else 0.0, 1.0 - quantile, tolerance, p,
                 p <= alpha)


def drift(loo_nearest: ArrayLike, nearest: ArrayLike, quantile: float = QUANTILE,
          tolerance: float = TOLERANCE, alpha: float = ALPHA) -> Drift:
    """:func:`check_drift` of a batch against the radius of L's leave-one-out nearest distances."""
    return check_drift(nearest, fit_radius(loo_nearest, quantile), quantile, tolerance, alpha)
