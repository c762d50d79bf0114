"""Point corrections beyond the paper's NN-PPI, and their choice by cross-validation.

Every correction maps a :class:`Neighbourhood` (the claims to correct, their nearest labelled
claims, and the labelled calibration set ``L`` itself) to an estimate ``theta`` (n,) of
P(check-worthy | claim); the decision is ``theta >= threshold`` (0.5 unless chosen otherwise).
All are pure functions on arrays; the kNN itself is computed elsewhere (in SQL).

Notation: for claim i with score ``c_i`` and neighbours S_i (the first k columns of ``nbr``,
nearest first), ``r_j = Y_j - c_j`` are the neighbours' residuals. The paper's estimate is
``theta_i = c_i + mean_{S_i} r_j``.

Registry (:data:`CORRECTIONS`, keyed by CLI name):

``raw``         the model score ``c_i`` (the paper's Baseline).
``knn``         the neighbours' mean label (the paper's KNN baseline).
``paper``       ``c_i + mean r_j``, unclipped (the paper's NN-PPI).
``clipped``     ``paper`` clipped to [0, 1]. Same decisions at any threshold in (0, 1); a better
                probability estimate (never a worse squared error).
``weighted``    residual mean with weights ``exp(-(d_ij - d_i1) / tau)``: nearer neighbours
                count more; ``tau = inf`` is ``paper``.
``adaptive-k``  k chosen per claim, up to ``nb.k``: by the intersection-of-confidence-intervals
                (Lepski) rule on the running residual mean (``rule="ici"``), or by a distance
                radius relative to the ``k_min``-th neighbour (``rule="radius"``).
``ppi++``       power-tuned, in the form of PPI++ (Angelopoulos et al., 2023):
                ``theta_i = mean_S Y_j + lam * (c_i - mean_S c_j)``; ``lam = 1`` is ``paper``,
                ``lam = 0`` is ``knn``. ``lam`` is the leave-one-out least-squares fit on ``L``.
``shrink``      ``c_i + kappa * mean_S r_j``: the residual mean shrunk by ``kappa`` (``kappa = 1``
                is ``paper``, ``0`` is ``raw``), fitted the same way.
``global``      ``c_i + mean_L r_j``: the classical PPI rectifier (k = |L|), a baseline.

:func:`select_by_cv` picks (method, k, parameters, threshold) by weighted F1 of leave-one-out
predictions on ``L``. It takes a :class:`LabelledSet` and nothing else, so the choice cannot
depend on test claims. :func:`exclude_same_group` turns leave-one-out neighbour lists into
leave-one-group-out ones (e.g. by debate) when L's claims have near-duplicates in L.

Limits: every estimate treats ``L`` and the claims to correct as draws from one distribution;
the paper's ``L`` is class-balanced and its test sets are not, so ``theta`` estimates the
probability under the balanced prior (see ``target_prevalence`` in :func:`select_by_cv`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.metrics import f1_score

from checkworthy.method import nnppi

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int_]

__all__ = [
    "CORRECTIONS",
    "DEFAULT_GRID",
    "CVResult",
    "Choice",
    "LabelledSet",
    "Neighbourhood",
    "correction_adaptive_k",
    "correction_clipped",
    "correction_global",
    "correction_knn",
    "correction_paper",
    "correction_ppi",
    "correction_raw",
    "correction_shrink",
    "correction_weighted",
    "estimate_lambda",
    "exclude_same_group",
    "select_by_cv",
]


# ----------------------------------------------------------------------------- inputs


def _check_nbr(nbr: ArrayLike, m: int, name: str) -> IntArray:
    a = np.asarray(nbr)
    if a.ndim != 2 or a.shape[1] < 1:
        raise ValueError(f"{name} must be a 2-D (rows, K>=1) index matrix, got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must hold integer indices into L")
    if a.size and (a.min() < 0 or a.max() >= m):
        raise ValueError(f"{name} indexes outside L (size {m})")
    return a.astype(np.int_)


def _check_matrix(a: ArrayLike | None, shape: tuple[int, ...], name: str) -> FloatArray | None:
    if a is None:
        return None
    d = np.asarray(a, dtype=float)
    if d.shape != shape:
        raise ValueError(f"{name} has shape {d.shape}, expected {shape}")
    if not np.isfinite(d).all():
        raise ValueError(f"{name} must be finite")
    return d


def _check_dist(dist: ArrayLike | None, shape: tuple[int, ...], name: str) -> FloatArray | None:
    d = _check_matrix(dist, shape, name)
    if d is None:
        return None
    if np.any(np.diff(d, axis=1) < -1e-12):
        raise ValueError(f"{name} rows must be sorted nearest first")
    return d


@dataclass(frozen=True)
class LabelledSet:
    """The labelled calibration set L with its leave-one-out neighbour lists.

    Parameters
    ----------
    y : (m,) labels, 1 = check-worthy.
    c : (m,) model scores of the labelled claims.
    nbr : (m, K) indices into L of each labelled claim's nearest labelled claims, nearest first,
        never itself (validated: a claim that is its own neighbour would leak its label).
    dist : (m, K) cosine distances matching ``nbr``, or None (then distance-based methods fail).
    nbr_c : (m, K) the listed neighbours' scores *as seen from each claim*, or None (then
        ``c[nbr]``). For a score fitted on L itself (the embedding head), ``c_j`` came from a model
        that may have seen claim i's label, and since i and j are similar that model pulls
        ``c_j`` towards ``Y_i``: the residual ``Y_j - c_j`` then argues against ``Y_i`` and every
        leave-one-out figure on L (CV, conformal scores) is pessimistic for NN-PPI. A
        cross-fitted ``nbr_c[i, col]`` comes from a model that saw neither i nor the neighbour.
    """

    y: IntArray
    c: FloatArray
    nbr: IntArray
    dist: FloatArray | None = None
    nbr_c: FloatArray | None = None

    def __post_init__(self) -> None:
        y = np.asarray(self.y)
        if y.ndim != 1 or not np.isin(y, (0, 1)).all():
            raise ValueError("y must be a 1-D array of 0/1 labels")
        c = np.asarray(self.c, dtype=float)
        if c.shape != y.shape or not np.isfinite(c).all():
            raise ValueError("c must be finite and match y in length")
        nbr = _check_nbr(self.nbr, len(y), "LabelledSet.nbr")
        if nbr.shape[0] != len(y):
            raise ValueError("LabelledSet.nbr needs one row per labelled claim")
        if (nbr == np.arange(len(y))[:, None]).any():
            raise ValueError("a labelled claim is its own neighbour: pass leave-one-out neighbours")
        object.__setattr__(self, "y", y.astype(np.int_))
        object.__setattr__(self, "c", c)
        object.__setattr__(self, "nbr", nbr)
        object.__setattr__(self, "dist", _check_dist(self.dist, nbr.shape, "LabelledSet.dist"))
        object.__setattr__(self, "nbr_c", _check_matrix(self.nbr_c, nbr.shape, "LabelledSet.nbr_c"))

    @property
    def m(self) -> int:
        """Number of labelled claims."""
        return len(self.y)

    @property
    def max_k(self) -> int:
        """Number of neighbour columns available."""
        return int(self.nbr.shape[1])


@dataclass(frozen=True)
class Neighbourhood:
    """Claims to correct, with their nearest labelled claims in ``cal``.

    Parameters
    ----------
    c : (n,) model scores of the claims to correct.
    nbr : (n, K) indices into ``cal`` of their nearest labelled claims, nearest first.
    cal : the labelled set the indices point into.
    dist : (n, K) cosine distances matching ``nbr``, or None.
    k : neighbours used by fixed-k methods (the first k columns); default all K. Adaptive
        methods use it as the maximum.
    self_index : for the labelled claims themselves (:meth:`loo`), each row's own position in
        ``cal``, so that methods pooling over all of L (``global``) can leave it out.
    nbr_c : (n, K) the neighbours' scores as seen from each claim, or None for ``cal.c[nbr]``
        (see :class:`LabelledSet`; :meth:`loo` passes L's).
    """

    c: FloatArray
    nbr: IntArray
    cal: LabelledSet
    dist: FloatArray | None = None
    k: int | None = None
    self_index: IntArray | None = None
    nbr_c: FloatArray | None = None

    def __post_init__(self) -> None:
        c = np.asarray(self.c, dtype=float)
        if c.ndim != 1 or not np.isfinite(c).all():
            raise ValueError("c must be a finite 1-D array")
        nbr = _check_nbr(self.nbr, self.cal.m, "Neighbourhood.nbr")
        if nbr.shape[0] != len(c):
            raise ValueError("Neighbourhood.nbr needs one row per claim")
        k = nbr.shape[1] if self.k is None else int(self.k)
        if not 1 <= k <= nbr.shape[1]:
            raise ValueError(f"k={k} but only {nbr.shape[1]} neighbour columns were given")
        object.__setattr__(self, "c", c)
        object.__setattr__(self, "nbr", nbr)
        object.__setattr__(self, "k", k)
        object.__setattr__(self, "dist", _check_dist(self.dist, nbr.shape, "Neighbourhood.dist"))
        object.__setattr__(self, "nbr_c", _check_matrix(self.nbr_c, nbr.shape, "Neighbourhood.nbr_c"))
        if self.self_index is not None:
            object.__setattr__(self, "self_index", np.asarray(self.self_index, dtype=np.int_))

    @classmethod
    def loo(cls, cal: LabelledSet, k: int | None = None) -> Neighbourhood:
        """The labelled claims as claims to correct, each with its leave-one-out neighbours."""
        return cls(c=cal.c, nbr=cal.nbr, cal=cal, dist=cal.dist, k=k, self_index=np.arange(cal.m),
                   nbr_c=cal.nbr_c)

    def with_k(self, k: int) -> Neighbourhood:
        """The same neighbourhood using the first ``k`` neighbours."""
        return replace(self, k=k)

    @property
    def fixed_k(self) -> int:
        """``k`` as construction resolved it (None there means all K columns)."""
        assert self.k is not None, "Neighbourhood.__post_init__ sets k"
        return self.k

    @property
    def n(self) -> int:
        """Number of claims to correct."""
        return len(self.c)

    def idx(self) -> IntArray:
        """(n, k) neighbour indices in use."""
        return self.nbr[:, : self.k]

    def y_nbr(self) -> IntArray:
        """(n, k) neighbour labels."""
        return self.cal.y[self.idx()]

    def c_nbr(self) -> FloatArray:
        """(n, k) neighbour scores (as seen from each claim when ``nbr_c`` is given)."""
        return self.cal.c[self.idx()] if self.nbr_c is None else self.nbr_c[:, : self.k]

    def residuals(self) -> FloatArray:
        """(n, k) neighbour residuals ``Y_j - c_j``."""
        return nnppi.residuals(self.y_nbr(), self.c_nbr())

    def distances(self) -> FloatArray:
        """(n, k) neighbour distances; raises if none were given."""
        if self.dist is None:
            raise ValueError("this method needs neighbour distances (dist)")
        return self.dist[:, : self.k]


def exclude_same_group(
    nbr: ArrayLike, dist: ArrayLike | None, groups: ArrayLike, k: int
) -> tuple[IntArray, FloatArray | None]:
    """Leave-one-group-out neighbour lists for L: drop neighbours from the claim's own group.

    Why: leave-one-out scores a labelled claim with neighbours from the same debate (or
    near-duplicate talking points repeated across it), which test claims from new debates
    lack; cross-validated F1 and conformal scores are then optimistic. Measured on ClaimBuster
    (kNN only): leave-one-out CV F1 0.777 vs test 0.728, leave-debate-out 0.755 vs 0.732.
    Pass ``nbr`` with spare columns (the k nearest of another group must be among them);
    returns the first ``k`` such neighbours, nearest first. Raises if a row has fewer.
    """
    nbr = np.asarray(nbr)
    groups = np.asarray(groups)
    keep = groups[nbr] != groups[:, None]
    short = int((keep.sum(axis=1) < k).sum())
    if short:
        raise ValueError(f"{short} claims have fewer than k={k} neighbours outside their group")
    return first_kept(nbr, dist, keep, k)


def first_kept(
    nbr: ArrayLike, dist: ArrayLike | None, keep: ArrayLike, k: int
) -> tuple[IntArray, FloatArray | None]:
    """The first ``k`` columns of each neighbour list where ``keep`` (same shape) is true, nearest
    first; a row with fewer kept columns repeats dropped ones at its end (callers check counts)."""
    nbr = np.asarray(nbr)
    order = np.argsort(~np.asarray(keep, dtype=bool), axis=1, kind="stable")[:, :k]
    out_d = None if dist is None else np.take_along_axis(np.asarray(dist, dtype=float), order, axis=1)
    return np.take_along_axis(nbr, order, axis=1), out_d


# ------------------------------------------------------------------------ corrections


def _finish(theta: FloatArray, clip: bool) -> FloatArray:
    return np.clip(theta, 0.0, 1.0) if clip else theta


def correction_raw(nb: Neighbourhood, *, clip: bool = False) -> FloatArray:
    """The model score itself (the paper's Baseline); ignores the neighbours."""
    return _finish(nb.c.copy(), clip)


def correction_knn(nb: Neighbourhood) -> FloatArray:
    """Mean label of the k neighbours (the paper's KNN baseline); ignores the model."""
    return nnppi.knn_mean(nb.y_nbr())


def correction_paper(nb: Neighbourhood, *, clip: bool = False) -> FloatArray:
    """The paper's NN-PPI ``c_i + mean_{S_i}(Y_j - c_j)``, unclipped unless ``clip``."""
    return _finish(nnppi.nnppi_theta(nb.c, nb.y_nbr(), nb.c_nbr()), clip)


def correction_clipped(nb: Neighbourhood) -> FloatArray:
    """NN-PPI clipped to [0, 1].

    Clipping never moves theta across a threshold in (0, 1), so decisions equal ``paper``'s;
    it can only reduce ``|Y - theta|`` (Y is 0 or 1), so it is the better probability estimate.
    (Conformal intervals still rank the unclipped theta: clipping ties distinct scores.)
    """
    return correction_paper(nb, clip=True)


def correction_weighted(nb: Neighbourhood, *, tau: float = 0.05, clip: bool = False) -> FloatArray:
    """Similarity-weighted residual mean, weights ``exp(-(d_ij - d_i1) / tau)``.

    Why: the paper's failure analysis shows topically unrelated neighbours over-correcting;
    a kernel in the cosine distance lets the nearest dominate. ``tau`` is in distance units
    (cosine distances of near neighbours are typically 0.2-0.6); ``tau = inf`` gives ``paper``.
    Subtracting ``d_i1`` changes nothing but avoids underflow.
    """
    if np.isinf(tau):
        return correction_paper(nb, clip=clip)
    if tau <= 0:
        raise ValueError("tau must be positive")
    d = nb.distances()
    w = np.exp(-(d - d[:, :1]) / tau)
    theta = nb.c + (w * nb.residuals()).sum(axis=1) / w.sum(axis=1)
    return _finish(theta, clip)


def adaptive_k_sizes(
    nb: Neighbourhood,
    *,
    rule: str = "ici",
    gamma: float = 2.0,
    rho: float = 0.1,
    k_min: int = 2,
) -> tuple[FloatArray, IntArray]:
    """Per-claim residual mean and the number of neighbours it uses (see :func:`correction_adaptive_k`)."""
    r = nb.residuals()
    n, k_max = r.shape
    k_min = max(1, min(k_min, k_max))
    counts = np.arange(1, k_max + 1, dtype=float)
    means = np.cumsum(r, axis=1) / counts
    if rule == "ici":
        # running variance (ddof=1) pooled with one pseudo-observation of L's residual variance,
        # so that k'=1 and all-equal residuals (frequent with binary labels) do not give se = 0
        s0 = np.var(nb.cal.y - nb.cal.c, ddof=1) if nb.cal.m > 1 else 0.25
        ss = np.cumsum(r**2, axis=1) - counts * means**2
        var = (np.maximum(ss, 0.0) + s0) / counts
        se = np.sqrt(var / counts)
        lo = np.maximum.accumulate((means - gamma * se)[:, k_min - 1 :], axis=1)
        hi = np.minimum.accumulate((means + gamma * se)[:, k_min - 1 :], axis=1)
        # the running intersection only shrinks, so "still non-empty" is a prefix
        sizes = k_min - 1 + (lo <= hi).sum(axis=1)
    elif rule == "radius":
        d = nb.distances()
        radius = d[:, k_min - 1 : k_min] * (1.0 + rho)
        sizes = np.maximum((d <= radius).sum(axis=1), k_min)
    else:
        raise ValueError(f"unknown rule {rule!r}: use 'ici' or 'radius'")
    sizes = sizes.astype(np.int_)
    return means[np.arange(n), sizes - 1], sizes


def correction_adaptive_k(
    nb: Neighbourhood,
    *,
    rule: str = "ici",
    gamma: float = 2.0,
    rho: float = 0.1,
    k_min: int = 2,
    clip: bool = False,
) -> FloatArray:
    """NN-PPI with k chosen per claim, between ``k_min`` and ``nb.k``.

    Why: one k trades bias (far, unrelated neighbours) against variance (few residuals) the
    same way for every claim; dense regions can afford more neighbours.

    ``rule="ici"``: Lepski's intersection-of-confidence-intervals rule. The running mean of the
    first k' residuals gets the interval ``mean +/- gamma * se``; k is the largest k' for which
    the intervals for k_min..k' still intersect, i.e. before adding neighbours shifts the mean
    by more than its noise explains. ``se`` pools the running variance with one pseudo-sample
    of L's residual variance (binary labels often give k' equal residuals).
    ``rule="radius"``: neighbours within ``(1 + rho)`` times the distance of the ``k_min``-th.

    Limits: ``gamma``/``rho`` are tuning constants (choose them with :func:`select_by_cv`); the
    ICI rule assumes the residuals of near neighbours share a mean, which is the premise of
    NN-PPI itself.
    """
    mean_r, _ = adaptive_k_sizes(nb, rule=rule, gamma=gamma, rho=rho, k_min=k_min)
    return _finish(nb.c + mean_r, clip)


def _lambda_terms(nb: Neighbourhood, form: str) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``theta = base + lam * slope``; returns (base, slope, neighbour-mean residual)."""
    y_bar = nb.y_nbr().mean(axis=1)
    c_bar = nb.c_nbr().mean(axis=1)
    if form == "ppi++":
        return y_bar, nb.c - c_bar, y_bar - c_bar
    if form == "shrink":
        return nb.c, y_bar - c_bar, y_bar - c_bar
    raise ValueError(f"unknown form {form!r}: use 'ppi++' or 'shrink'")


def estimate_lambda(
    cal: LabelledSet,
    k: int,
    *,
    form: str = "ppi++",
    rows: ArrayLike | None = None,
    bounds: tuple[float, float] | None = (0.0, 1.0),
) -> float:
    """Power-tuning factor fitted by leave-one-out least squares on L.

    ``theta_j(lam) = base_j + lam * slope_j`` is linear in ``lam`` (see :func:`correction_ppi`,
    :func:`correction_shrink`), so minimising the leave-one-out Brier score
    ``sum_j (Y_j - theta_j(lam))^2`` has the closed form ``sum (Y - base) slope / sum slope^2``,
    the local analogue of PPI++'s ``Cov(Y, f) / Var(f)``. ``rows`` restricts the fit to a subset
    of L (for cross-fitting); ``bounds`` clips the result ((0, 1) keeps the estimate between the
    two baselines it interpolates; None leaves it free).
    """
    base, slope, _ = _lambda_terms(Neighbourhood.loo(cal, k), form)
    resid = cal.y - base
    if rows is not None:
        sel = np.asarray(rows)
        resid, slope = resid[sel], slope[sel]
    denom = float(np.sum(slope**2))
    lam = float(np.sum(resid * slope) / denom) if denom > 0 else 1.0
    return float(np.clip(lam, *bounds)) if bounds is not None else lam


def correction_ppi(
    nb: Neighbourhood, *, lam: float | ArrayLike | None = None, clip: bool = False
) -> FloatArray:
    """Power-tuned NN-PPI: ``theta_i = mean_S Y_j + lam * (c_i - mean_S c_j)``.

    Equivalently ``lam * c_i + mean_S (Y_j - lam * c_j)``: the PPI++ estimator restricted to the
    neighbourhood. ``lam = 1`` is the paper's NN-PPI (trust the model's score differences fully);
    ``lam = 0`` is the KNN baseline (ignore the model). Why: a weak model (Gemma 3 270M) adds
    noise through ``c_i - mean c_j``; power tuning down-weights it by as much as L shows it
    deserves. ``lam=None`` estimates it on ``nb.cal`` by :func:`estimate_lambda` (the claim's own
    label, if it is in L, enters that one scalar: a negligible leak for |L| in the thousands).
    An array ``lam`` (n,) gives each claim its own factor (used for cross-fitting).
    """
    if lam is None:
        lam = estimate_lambda(nb.cal, nb.fixed_k, form="ppi++")
    base, slope, _ = _lambda_terms(nb, "ppi++")
    return _finish(base + np.asarray(lam, dtype=float) * slope, clip)


def correction_shrink(
    nb: Neighbourhood, *, kappa: float | ArrayLike | None = None, clip: bool = False
) -> FloatArray:
    """Shrunk NN-PPI: ``theta_i = c_i + kappa * mean_S (Y_j - c_j)``.

    ``kappa = 1`` is the paper's, ``kappa = 0`` the raw score: shrinkage of a noisy k-sample mean
    toward no correction. ``kappa=None`` fits it on ``nb.cal`` (:func:`estimate_lambda`,
    ``form="shrink"``).
    """
    if kappa is None:
        kappa = estimate_lambda(nb.cal, nb.fixed_k, form="shrink")
    base, slope, _ = _lambda_terms(nb, "shrink")
    return _finish(base + np.asarray(kappa, dtype=float) * slope, clip)


def correction_global(nb: Neighbourhood, *, clip: bool = False) -> FloatArray:
    """Classical PPI rectifier: ``c_i + mean_L (Y_j - c_j)`` over all of L (k = |L|).

    A baseline: one shift for every claim, corrects the model's overall bias only. For the
    labelled claims themselves (``self_index`` set) the claim's own residual is left out.
    """
    r = nb.cal.y - nb.cal.c
    if nb.self_index is None:
        shift = np.full(nb.n, r.mean())
    else:
        shift = (r.sum() - r[nb.self_index]) / (nb.cal.m - 1)
    return _finish(nb.c + shift, clip)


#: registry of point corrections, keyed by CLI name; each is ``f(nb, **params) -> theta``
CORRECTIONS: dict[str, Callable[..., FloatArray]] = {
    "raw": correction_raw,
    "knn": correction_knn,
    "paper": correction_paper,
    "clipped": correction_clipped,
    "weighted": correction_weighted,
    "adaptive-k": correction_adaptive_k,
    "ppi++": correction_ppi,
    "shrink": correction_shrink,
    "global": correction_global,
}

#: parameters fitted on L when left as None (cross-fitted inside :func:`select_by_cv`)
_FITTED = {"ppi++": ("lam", "ppi++"), "shrink": ("kappa", "shrink")}


# ------------------------------------------------------------------- cross-validation


@dataclass(frozen=True)
class Choice:
    """A fully specified correction: method, k, parameters and decision threshold.

    Fitted parameters (``lam``, ``kappa``) are stored as numbers estimated on all of L, so that
    applying a Choice to new claims never refits anything.
    """

    method: str
    k: int
    params: Mapping[str, Any] = field(default_factory=dict)
    threshold: float = nnppi.THRESHOLD
    cv_score: float = float("nan")

    def theta(self, nb: Neighbourhood) -> FloatArray:
        """The estimate for the claims of ``nb`` (uses the first ``self.k`` neighbours)."""
        return CORRECTIONS[self.method](nb.with_k(self.k), **dict(self.params))

    __call__ = theta

    def predict(self, nb: Neighbourhood) -> IntArray:
        """Decisions: 1 (check-worthy) where ``theta >= threshold``."""
        return nnppi.decide(self.theta(nb), self.threshold)


@dataclass(frozen=True)
class CVResult:
    """The selected :class:`Choice` and every candidate with its cross-validated score."""

    best: Choice
    table: tuple[Choice, ...]


#: candidate parameters per method searched by :func:`select_by_cv`; ``clipped`` is left out
#: because its decisions equal ``paper``'s
DEFAULT_GRID: dict[str, list[dict[str, Any]]] = {
    "paper": [{}],
    "knn": [{}],
    "raw": [{}],
    "ppi++": [{"lam": None}],
    "shrink": [{"kappa": None}],
    "weighted": [{"tau": t} for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)],
    "adaptive-k": [{"rule": "ici", "gamma": g} for g in (1.0, 2.0, 3.0)]
    + [{"rule": "radius", "rho": p} for p in (0.05, 0.1, 0.2)],
    "global": [{}],
}


def class_weights(y: IntArray, target_prevalence: float | None) -> FloatArray | None:
    """Each labelled claim's weight by its class, so that the weighted share of label 1 is
    ``target_prevalence`` (L read as if drawn at the batch's share: label shift); None for None."""
    if target_prevalence is None:
        return None
    if not 0 < target_prevalence < 1:
        raise ValueError("target_prevalence must lie in (0, 1)")
    p = y.mean()
    weights: FloatArray = np.where(y == 1, target_prevalence / p, (1 - target_prevalence) / (1 - p))
    return weights


def select_by_cv(
    cal: LabelledSet,
    /,
    *,
    ks: Sequence[int] = (3, 5, 10),
    grid: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    thresholds: Sequence[float] = (nnppi.THRESHOLD,),
    target_prevalence: float | None = None,
    n_folds: int = 5,
    seed: int = 0,
) -> CVResult:
    """Choose (method, k, parameters, threshold) by leave-one-out weighted F1 on L only.

    Procedure: for every k in ``ks`` and candidate in ``grid``, each labelled claim j gets
    ``theta_j`` from its leave-one-out neighbours (``cal.nbr``: j is never its own neighbour).
    Parameters fitted on L (``lam``, ``kappa`` given as None) are cross-fitted: for the claims
    of each of ``n_folds`` folds they are estimated from the other folds, so no claim's label
    enters its own prediction. Each candidate and threshold is scored by weighted F1
    (``sklearn.metrics.f1_score(average="weighted")``) of ``theta_j >= threshold`` against Y_j;
    the best score wins, ties going to the earlier candidate (grid order, then smaller k, then
    the threshold listed first), so simpler methods win ties. The winner's fitted parameters are
    then re-estimated on all of L.

    Parameters
    ----------
    cal : the labelled set with leave-one-out neighbours. Test claims cannot be passed: the
        selection is a function of L alone.
    ks : neighbour counts to try (each at most ``cal.max_k``).
    grid : ``{method: [params, ...]}``; default :data:`DEFAULT_GRID`.
    thresholds : decision thresholds to try; default the paper's 0.5 only.
    target_prevalence : share of check-worthy claims expected where the choice will be used,
        known without test labels (e.g. the share in the calibration pool before class
        balancing). The F1 is then computed with class weights that reweight L to that
        prevalence; None scores L as it is.
    n_folds, seed : the cross-fitting split of fitted parameters.

    Limits: the maximum over many candidates is optimistic by roughly the spread of their
    scores' noise (a few hundredths of F1 for |L| ~ 1,300); the ranking, not the score, is the
    output to trust. Leave-one-out neighbours of a labelled claim come from |L| - 1 claims,
    a negligible difference from the |L| a test claim sees.
    """
    grid = _checked_grid(cal, ks, grid)
    weights = class_weights(cal.y, target_prevalence)
    folds = np.random.default_rng(seed).permutation(cal.m) % n_folds
    table = _cv_table(_CVFolds(cal, weights, folds, n_folds), grid, sorted(ks), thresholds)
    return CVResult(best=_first_best(table), table=tuple(table))


def _checked_grid(
    cal: LabelledSet, ks: Sequence[int], grid: Mapping[str, Sequence[Mapping[str, Any]]] | None
) -> Mapping[str, Sequence[Mapping[str, Any]]]:
    """The grid to search (default :data:`DEFAULT_GRID`), after refusing test claims, unknown
    methods and a k outside the neighbour columns given."""
    if not isinstance(cal, LabelledSet):
        raise TypeError("select_by_cv takes the labelled set only (a LabelledSet), never claims to test")
    grid = DEFAULT_GRID if grid is None else grid
    unknown = set(grid) - set(CORRECTIONS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}")
    if any(k > cal.max_k or k < 1 for k in ks):
        raise ValueError(f"every k must lie in [1, {cal.max_k}] (the neighbour columns given)")
    return grid


@dataclass(frozen=True)
class _CVFolds:
    """What scoring a candidate on L needs: L, its class weights and the cross-fitting folds."""

    cal: LabelledSet
    weights: FloatArray | None
    folds: IntArray
    n_folds: int


def _cv_table(
    cv: _CVFolds, grid: Mapping[str, Sequence[Mapping[str, Any]]], ks: list[int],
    thresholds: Sequence[float],
) -> list[Choice]:
    """Every (method, k, parameters, threshold) candidate in search order, with its weighted F1."""
    table: list[Choice] = []
    for method, candidates in grid.items():
        for k in ks:
            nb = Neighbourhood.loo(cv.cal, k)
            for candidate in candidates:
                params, final = _cross_fitted(cv, method, k, candidate)
                theta = CORRECTIONS[method](nb, **params)
                for t in thresholds:
                    pred = nnppi.decide(theta, t)
                    score = float(f1_score(cv.cal.y, pred, average="weighted", sample_weight=cv.weights,
                                           zero_division=0))
                    table.append(Choice(method, k, final, float(t), score))
    return table


def _cross_fitted(
    cv: _CVFolds, method: str, k: int, candidate: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The parameters to score a candidate with and the ones its Choice keeps: a parameter fitted
    on L (given as None) is estimated per fold from the other folds for scoring, and on all of L
    for the Choice."""
    params = dict(candidate)
    final = dict(candidate)
    if method in _FITTED and params.get(_FITTED[method][0]) is None:
        name, form = _FITTED[method]
        per_row = np.empty(cv.cal.m)
        for f in range(cv.n_folds):
            per_row[cv.folds == f] = estimate_lambda(cv.cal, k, form=form, rows=cv.folds != f)
        params[name] = per_row
        final[name] = estimate_lambda(cv.cal, k, form=form)
    return params, final


def _first_best(table: list[Choice]) -> Choice:
    """The best-scoring candidate, ties going to the earliest."""
    best: Choice | None = None
    for choice in table:
        if best is None or choice.cv_score > best.cv_score:
            best = choice
    if best is None:
        raise ValueError("empty grid")
    return best
