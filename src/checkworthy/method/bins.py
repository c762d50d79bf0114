"""Binned figures of a run's values against the gold labels (pure, no I/O): reliability bins and
histograms of the raw score, the kNN mean and theta, as :class:`checkworthy.method.sweeps.Row`
objects (the shape of ``analysis_metrics``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from checkworthy.method import metrics
from checkworthy.method.sweeps import Row


def reliability_rows(
    y: ArrayLike, values: dict[str, ArrayLike], n_bins: int = 10
) -> list[Row]:
    """Reliability bins of each method's value (raw score, kNN mean, theta) against the label.

    Bins split [0, 1] into ``n_bins`` equal parts; values outside [0, 1] (theta is not
    clipped) fall into the end bins. Per bin: count, mean value, observed positive rate;
    per method: the expected calibration error ``sum_b n_b/n * |mean_b - rate_b|``.
    """
    t = np.asarray(y, dtype=float)
    out: list[Row] = []
    for method, raw in values.items():
        v = np.asarray(raw, dtype=float)
        b = np.clip(np.floor(v * n_bins).astype(int), 0, n_bins - 1)
        ece = 0.0
        for i in range(n_bins):
            m = b == i
            n = int(m.sum())
            out.append(Row(method, "count", float(n), bin=i))
            if n:
                mean, rate = float(v[m].mean()), float(t[m].mean())
                out += [Row(method, "mean_value", mean, bin=i), Row(method, "positive_rate", rate, bin=i)]
                ece += n / len(t) * abs(mean - rate)
        out.append(Row(method, "ece", ece if len(t) else float("nan")))
    return out


def histogram_rows(
    y: ArrayLike, values: dict[str, ArrayLike], edges: dict[str, Sequence[float]]
) -> list[Row]:
    """Counts of each method's value per bin and gold class; outside values go to end bins."""
    t = np.asarray(y, dtype=int)
    out: list[Row] = []
    for method, raw in values.items():
        e = np.asarray(edges[method], dtype=float)
        v = np.clip(np.asarray(raw, dtype=float), e[0], e[-1])
        b = np.clip(np.searchsorted(e, v, side="right") - 1, 0, len(e) - 2)
        for cls in metrics.CLASSES:
            counts = np.bincount(b[t == cls], minlength=len(e) - 1)
            out += [Row(method, "count", float(n), cls=str(cls), bin=i) for i, n in enumerate(counts)]
    return out
