"""Decide or review: which decisions may be taken without a person, with a finite-sample promise.

A claim is decided automatically when its theta is far enough from the threshold; the margin is
chosen on L by Learn-then-Test (Angelopoulos, Bates, Candès, Jordan and Lei, "Learn then Test:
calibrating predictive algorithms to achieve risk control", 2021), so that with probability at
least ``1 - delta`` over L the chosen rule's risk is at most ``max_risk``. Two risks:

``error``  the share of wrong decisions among the claims decided automatically: claims whose
           distance from the threshold (:func:`distance`) is at least the margin are decided, the
           rest go to a person;
``miss``   the share of check-worthy claims among those dismissed automatically: claims decided
           check-worthy go on as such, and a dismissal is automatic only where the distance of
           ``theta < threshold`` is at least the margin; the rest go to a person.

The distance is ``|theta - threshold|`` at the paper's threshold of 0.5. Elsewhere (the F1 cut,
the batch's prior) each side is scaled to the same length, so that a margin takes the same share of
the room below the threshold as above it: with a symmetric margin, a cut at 0.25 leaves the side
below it no room beyond a margin of 0.25, the first margins tested automate only the claims above
the cut, and their errors stop the test before the confident dismissals are reached (measured
through predict at the F1 cut: nothing automated in English, Bulgarian and Turkish tweets, against
52%, 68% and 26% with the scaled distance).

Procedure: for each margin of a fixed grid, from the widest (fewest automated) to 0, the null
"risk > max_risk" is tested with the exact binomial p-value of the losses among L's automated
claims (given how many L automates, they are a sample from the automated part of the
distribution). Margins whose automated set is too small to ever reject are skipped (that count
depends on theta alone, not on labels); from the first testable margin on, fixed-sequence testing
rejects while ``p <= delta`` and stops at the first failure, which controls the family-wise
error at ``delta``. The chosen margin is the last rejected; with none, every claim (``error``) or
every dismissal (``miss``) goes to a person.

Certified on the labelled claims the batch resembles. L may mix kinds of claim (many debates, a
few labelled tweets) while a batch is of one kind: a rule certified on all of L then speaks for
L's mixture, not for the batch (measured: tweets against 900 debates and 50-800 labelled tweets,
error 0.12-0.54 among the tweets decided automatically against a bound of 0.1). So the test is
weighted by a kNN density ratio (:func:`neighbour_weights`, Kremer, Steenstrup Pedersen and Igel,
"Nearest neighbor density ratio estimation for large-scale applications in astronomy", 2015):
each labelled claim weighs as often as it is among the batch's k nearest labelled claims, the
kNN NN-PPI already computes. The losses of the automated labelled claims are averaged with those
weights and tested as a binomial of an effective size, the importance-weighted risk control of
covariate shift (Tibshirani, Foygel Barber, Candès and Ramdas, "Conformal prediction under
covariate shift", 2019; Park, Dobriban, Lee and Bastani, "PAC prediction sets under covariate
shift", 2022): Kish's ``n_eff = (sum w)^2 / sum w^2`` (Kish, "Survey Sampling", 1965) of the
automated claims, at most L's ``n_eff`` times the share of the weight they hold (automated claims
the batch barely resembles count for little even when their weights are even: measured, 50
labelled tweets beside 900 debates otherwise let a margin pass on the debates among the tweets'
neighbours, erring on a third of the tweets). With equal weights
it is the test above; with few labelled claims like the batch the effective size is small and
nothing is decided automatically: the honest answer, since the labels say little about this kind.
The weighted test is approximate (the density ratio is estimated, Kish's size replaces the count):
``tests/test_selective_shift.py`` measures it.

Guarantee and limits: exchangeability of L and the claims decided. A batch that drifted from L
(:mod:`checkworthy.method.drift`) breaks it: its claims beyond L's radius (all its claims, when
it is of another kind) go to a person whatever their theta (``status``), and no promise is made
for them. L's theta must not have seen its own label (leave-one-out neighbours, out-of-fold
predictors). A balanced L against a stream with fewer check-worthy claims breaks exchangeability:
``miss`` then errs on the safe side (fewer check-worthy claims among the dismissed than in L),
``error`` may not. Pure: arrays in and out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import betainc

from checkworthy.method.drift import CALM, DRIFTING, FAR, NEW_LANGUAGE

RISKS = ("error", "miss")
#: what each risk bounds, in words
RISK_WORDS = {"error": "wrong decisions among the automatic ones",
              "miss": "check-worthy claims among the automatic dismissals"}
#: why drift sends a claim to a person whatever its theta, by its drift status
DRIFT_WORDS = {
    FAR: "far from every labelled claim: beyond the labelled set's radius, in a batch that drifted",
    DRIFTING: "in a batch of another kind than the labelled set, most of it beyond its radius, though "
              "this claim lies within it",
    NEW_LANGUAGE: "in a language none of the labelled claims is in",
}
#: margins tried, widest first: :func:`distance` from 0.5 down to 0 in steps of 0.01
GRID = tuple(round(0.5 - 0.01 * i, 2) for i in range(51))


def min_effective_n(max_risk: float, delta: float) -> int:
    """The fewest (effective) labelled claims a margin must automate for the test to reject, even
    with no loss among them."""
    return int(np.ceil(np.log(delta) / np.log(1 - max_risk)))


def neighbour_weights(neighbour_positions: ArrayLike, n_labelled: int) -> NDArray[np.float64]:
    """The kNN density ratio of a batch against L: each labelled claim's count among the batch's
    neighbour lists (``neighbour_positions``: (n, k) positions in L of each batch claim's k nearest
    labelled claims), scaled to mean 1 over L (all ones when the batch spreads over L as L itself
    does; zeros when no batch claim is given)."""
    pos = np.asarray(neighbour_positions, dtype=np.int64).ravel()
    counts = np.bincount(pos, minlength=n_labelled).astype(float)
    return counts * n_labelled / pos.size if pos.size else counts


def kish(weights: ArrayLike) -> float:
    """Kish's effective sample size of weights: ``(sum w)^2 / sum w^2`` (0 for none)."""
    w = np.asarray(weights, dtype=float)
    sq = float(np.sum(w * w))
    return float(np.sum(w)) ** 2 / sq if sq > 0 else 0.0


