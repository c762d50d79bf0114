"""Seeded, pure sampling helpers used to build calibration sets.

Everything here works on label arrays / index arrays and returns sorted ``int64`` index
arrays, so that a calibration set is fully described by ``(data file, seed)`` and
can be rebuilt bit-for-bit. No I/O, no global random state: each call builds its own
``numpy.random.Generator(PCG64(seed))``.

Note: NumPy does not promise identical ``Generator`` streams across *major*
versions; record the NumPy version beside the seed (the indices themselves are the
ground truth once stored).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["make_rng", "balanced_sample", "subsample", "nested_subsamples"]


def make_rng(seed: int) -> np.random.Generator:
    """Return ``Generator(PCG64(seed))``; the one place that decides the bit generator."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return np.random.Generator(np.random.PCG64(int(seed)))


def _as_index_array(indices: ArrayLike, name: str = "indices") -> NDArray[np.int64]:
    arr = np.asarray(indices)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def balanced_sample(
    labels: ArrayLike,
    n_per_class: int | None = None,
    *,
    seed: int,
    classes: Sequence[int] = (0, 1),
) -> NDArray[np.int64]:
    """Class-balanced sample of positions into ``labels``.

    Calibration residuals are averaged over neighbours, so a calibration set that is
    mostly one class pulls every prediction towards that class; balancing removes
    that prior (as the paper does).

    Parameters
    ----------
    labels
        1-D array of class labels, each one of ``classes``.
    n_per_class
        Items to draw from every class. ``None`` means "the size of the smallest
        class": the minority class is then taken whole and the others are
        down-sampled to match (ClaimBuster 2012: 657 + 657).
    seed
        Seed for ``Generator(PCG64(seed))``; same seed and labels -> same indices.
    classes
        Classes that must be present. Default ``(0, 1)`` so that a pool missing one
        class fails instead of silently yielding a one-class "balanced" set.

    Returns
    -------
    numpy.ndarray
        Sorted ``int64`` positions, ``n * len(classes)`` of them.

    Raises
    ------
    ValueError
        If a label is not in ``classes``, if a class has fewer than ``n_per_class``
        items (or none at all), or if ``n_per_class < 1``.

    Notes
    -----
    Classes are visited in the order given; a class whose size equals ``n`` is
    taken whole without drawing, every other class gets ``rng.choice(..., n,
    replace=False)`` from one shared generator.
    """
    members = _class_members(labels, classes)
    n = _per_class(n_per_class, {c: int(m.size) for c, m in members.items()})
    rng = make_rng(seed)
    picked = [m if m.size == n else rng.choice(m, size=n, replace=False) for m in members.values()]
    return np.sort(np.concatenate(picked)).astype(np.int64, copy=False)


def _class_members(labels: ArrayLike, classes: Sequence[int]) -> dict[int, NDArray[np.intp]]:
    """Positions of each class in ``labels``, in the order of ``classes``, after refusing labels
    that are not 1-D or hold a value outside ``classes``, and classes that are empty or repeat."""
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {y.shape}")
    if len(set(classes)) != len(classes) or not classes:
        raise ValueError(f"classes must be non-empty and distinct, got {tuple(classes)}")
    unknown = set(np.unique(y).tolist()) - set(classes)
    if unknown:
        raise ValueError(f"labels contain values outside classes {tuple(classes)}: {sorted(unknown)}")
    return {c: np.flatnonzero(y == c) for c in classes}


def _per_class(n_per_class: int | None, sizes: dict[int, int]) -> int:
    """Items to draw per class: ``n_per_class``, or the smallest class's size when None; refuses a
    count below 1, an empty class, or a class with fewer items than asked."""
    if n_per_class is None:
        n = min(sizes.values())
        if n == 0:
            empty = [c for c, s in sizes.items() if s == 0]
            raise ValueError(f"cannot balance: no items of class {empty} (class sizes {sizes})")
    else:
        if isinstance(n_per_class, bool) or not isinstance(n_per_class, (int, np.integer)):
            raise TypeError(f"n_per_class must be an int or None, got {type(n_per_class).__name__}")
        n = int(n_per_class)
        if n < 1:
            raise ValueError(f"n_per_class must be >= 1, got {n}")
        short = {c: s for c, s in sizes.items() if s < n}
        if short:
            raise ValueError(f"too few items for n_per_class={n}: class sizes {sizes}")
    return n


def subsample(indices: ArrayLike, n: int, *, seed: int) -> NDArray[np.int64]:
    """Draw ``n`` of ``indices`` without replacement; sorted.

    For ablations on the size of the calibration set |L| (draw from a calibration
    index set). Equals the first ``n`` of :func:`nested_subsamples` for the same seed.
    """
    return nested_subsamples(indices, [n], seed=seed)[0]


def nested_subsamples(indices: ArrayLike, sizes: Sequence[int], *, seed: int) -> list[NDArray[np.int64]]:
    """Nested random subsets of ``indices``, one per size, each sorted.

    One permutation is drawn and each subset is a prefix of it, so the subset of
    size 500 is contained in the one of size 1,000: an |L|-ablation curve then moves
    only because |L| grows, not because a fresh random draw was made at each size.

    Raises
    ------
    ValueError
        If a size is negative or exceeds ``len(indices)``, or ``indices`` repeat.
    """
    idx = _as_index_array(indices)
    if np.unique(idx).size != idx.size:
        raise ValueError("indices contain repeats")
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)):
            raise TypeError(f"sizes must be ints, got {type(s).__name__}")
        if not 0 <= s <= idx.size:
            raise ValueError(f"size {s} out of range 0..{idx.size}")
    order = make_rng(seed).permutation(idx.size)
    return [np.sort(idx[order[: int(s)]]).astype(np.int64, copy=False) for s in sizes]
