"""A cascade's band: which claims a cheap model is unsure enough of to send to a slower, better one.
Pure: arrays in, arrays out.

The band is fixed on the labelled claims, not ranked within each batch: a claim is sent when the
cheap model's probability lies within ``half_width`` of 0.5, and ``half_width`` is the smallest
that holds ``share`` of the labelled claims' (out-of-fold) probabilities. So a claim's score never
depends on the batch it came in (a score cache and an audit trail stay true), and the share of a
batch sent is ``share`` only while the batch is like the labels (more where the cheap model is
less sure of it, the drift case).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray


def band_half_width(p_labelled: ArrayLike, share: float) -> float:
    """The half-width around 0.5 that holds ``share`` (in (0, 1]) of ``p_labelled``; 0.5 (every
    claim) at a share of 1."""
    p = np.asarray(p_labelled, dtype=np.float64)
    if not 0 < share <= 1:
        raise ValueError(f"share must lie in (0, 1], got {share}")
    if share == 1:
        return 0.5
    if p.size == 0 or not np.isfinite(p).all():
        raise ValueError("the labelled probabilities must be finite and not empty")
    return float(np.quantile(np.abs(p - 0.5), share, method="inverted_cdf"))


def in_band(p: ArrayLike, half_width: float) -> NDArray[np.bool_]:
    """Whether each probability lies within ``half_width`` of 0.5 (the claims sent on)."""
    return np.abs(np.asarray(p, dtype=np.float64) - 0.5) <= half_width