@dataclass(frozen=True)
class ReviewRule:
    """The chosen margin (None: nothing decided automatically that the risk concerns) and what
    L showed at it: claims it automates, their realised risk and the test's p-value; and what it
    was certified on: ``n_neighbours`` labelled claims with a weight (the batch's neighbours) and
    their effective size ``n_effective`` (both None: all of L, unweighted)."""

    risk: str
    max_risk: float
    delta: float
    threshold: float
    margin: float | None
    n_labelled: int
    n_automated_labelled: int
    risk_labelled: float | None
    p_value: float | None
    n_neighbours: int | None = None
    n_effective: float | None = None
    #: the threshold was chosen on the same labelled claims (the F1 cut, or the batch prior's, which
    #: reads L's share; set by the caller, who chose it): the rules tested were not fixed before L was
    #: seen, so the promise is approximate, and says so
    threshold_from_labels: bool = False

    def review(self, theta: ArrayLike, status: ArrayLike | None = None) -> NDArray[np.int_]:
        """1 where a person should decide the claim, 0 where it is decided automatically; with
        ``status`` (:func:`checkworthy.method.drift.drift_status`), a claim that drift holds back
        goes to a person, whatever its theta."""
        flags = needs_review(theta, self.threshold, self.risk, self.margin)
        return flags if status is None else flags | (np.asarray(status) != CALM).astype(np.int_)

    def reason(self, theta: float) -> str:
        """Whether a person should decide a claim of this theta, and why, in one line."""
        return self.reasons([theta])[0]

    def reasons(self, theta: ArrayLike, status: ArrayLike | None = None) -> list[str]:
        """:meth:`reason` for many claims at once; ``status`` as in :meth:`review`."""
        t = np.asarray(theta, dtype=float)
        drift = np.full(t.shape, CALM) if status is None else np.asarray(status)
        bound = self.promise()
        out = []
        for value, flagged, st in zip(t.tolist(), (self.review(t) == 1).tolist(), drift.tolist()):
            if st != CALM:
                out.append(f"to a person ({DRIFT_WORDS[st]}; the bound on L does not reach it)")
                continue
            if self.risk == "miss" and value >= self.threshold:
                why = "decided check-worthy: it goes on as such"
            elif self.margin is None:
                why = self.none_why()
            else:
                side = float(side_length(value, self.threshold))
                measure = "|theta - threshold|" + ("" if side == 1.0 else f" / {side:.2f}")
                why = (f"{measure} = {float(distance(value, self.threshold)):.4f} "
                       f"{'<' if flagged else '>='} margin {self.margin:.2f}")
            out.append(f"{'to a person' if flagged else 'decided automatically'} ({why}; {bound})")
        return out

    def certified_on(self) -> str:
        """What the promise was certified on, in words."""
        if self.n_neighbours is None:
            return f"on all {self.n_labelled} labelled claims"
        return (f"on the {self.n_neighbours} labelled claims nearest the batch it was chosen for "
                f"(effective n {self.n_effective:.0f})")

    def promise(self) -> str:
        """The Learn-then-Test promise and what it was certified on, in one phrase."""
        approximate = (", approximate: the threshold was chosen on the same labelled claims"
                       if self.threshold_from_labels else "")
        return (f"{RISK_WORDS[self.risk]} <= {self.max_risk:g} with probability >= {1 - self.delta:.0%} "
                f"over L, Learn-then-Test {self.certified_on()}{approximate}")

    def too_few(self) -> bool:
        """Whether no margin could pass because too few labelled claims are like the batch."""
        return (self.margin is None and self.n_effective is not None
                and self.n_effective < min_effective_n(self.max_risk, self.delta))

    def none_why(self) -> str:
        """Why nothing the risk concerns is decided automatically (the rule has no margin)."""
        if self.too_few():
            return (f"none automated: too few labelled claims like this batch (effective n "
                    f"{self.n_effective:.0f} of the {min_effective_n(self.max_risk, self.delta)} needed; "
                    "label some: checkworthy review export)")
        if self.n_neighbours is not None:
            return (f"none automated: no margin passed the test on the {self.n_neighbours} labelled claims "
                    "like this batch (label more of its kind: checkworthy review export)")
        return "no margin passed the test on L"

    def as_dict(self) -> dict[str, object]:
        """The rule as a run stores it; ``threshold_from_labels`` only where set (the rules stored
        before it existed, and every rule at a fixed threshold, read the same)."""
        out = asdict(self)
        if not self.threshold_from_labels:
            del out["threshold_from_labels"]
        return out

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any]) -> ReviewRule:
        """The rule as :meth:`as_dict` wrote it (other keys, such as the automated share, ignored;
        a rule stored before rules were certified on the batch was certified on all of L)."""
        return cls(**{f.name: stored[f.name] for f in fields(cls) if f.name in stored})


