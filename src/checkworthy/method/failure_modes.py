"""What NN-PPI fixed and what it broke, claim by claim (pure, no I/O).

Each claim is compared on two decisions, the raw score's (baseline: ``score >= threshold``)
and NN-PPI's (``theta >= threshold``), against its gold label:

- ``fixed_fp``: baseline 1, gold 0, NN-PPI 0 (a false positive the neighbours pulled down);
- ``fixed_fn``: baseline 0, gold 1, NN-PPI 1 (a false negative the neighbours rescued);
- ``persistent``: both wrong (the neighbourhood shares the model's error);
- ``regression``: baseline right, NN-PPI wrong (neighbours over-corrected);
- ``correct``: both right.

Examples are picked deterministically, the clearest first: for fixes and regressions the
largest move ``|theta - score|``, for persistent errors the most confidently wrong theta
``|theta - threshold|``; ties go to the smaller claim id.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

CATEGORIES = ("fixed_fp", "fixed_fn", "persistent", "regression")


def classify(y: ArrayLike, baseline: ArrayLike, nnppi: ArrayLike) -> NDArray[np.str_]:
    """The failure category of each claim (one of :data:`CATEGORIES` or ``correct``)."""
    t, b, n = (np.asarray(a, dtype=int) for a in (y, baseline, nnppi))
    out = np.full(len(t), "correct", dtype=object)
    out[(b == 1) & (t == 0) & (n == 0)] = "fixed_fp"
    out[(b == 0) & (t == 1) & (n == 1)] = "fixed_fn"
    out[(b != t) & (n != t)] = "persistent"
    out[(b == t) & (n != t)] = "regression"
    return out.astype(str)


def counts(y: ArrayLike, categories: ArrayLike) -> dict[tuple[str, str], int]:
    """Number of claims per (category, gold class), with class 'all' for the category total."""
    t = np.asarray(y, dtype=int)
    cat = np.asarray(categories)
    out: dict[tuple[str, str], int] = {}
    for c in (*CATEGORIES, "correct"):
        m = cat == c
        out[(c, "all")] = int(m.sum())
        for cls in (0, 1):
            out[(c, str(cls))] = int((m & (t == cls)).sum())
    return out


def pick_examples(
    categories: ArrayLike, claim_ids: ArrayLike, score: ArrayLike, theta: ArrayLike,
    n_per_category: int, threshold: float = 0.5,
) -> dict[str, list[int]]:
    """Row indices of up to ``n_per_category`` examples per category, clearest first."""
    cat = np.asarray(categories)
    ids = np.asarray(claim_ids, dtype=np.int64)
    s, th = np.asarray(score, dtype=float), np.asarray(theta, dtype=float)
    strength = {
        "persistent": np.abs(th - threshold),
        "fixed_fp": np.abs(th - s),
        "fixed_fn": np.abs(th - s),
        "regression": np.abs(th - s),
    }
    out: dict[str, list[int]] = {}
    for c in CATEGORIES:
        rows = np.flatnonzero(cat == c)
        order = np.lexsort((ids[rows], -np.round(strength[c][rows], 12)))
        out[c] = [int(r) for r in rows[order][:n_per_category]]
    return out


def neighbour_effects(
    labels: Sequence[int], scores: Sequence[float]
) -> list[dict[str, float]]:
    """Each neighbour's residual ``y - c`` and its share of the move, ``(y - c) / k``.

    theta = score + sum of the shares, so the shares say which neighbours moved the claim.
    """
    k = len(labels)
    return [{"residual": float(y - c), "contribution": float(y - c) / k} for y, c in zip(labels, scores)]
