"""Labels that cover a new region: greedy k-center (farthest-first traversal) over unit embeddings.

When a batch drifts, the most uncertain claims are not the ones to label first: the calibration's
neighbours are missing in a whole region, and labels spread over it repair most of it. Greedy
k-center picks, one at a time, the candidate farthest (cosine distance) from everything chosen so
far, and from the ``anchors`` (the labelled set) where they are given.

Guarantee (Gonzalez 1985): without anchors, the largest distance from any candidate to its
nearest chosen one is at most twice the smallest achievable with ``k`` centres among the
candidates (a 2-approximation of the k-center radius; finding the optimum is NP-hard). The
distance of the guarantee is the Euclidean one between unit vectors, ``sqrt(2 * cosine
distance)``: cosine distance itself is no metric, but it orders pairs alike, so the picks are
the same. Ties and
the first pick are broken by ``seed``. Pure: arrays in and out.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray


def _unit(v: ArrayLike) -> NDArray[np.float64]:
    a = np.atleast_2d(np.asarray(v, dtype=float))
    unit: NDArray[np.float64] = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    return unit


def k_center(vectors: ArrayLike, k: int, seed: int = 0, anchors: ArrayLike | None = None) -> NDArray[np.int_]:
    """Indices of ``k`` candidates (rows of ``vectors``) in the order greedy k-center picks them.

    Without ``anchors`` the first is drawn by ``seed``; with them, each pick is the candidate
    farthest from its nearest anchor or earlier pick. ``k`` above the candidates' count picks all."""
    x = _unit(vectors) if len(np.asarray(vectors)) else np.empty((0, 0))
    n, k = len(x), min(int(k), len(x))
    if k < 0:
        raise ValueError("k must be at least 0")
    if k == 0:
        return np.empty(0, dtype=int)
    rng = np.random.default_rng(seed)
    jitter = rng.random(n) * 1e-12  # seeded tie-break
    if anchors is not None and len(np.asarray(anchors)):
        a = _unit(anchors)
        far = np.full(n, np.inf)
        for start in range(0, len(a), 4096):
            far = np.minimum(far, 1.0 - (x @ a[start:start + 4096].T).max(axis=1))
        first = int(np.argmax(far + jitter))
    else:
        far, first = np.full(n, np.inf), int(rng.integers(n))
    chosen = [first]
    for _ in range(k - 1):
        far = np.minimum(far, 1.0 - x @ x[chosen[-1]])
        far[chosen[-1]] = -np.inf
        chosen.append(int(np.argmax(far + jitter)))
    return np.asarray(chosen, dtype=int)


def covering_radius(vectors: ArrayLike, centres: ArrayLike) -> float:
    """The largest Euclidean distance between unit vectors from a row of ``vectors`` to its
    nearest centre (the rows indexed by ``centres``): the radius the guarantee bounds."""
    x = _unit(vectors)
    cos = (1.0 - x @ x[np.asarray(centres, dtype=int)].T).min(axis=1).max()
    return float(np.sqrt(max(2.0 * cos, 0.0)))


def coverage_order(vectors: ArrayLike, beyond: ArrayLike, priority: ArrayLike, seed: int = 0,
                   anchors: ArrayLike | None = None) -> NDArray[np.int_]:
    """The order in which to label the candidates when a batch drifts: those ``beyond`` the
    labelled set's radius first, in greedy k-center order (:func:`k_center`, so the first labels
    spread over the new region), then the others by ``priority``, most uncertain first (ties by
    index). Returns a permutation of the candidates' indices."""
    beyond = np.asarray(beyond, dtype=bool)
    far = np.flatnonzero(beyond)
    vectors = np.asarray(vectors, dtype=float)
    first = far[k_center(vectors[far], len(far), seed, anchors)] if len(far) else far
    rest = np.flatnonzero(~beyond)
    rest = rest[np.lexsort((rest, -np.asarray(priority, dtype=float)[rest]))]
    return np.concatenate([first, rest]).astype(int)