def review_priority(theta: ArrayLike, threshold: float) -> NDArray[np.float64]:
    """How much a person's label would help: 1 at the threshold, falling linearly to 0 at the
    farthest possible theta (0 or 1), so the least certain decisions are reviewed first."""
    t = np.clip(np.asarray(theta, dtype=float), 0.0, 1.0)
    priority: NDArray[np.float64] = 1.0 - np.abs(t - threshold) / max(threshold, 1.0 - threshold)
    return priority


def side_length(theta: ArrayLike, threshold: float) -> NDArray[np.float64]:
    """Twice the length of the side of the threshold each theta lies on (``2 * threshold`` below
    it, ``2 * (1 - threshold)`` at or above it): what :func:`distance` divides by, 1 at 0.5."""
    t = np.asarray(theta, dtype=float)
    side: NDArray[np.float64] = 2.0 * np.where(t < threshold, threshold, 1.0 - threshold)
    return side


def distance(theta: ArrayLike, threshold: float) -> NDArray[np.float64]:
    """How far theta lies from the threshold, each side scaled to length 0.5: ``|theta - threshold|``
    over :func:`side_length`; ``|theta - 0.5|`` at a threshold of 0.5. The margin is compared to it."""
    t = np.asarray(theta, dtype=float)
    d: NDArray[np.float64] = np.abs(t - threshold) / np.maximum(side_length(t, threshold), 1e-12)
    return d


def needs_review(theta: ArrayLike, threshold: float, risk: str, margin: float | None) -> NDArray[np.int_]:
    """The rule applied: 1 = to a person (see the module's two risks), 0 = decided automatically."""
    t = np.asarray(theta, dtype=float)
    far = np.zeros(t.shape, bool) if margin is None else distance(t, threshold) >= margin - 1e-12
    if risk == "error":
        auto = far
    elif risk == "miss":
        auto = (t >= threshold) | far
    else:
        raise ValueError(f"unknown risk {risk!r}; choose from {list(RISKS)}")
    return (~auto).astype(np.int_)


