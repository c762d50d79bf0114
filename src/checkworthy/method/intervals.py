"""Intervals around NN-PPI estimates, and what "coverage" means for them.

Coverage, as the paper counts it: an interval ``[lo, hi]`` for claim i *covers* when the gold
label ``Y_i`` (0 or 1) lies in it, ``lo <= Y_i <= hi``. The interval is thus a prediction
interval for a binary label, and all that matters for coverage is which of 0 and 1 it contains:
its *label set* (:func:`label_sets`), one of {}, {0}, {1}, {0, 1}. Empirical coverage is the
share of claims covered, overall and within each gold class; width is ``hi - lo`` (also
reported clipped to [0, 1]) and set size the number of labels contained.

Methods (registry :data:`INTERVAL_METHODS`, keyed by CLI name; all take ``(nb, alpha)`` and
return ``(lo, hi)``, centred on a point correction from :mod:`checkworthy.method.corrections`):

``z``               the paper's ``theta +/- z_{1-alpha/2} sd(r) / sqrt(k)``; reproduction only.
``t``               the same with Student-t quantiles, ``t_{k-1, 1-alpha/2}``.
``t-pred``          the Gaussian prediction interval ``theta +/- t_{k-1} sd(r) sqrt(1 + 1/k)``.
``conformal``       split conformal on L with leave-one-out neighbours, score ``|Y - theta|``.
``conformal-local`` the same, score normalised by a kNN scale (neighbour residual sd, or
                    neighbour distance).
``mondrian``        class-conditional (Mondrian) conformal: one quantile per gold class.
``mondrian-local``  Mondrian with the kNN-normalised score.
``conformal-split`` / ``mondrian-split``: exact split conformal: L is split into a reference half
                    (the only neighbours used) and a calibration half.

Guarantees (stated as scikit-learn states its calibrators' limits):

* ``z``, ``t`` are confidence intervals for the neighbourhood's mean residual under an i.i.d.
  normal model of the k residuals; ``t`` is exact under that model for every k >= 2, ``z``
  only as k grows (at k = 3 its nominal 95% is about 81%). Neither is an interval for Y,
  so neither promises any coverage of the label: the paper measures 47-69% at nominal 95%.
* ``t-pred`` is exact for a new residual under the same normal model, which binary labels
  violate; no distribution-free promise.
* conformal methods: if L and the test claims are exchangeable (drawn i.i.d. from one
  distribution), split conformal gives, for any distribution and any point correction,
  ``P(Y_test in set) >= 1 - alpha`` in finite samples, averaged over L and the test claim
  (marginal, not conditional on the claim). ``*-split`` has exactly this guarantee (when every
  claim finds k reference neighbours among its listed ones). The leave-one-out variants
  (``conformal``, ``mondrian``, ``*-local``) use all of L as neighbours and all of L to
  calibrate, which is the jackknife, not split conformal: a test claim would itself enter
  the neighbourhoods of the labelled claims that have it among their k nearest, and the
  leave-one-out scores ignore that. Each such claim can move the quantile by one rank, so the
  possible shortfall is of order (their number)/(|L| + 1), k/(|L| + 1) on average (under 1% at
  k = 10, |L| = 1,300); the synthetic tests cannot detect it (0.948-0.952 at nominal 0.95,
  the same as the exact split variants).
* ``mondrian*`` hold ``1 - alpha`` within each gold class, and only need exchangeability
  within a class. So they survive a change in class prevalence between L and the test set
  (the paper's L is class-balanced, its test sets are 27-34% check-worthy), which the
  marginal methods do not: their test coverage is the prevalence-weighted mix of their class
  coverages, which can fall below ``1 - alpha``.
* Nothing here survives a shift in what claims look like (2012 vs 2016 debates, new topics):
  coverage on such data is an empirical question.
* With Y binary and a centre in [0, 1], a set containing both labels is common when the model
  is weak; the sets are honest, not informative. A quantile that does not exist (fewer than
  ``1/alpha - 1`` calibration claims in a class) gives an infinite interval.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from checkworthy.method import nnppi
from checkworthy.method.corrections import CORRECTIONS, LabelledSet, Neighbourhood

FloatArray = NDArray[np.float64]
Correction = str | Callable[[Neighbourhood], FloatArray]
Interval = tuple[FloatArray, FloatArray]

__all__ = [
    "INTERVAL_METHODS",
    "IntervalSummary",
    "LabelledSet",
    "Neighbourhood",
    "conformal_quantile",
    "interval_conformal",
    "interval_conformal_local",
    "interval_conformal_mondrian",
    "interval_conformal_mondrian_local",
    "interval_conformal_mondrian_split",
    "interval_conformal_split",
    "interval_t",
    "interval_t_predictive",
    "interval_z",
    "label_sets",
    "summarise",
    "summarise_sets",
]


def _theta(nb: Neighbourhood, correction: Correction) -> FloatArray:
    fn = CORRECTIONS[correction] if isinstance(correction, str) else correction
    return np.asarray(fn(nb), dtype=float)


def _residual_sd(nb: Neighbourhood) -> FloatArray:
    if nb.fixed_k < 2:
        raise ValueError("a residual standard deviation needs k >= 2")
    sd: FloatArray = nb.residuals().std(axis=1, ddof=1)
    return sd


# ---------------------------------------------------------------- parametric (paper)


def interval_z(nb: Neighbourhood, alpha: float = 0.05, *, correction: Correction = "paper") -> Interval:
    """The paper's interval ``theta +/- z_{1-alpha/2} * sd(r) / sqrt(k)``.

    ``sd`` is the sample standard deviation (ddof=1) of the k neighbour residuals (k = 1 gives
    half-width 0, as in :func:`checkworthy.method.nnppi.z_interval`, which this calls). Kept to
    reproduce the paper; it is a normal-theory confidence interval for the mean residual, not
    an interval for the label, and undercovers Y badly (see the module docstring).
    """
    return nnppi.z_interval(_theta(nb, correction), nb.residuals(), alpha)


def interval_t(nb: Neighbourhood, alpha: float = 0.05, *, correction: Correction = "paper") -> Interval:
    """``theta +/- t_{k-1, 1-alpha/2} * sd(r) / sqrt(k)``: the paper's interval with t quantiles.

    Why: with k = 3 to 10 residuals the sd is itself estimated, so the z quantile is too small
    (nominal 95% covers about 81% at k = 3 even when the model holds). Exact for the mean
    residual if the k residuals are i.i.d. normal; like ``z`` it makes no promise about Y.
    Needs k >= 2.
    """
    theta = _theta(nb, correction)
    half = stats.t.ppf(1 - alpha / 2, nb.fixed_k - 1) * _residual_sd(nb) / np.sqrt(nb.fixed_k)
    return theta - half, theta + half


def interval_t_predictive(
    nb: Neighbourhood, alpha: float = 0.05, *, correction: Correction = "paper"
) -> Interval:
    """Gaussian prediction interval ``theta +/- t_{k-1, 1-alpha/2} * sd(r) * sqrt(1 + 1/k)``.

    Why: coverage is about a new label, and ``Y_i - theta_i = r_i - mean(r_S)`` has variance
    ``sigma^2 (1 + 1/k)``, not ``sigma^2 / k``. Exact for i.i.d. normal residuals; residuals of
    binary labels are not normal, so on real data this is a heuristic (no guarantee).
    """
    theta = _theta(nb, correction)
    half = stats.t.ppf(1 - alpha / 2, nb.fixed_k - 1) * _residual_sd(nb) * np.sqrt(1 + 1 / nb.fixed_k)
    return theta - half, theta + half


# ----------------------------------------------------------------------- conformal


def conformal_quantile(scores: ArrayLike, alpha: float) -> float:
    """The ``ceil((1 - alpha)(m + 1))``-th smallest of m calibration scores (inf if > m).

    This is the split-conformal threshold: a new exchangeable score is at most it with
    probability >= 1 - alpha (and < 1 - alpha + 1/(m + 1) without ties).
    """
    s = np.sort(np.asarray(scores, dtype=float))
    rank = int(np.ceil((1 - alpha) * (len(s) + 1) - 1e-9))
    return float(s[rank - 1]) if 1 <= rank <= len(s) else float("inf")


def _scale(nb: Neighbourhood, scale: str, beta: float, ref: float | None) -> FloatArray:
    if scale == "residual-sd":
        sd_scale: FloatArray = _residual_sd(nb) * np.sqrt(1 + 1 / nb.fixed_k) + beta
        return sd_scale
    d = nb.distances().mean(axis=1)  # "distance": ConformalScore admits no other scale
    scaled: FloatArray = np.exp(beta * (d / ref - 1))
    return scaled


@dataclass(frozen=True)
class ConformalScore:
    """The non-conformity score: marginal or class-conditional (``mondrian``), and its normalisation
    ``s`` (``scale``: None, ``residual-sd`` or ``distance``, with ``beta``). Checked when made."""

    mondrian: bool = False
    scale: str | None = None
    beta: float = 0.0

    def __post_init__(self) -> None:
        if self.scale not in (None, "residual-sd", "distance"):
            raise ValueError(f"unknown scale {self.scale!r}: use 'residual-sd' or 'distance'")


def _conformal(
    query: Neighbourhood,
    calib: Neighbourhood,
    y_calib: NDArray[np.int_],
    alpha: float,
    correction: Correction,
    score: ConformalScore,
) -> Interval:
    """Core: scores (``score``) on ``calib`` (claims with labels ``y_calib``), interval for ``query``.

    The centre is the correction as given, not clipped: clipping would tie every score of a
    theta beyond [0, 1] at the same value, and ties at the quantile make the sets needlessly
    large (measured: mean set size 1.77 vs 1.70 at k = 3 on the synthetic data).
    Marginal: score ``|Y - theta| / s``, interval ``theta +/- q s``, which contains label y
    exactly when ``|y - theta| / s <= q``. Mondrian: one-sided scores ``theta / s`` on class 0
    and ``(1 - theta) / s`` on class 1, interval ``[theta - q0 s, theta + q1 s]``, so it
    contains label y when y's score is within y's quantile: the Mondrian label set. Both are
    then made to agree with the scores exactly (:func:`_agree`).
    """
    mondrian, scale, beta = score.mondrian, score.scale, score.beta
    tq = _theta(query, correction)
    tc = _theta(calib, correction)
    if scale is None:
        sq, sc = np.ones_like(tq), np.ones_like(tc)
    else:
        ref = None
        if scale == "distance":
            ref = float(np.median(calib.distances().mean(axis=1))) or 1.0
        sq, sc = _scale(query, scale, beta, ref), _scale(calib, scale, beta, ref)
    with np.errstate(invalid="ignore"):
        if not mondrian:
            q = conformal_quantile(np.abs(y_calib - tc) / sc, alpha)
            lo, hi = tq - q * sq, tq + q * sq
            admit0, admit1 = np.abs(tq) / sq <= q, np.abs(1 - tq) / sq <= q
        else:
            q0 = conformal_quantile((tc / sc)[y_calib == 0], alpha)
            q1 = conformal_quantile(((1 - tc) / sc)[y_calib == 1], alpha)
            lo, hi = tq - q0 * sq, tq + q1 * sq
            admit0, admit1 = tq / sq <= q0, (1 - tq) / sq <= q1
    return _agree(lo, hi, admit0, admit1)


def _agree(lo: FloatArray, hi: FloatArray, admit0: NDArray[np.bool_], admit1: NDArray[np.bool_]) -> Interval:
    """Make ``[lo, hi]`` contain label y exactly when its score admits it.

    Why: with few distinct theta values (a constant or coarse score, small k) many test scores
    equal the quantile exactly, and ``theta + q`` can round to just below 1 (measured: 13% of
    ClaimBuster positives lost at k = 3). A Mondrian centre outside [0, 1] can also leave an
    admitted label outside ``[theta - q0, theta + q1]``. Bounds move only to reach or leave
    the label concerned.
    """
    lo, hi = lo.copy(), hi.copy()
    for y, admit in ((0.0, admit0), (1.0, admit1)):
        lo = np.where(admit, np.minimum(lo, y), lo)
        hi = np.where(admit, np.maximum(hi, y), hi)
        wrong = ~admit & (lo <= y) & (y <= hi)
        near_lo = np.abs(lo - y) <= np.abs(hi - y)
        lo = np.where(wrong & near_lo, np.nextafter(y, np.inf), lo)
        hi = np.where(wrong & ~near_lo, np.nextafter(y, -np.inf), hi)
    return lo, hi


def interval_conformal(
    nb: Neighbourhood, alpha: float = 0.05, *, correction: Correction = "paper"
) -> Interval:
    """Conformal interval for Y from leave-one-out scores ``|Y_j - theta_j|`` on L.

    Each labelled claim j gets ``theta_j`` from its leave-one-out neighbours (never itself);
    the interval is ``theta +/- q`` with q the conformal quantile of those scores, so it
    contains label y iff ``|y - theta| <= q``. Guarantee: ``P(Y in interval) >= 1 - alpha``
    marginally, under exchangeability of L and the test claims, up to the leave-one-out
    shortfall described in the module docstring. Every claim gets the same half-width.
    """
    calib = Neighbourhood.loo(nb.cal, nb.k)
    return _conformal(nb, calib, nb.cal.y, alpha, correction, ConformalScore())


def interval_conformal_local(
    nb: Neighbourhood,
    alpha: float = 0.05,
    *,
    correction: Correction = "paper",
    scale: str = "residual-sd",
    beta: float = 0.05,
) -> Interval:
    """Locally adaptive conformal: score ``|Y - theta| / s``, interval ``theta +/- q s``.

    ``scale="residual-sd"``: ``s = sd(r_S) sqrt(1 + 1/k) + beta``, the paper's own dispersion
    of the neighbours' residuals (ddof=1), so neighbourhoods that agree get narrow intervals;
    ``beta > 0`` keeps s positive when the k residuals are equal. ``scale="distance"``:
    ``s = exp(beta * (mean_dist / median_L(mean_dist) - 1))`` (Papadopoulos et al., 2011), wider
    far from L; pass ``beta`` of order 1 for it. Same marginal guarantee as
    :func:`interval_conformal` whatever s is (s uses no label of the claim it scales). A scale
    that is a function of theta alone cannot change the label sets for a binary Y; s must
    carry other information. Needs k >= 2 for ``residual-sd``.
    """
    calib = Neighbourhood.loo(nb.cal, nb.k)
    return _conformal(nb, calib, nb.cal.y, alpha, correction, ConformalScore(scale=scale, beta=beta))


def interval_conformal_mondrian(
    nb: Neighbourhood, alpha: float = 0.05, *, correction: Correction = "paper"
) -> Interval:
    """Class-conditional (Mondrian) conformal interval for Y.

    Quantile ``q0`` of ``theta_j`` over labelled claims with Y = 0 and ``q1`` of ``1 - theta_j``
    over those with Y = 1 (leave-one-out theta); interval
    ``[theta - q0, theta + q1]``. Guarantee: ``P(Y in interval | Y = y) >= 1 - alpha`` for each
    class y, under exchangeability within each class, so it holds when the class prevalence
    differs between L and the test claims (up to the leave-one-out shortfall). Sizes: a weak
    model gives {0, 1} to many claims; that is the price of per-class validity.
    """
    calib = Neighbourhood.loo(nb.cal, nb.k)
    return _conformal(nb, calib, nb.cal.y, alpha, correction, ConformalScore(mondrian=True))


def interval_conformal_mondrian_local(
    nb: Neighbourhood,
    alpha: float = 0.05,
    *,
    correction: Correction = "paper",
    scale: str = "residual-sd",
    beta: float = 0.05,
) -> Interval:
    """Mondrian conformal with the kNN-normalised scores of :func:`interval_conformal_local`.

    Interval ``[theta - q0 s, theta + q1 s]``; per-class guarantee as
    :func:`interval_conformal_mondrian`.
    """
    calib = Neighbourhood.loo(nb.cal, nb.k)
    return _conformal(nb, calib, nb.cal.y, alpha, correction,
                      ConformalScore(mondrian=True, scale=scale, beta=beta))


def _split_reference(
    nb: Neighbourhood, ref_fraction: float, seed: int
) -> tuple[Neighbourhood, Neighbourhood, NDArray[np.int_]]:
    """Restrict every neighbour list to a random reference part R of L.

    The first k members of R in a claim's list are its k nearest in R whenever the list holds
    k of them, because the list is a nearest-first prefix over a superset of R.
    """
    cal, k = nb.cal, nb.fixed_k
    perm = np.random.default_rng(seed).permutation(cal.m)
    n_ref = int(round(ref_fraction * cal.m))
    ref, rest = np.sort(perm[:n_ref]), np.sort(perm[n_ref:])
    pos = np.full(cal.m, -1)
    pos[ref] = np.arange(len(ref))

    def restrict(
        rows: NDArray[np.int_] | None,
        nbr: NDArray[np.int_],
        dist: FloatArray | None,
        nbr_c: FloatArray | None,
    ) -> tuple[NDArray[np.int_], FloatArray | None, FloatArray | None]:
        """Each row's first k reference neighbours, and the same columns of the per-neighbour
        matrices ``dist`` and ``nbr_c`` taken from the rows ``rows`` of L."""
        mapped = pos[nbr]
        keep = mapped >= 0
        short = int((keep.sum(axis=1) < k).sum())
        if short:
            raise ValueError(
                f"{short} claims have fewer than k={k} reference neighbours among their "
                f"{nbr.shape[1]} listed; pass longer neighbour lists (about {int(4 * k / ref_fraction)})"
            )
        order = np.argsort(~keep, axis=1, kind="stable")[:, :k]
        d, c = (None if a is None else np.take_along_axis(a if rows is None else a[rows], order, axis=1)
                for a in (dist, nbr_c))
        return np.take_along_axis(mapped, order, axis=1), d, c

    r_nbr, r_dist, r_c = restrict(ref, cal.nbr[ref], cal.dist, cal.nbr_c)
    cal_ref = LabelledSet(y=cal.y[ref], c=cal.c[ref], nbr=r_nbr, dist=r_dist, nbr_c=r_c)
    q_nbr, q_dist, q_c = restrict(None, nb.nbr, nb.dist, nb.nbr_c)
    query = Neighbourhood(c=nb.c, nbr=q_nbr, cal=cal_ref, dist=q_dist, k=k, nbr_c=q_c)
    c_nbr, c_dist, c_c = restrict(rest, cal.nbr[rest], cal.dist, cal.nbr_c)
    calib = Neighbourhood(c=cal.c[rest], nbr=c_nbr, cal=cal_ref, dist=c_dist, k=k, nbr_c=c_c)
    return query, calib, cal.y[rest]


def interval_conformal_split(
    nb: Neighbourhood,
    alpha: float = 0.05,
    *,
    correction: Correction = "paper",
    mondrian: bool = False,
    ref_fraction: float = 0.5,
    seed: int = 0,
) -> Interval:
    """Exact split conformal: neighbours from a reference part of L, scores on the rest.

    L is split at random (``seed``) into a reference part R (``ref_fraction``) and a calibration
    part C. Every claim, test or in C, is corrected with its k nearest neighbours in R only, so
    the scores of C and of a test claim are the same fixed function of (claim, label) and the
    textbook guarantee holds exactly: ``P(Y in interval) >= 1 - alpha`` (per class if
    ``mondrian``) under exchangeability, in finite samples. Costs: the centre uses half the
    neighbours' pool (a different, noisier theta than the reported one) and the quantile half
    the claims. Needs neighbour lists long enough to hold k members of R (raises otherwise;
    about ``4k / ref_fraction`` columns suffice in practice).
    """
    query, calib, y_calib = _split_reference(nb, ref_fraction, seed)
    return _conformal(query, calib, y_calib, alpha, correction, ConformalScore(mondrian=mondrian))


def interval_conformal_mondrian_split(
    nb: Neighbourhood,
    alpha: float = 0.05,
    *,
    correction: Correction = "paper",
    ref_fraction: float = 0.5,
    seed: int = 0,
) -> Interval:
    """Exact class-conditional split conformal (:func:`interval_conformal_split`, ``mondrian=True``)."""
    return interval_conformal_split(
        nb, alpha, correction=correction, mondrian=True, ref_fraction=ref_fraction, seed=seed
    )


#: interval methods keyed by CLI name; each is ``f(nb, alpha=0.05, **options) -> (lo, hi)``
INTERVAL_METHODS: dict[str, Callable[..., Interval]] = {
    "z": interval_z,
    "t": interval_t,
    "t-pred": interval_t_predictive,
    "conformal": interval_conformal,
    "conformal-local": interval_conformal_local,
    "mondrian": interval_conformal_mondrian,
    "mondrian-local": interval_conformal_mondrian_local,
    "conformal-split": interval_conformal_split,
    "mondrian-split": interval_conformal_mondrian_split,
}


# ------------------------------------------------------------------------- summaries


def label_sets(lo: ArrayLike, hi: ArrayLike) -> NDArray[np.bool_]:
    """(n, 2) membership of labels 0 and 1 in ``[lo, hi]``: the interval read as a label set."""
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    return np.stack([(lo <= 0) & (0 <= hi), (lo <= 1) & (1 <= hi)], axis=1)


@dataclass(frozen=True)
class IntervalSummary:
    """Coverage of the gold label, overall and per class, with efficiency measures.

    ``mean_width`` is ``mean(hi - lo)`` (inf if any interval is infinite); ``mean_width_01`` the
    width of ``[lo, hi]`` intersected with [0, 1]; ``mean_set_size`` the mean number of labels
    contained (0 to 2). Width and set size are NaN when not applicable (prediction sets).
    """

    n: int
    coverage: float
    coverage_0: float
    coverage_1: float
    mean_set_size: float
    singleton_rate: float
    empty_rate: float
    mean_width: float = float("nan")
    mean_width_01: float = float("nan")


def summarise_sets(sets: ArrayLike, y: ArrayLike) -> IntervalSummary:
    """Coverage and size of (n, 2) boolean label sets against gold labels ``y``."""
    s = np.asarray(sets, dtype=bool)
    y = np.asarray(y, dtype=int)
    covered = s[np.arange(len(y)), y]
    size = s.sum(axis=1)

    def share(mask: NDArray[np.bool_]) -> float:
        return float(covered[mask].mean()) if mask.any() else float("nan")

    return IntervalSummary(
        n=len(y),
        coverage=float(covered.mean()) if len(y) else float("nan"),
        coverage_0=share(y == 0),
        coverage_1=share(y == 1),
        mean_set_size=float(size.mean()) if len(y) else float("nan"),
        singleton_rate=float((size == 1).mean()) if len(y) else float("nan"),
        empty_rate=float((size == 0).mean()) if len(y) else float("nan"),
    )


def summarise(lo: ArrayLike, hi: ArrayLike, y: ArrayLike) -> IntervalSummary:
    """Coverage (gold label in ``[lo, hi]``), per-class coverage, widths and set sizes."""
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    base = summarise_sets(label_sets(lo, hi), y)
    width = hi - lo
    width01 = np.clip(np.minimum(hi, 1) - np.maximum(lo, 0), 0, None)
    return IntervalSummary(
        **{**base.__dict__, "mean_width": float(width.mean()), "mean_width_01": float(width01.mean())}
    )