def _at_risk(theta: np.ndarray, y: np.ndarray, threshold: float, risk: str, margin: float | None,
             held: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(the claims the margin puts at risk, the losses among them), as masks; ``held`` claims are
    never automatic."""
    auto = needs_review(theta, threshold, risk, margin) == 0
    if held is not None:
        auto &= ~held
    if risk == "error":
        return auto, auto & ((theta >= threshold).astype(int) != y)
    dismissed = auto & (theta < threshold)
    return dismissed, dismissed & (y == 1)


def _losses(theta: np.ndarray, y: np.ndarray, threshold: float, risk: str, margin: float | None,
            held: np.ndarray | None = None) -> tuple[int, int]:
    """(claims the margin puts at risk, losses among them); ``held`` claims are never automatic."""
    at_risk, lost = _at_risk(theta, y, threshold, risk, margin, held)
    return int(at_risk.sum()), int(lost.sum())


def binomial_p(lost: float, n: float, max_risk: float) -> float:
    """P(Binomial(n, max_risk) <= lost), continued to real ``lost`` and ``n`` (an effective count) by
    the regularised incomplete beta; the exact binomial p-value at whole numbers."""
    return 1.0 if lost >= n else float(betainc(n - lost, lost + 1, 1 - max_risk))


def realised(theta: ArrayLike, y: ArrayLike, threshold: float, risk: str, margin: float | None,
             status: ArrayLike | None = None) -> tuple[float, float | None]:
    """A rule on labelled claims: the share it decides automatically, and the risk realised among
    the claims the risk concerns (all automatic decisions, or the automatic dismissals; None when
    there are none); the claims drift holds back (``status``, as in :meth:`ReviewRule.review`)
    go to a person."""
    t, labels = np.asarray(theta, dtype=float), np.asarray(y, dtype=int)
    held = None if status is None else np.asarray(status) != CALM
    auto = needs_review(t, threshold, risk, margin) == 0
    share = float(np.mean(auto if held is None else auto & ~held)) if len(t) else 0.0
    n, lost = _losses(t, labels, threshold, risk, margin, held)
    return share, (lost / n if n else None)


def fit_review(theta_l: ArrayLike, y_l: ArrayLike, threshold: float = 0.5, risk: str = "error",
               max_risk: float = 0.1, delta: float = 0.1, weights: ArrayLike | None = None) -> ReviewRule:
    """Choose the margin of :data:`GRID` on L by Learn-then-Test (fixed sequence, binomial p-values).

    Parameters
    ----------
    theta_l : L's theta, each computed without its own label.
    y_l : L's labels.
    threshold : the decision threshold on theta.
    risk : ``error`` or ``miss``.
    max_risk, delta : the bound and the chance, over L, that the chosen rule exceeds it.
    weights : each labelled claim's weight for the batch (:func:`neighbour_weights`); the test then
        uses the weighted loss among the automated claims and their effective size (Kish's, at most
        L's times the share of the weight they hold). None: all of L, equally (the exact binomial
        test).
    """
    if risk not in RISKS:
        raise ValueError(f"unknown risk {risk!r}; choose from {list(RISKS)}")
    if not 0 < max_risk < 1 or not 0 < delta < 1:
        raise ValueError("max_risk and delta must lie in (0, 1)")
    theta = np.asarray(theta_l, dtype=float)
    y = np.asarray(y_l, dtype=int)
    w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != y.shape or (w < 0).any():
        raise ValueError("weights must be one non-negative number a labelled claim")
    n_min = min_effective_n(max_risk, delta)  # fewer cannot reject, even loss-free
    n_all, total = kish(w), float(np.sum(w))
    chosen: tuple[float, int, float, float] | None = None
    for margin in GRID:
        at_risk, lost = _at_risk(theta, y, threshold, risk, margin)
        wa = w[at_risk]
        n = min(kish(wa), n_all * float(np.sum(wa)) / total) if total > 0 else 0.0
        if n < n_min:
            if chosen is None:
                continue  # not yet testable: skipped, never a failure
            break
        share = float(np.sum(w[lost]) / np.sum(wa))
        p = binomial_p(share * n, n, max_risk)
        if p > delta:
            break
        chosen = (margin, int(np.count_nonzero(wa)), share, p)
    n_neighbours, n_effective = ((None, None) if weights is None
                                 else (int(np.count_nonzero(w)), round(kish(w), 1)))
    if chosen is None:
        return ReviewRule(risk, max_risk, delta, threshold, None, len(y), 0, None, None,
                          n_neighbours=n_neighbours, n_effective=n_effective)
    margin, n, share, p = chosen
    return ReviewRule(risk, max_risk, delta, threshold, margin, len(y), n, share, p,
                      n_neighbours=n_neighbours, n_effective=n_effective)
