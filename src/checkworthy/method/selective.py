"""Decide or review: which decisions may be taken without a person, with a finite-sample promise.

A claim is decided automatically when its theta is far enough from the threshold; the margin is
chosen on L by Learn-then-Test (Angelopoulos, Bates, Candès, Jordan and Lei, "Learn then Test:
calibrating predictive algorithms to achieve risk control", 2021), so that with probability at
least ``1 - delta`` over L the chosen rule's risk is at most ``max_risk``. Two risks:

``error``  the share of wrong decisions among the claims decided automatically: claims with
           ``|theta - threshold| >= margin`` are decided, the rest go to a person;
``miss``   the share of check-worthy claims among those dismissed automatically: claims decided
           check-worthy go on as such, and a dismissal is automatic only where
           ``theta <= threshold - margin``; the rest go to a person.

Procedure: for each margin of a fixed grid, from the widest (fewest automated) to 0, the null
"risk > max_risk" is tested with the exact binomial p-value of the losses among L's automated
claims (given how many L automates, they are a sample from the automated part of the
distribution). Margins whose automated set is too small to ever reject are skipped (that count
depends on theta alone, not on labels); from the first testable margin on, fixed-sequence testing
rejects while ``p <= delta`` and stops at the first failure, which controls the family-wise
error at ``delta``. The chosen margin is the last rejected; with none, every claim (``error``) or
every dismissal (``miss``) goes to a person.

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
from scipy.stats import binom

from checkworthy.method.drift import CALM, DRIFTING, FAR

RISKS = ("error", "miss")
#: what each risk bounds, in words
RISK_WORDS = {"error": "wrong decisions among the automatic ones",
              "miss": "check-worthy claims among the automatic dismissals"}
#: why drift sends a claim to a person whatever its theta, by its drift status
DRIFT_WORDS = {
    FAR: "far from every labelled claim: beyond the labelled set's radius, in a batch that drifted",
    DRIFTING: "in a batch of another kind than the labelled set, most of it beyond its radius, though "
              "this claim lies within it",
}
#: margins tried, widest first: |theta - threshold| from 0.5 down to 0 in steps of 0.01
GRID = tuple(round(0.5 - 0.01 * i, 2) for i in range(51))


@dataclass(frozen=True)
class ReviewRule:
    """The chosen margin (None: nothing decided automatically that the risk concerns) and what
    L showed at it: claims it automates, their realised risk and the test's p-value."""

    risk: str
    max_risk: float
    delta: float
    threshold: float
    margin: float | None
    n_labelled: int
    n_automated_labelled: int
    risk_labelled: float | None
    p_value: float | None

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
        bound = (f"{RISK_WORDS[self.risk]} <= {self.max_risk:g} with probability >= {1 - self.delta:.0%} "
                 "over L, Learn-then-Test")
        out = []
        for value, flagged, st in zip(t.tolist(), (self.review(t) == 1).tolist(), drift.tolist()):
            if st != CALM:
                out.append(f"to a person ({DRIFT_WORDS[st]}; the bound on L does not reach it)")
                continue
            if self.risk == "miss" and value >= self.threshold:
                why = "decided check-worthy: it goes on as such"
            elif self.margin is None:
                why = "no margin passed the test on L"
            else:
                why = (f"|theta - threshold| = {abs(value - self.threshold):.4f} {'<' if flagged else '>='} "
                       f"margin {self.margin:.2f}")
            out.append(f"{'to a person' if flagged else 'decided automatically'} ({why}; {bound})")
        return out

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any]) -> ReviewRule:
        """The rule as :meth:`as_dict` wrote it (other keys, such as the automated share, ignored)."""
        return cls(**{f.name: stored[f.name] for f in fields(cls)})


def review_priority(theta: ArrayLike, threshold: float) -> NDArray[np.float64]:
    """How much a person's label would help: 1 at the threshold, falling linearly to 0 at the
    farthest possible theta (0 or 1), so the least certain decisions are reviewed first."""
    t = np.clip(np.asarray(theta, dtype=float), 0.0, 1.0)
    return 1.0 - np.abs(t - threshold) / max(threshold, 1.0 - threshold)


def needs_review(theta: ArrayLike, threshold: float, risk: str, margin: float | None) -> NDArray[np.int_]:
    """The rule applied: 1 = to a person (see the module's two risks), 0 = decided automatically."""
    t = np.asarray(theta, dtype=float)
    if risk == "error":
        auto = np.zeros(t.shape, bool) if margin is None else np.abs(t - threshold) >= margin - 1e-12
    elif risk == "miss":
        dismissed = t < threshold
        auto = ~dismissed | (False if margin is None else t <= threshold - margin + 1e-12)
    else:
        raise ValueError(f"unknown risk {risk!r}; choose from {list(RISKS)}")
    return (~auto).astype(np.int_)


def _losses(theta: np.ndarray, y: np.ndarray, threshold: float, risk: str, margin: float | None,
            held: np.ndarray | None = None) -> tuple[int, int]:
    """(claims the margin puts at risk, losses among them); ``held`` claims are never automatic."""
    auto = needs_review(theta, threshold, risk, margin) == 0
    if held is not None:
        auto &= ~held
    if risk == "error":
        return int(auto.sum()), int((auto & ((theta >= threshold).astype(int) != y)).sum())
    dismissed = auto & (theta < threshold)
    return int(dismissed.sum()), int((dismissed & (y == 1)).sum())


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
               max_risk: float = 0.1, delta: float = 0.1, grid: tuple[float, ...] = GRID) -> ReviewRule:
    """Choose the margin on L by Learn-then-Test (fixed sequence, exact binomial p-values).

    Parameters
    ----------
    theta_l : L's theta, each computed without its own label.
    y_l : L's labels.
    threshold : the decision threshold on theta.
    risk : ``error`` or ``miss``.
    max_risk, delta : the bound and the chance, over L, that the chosen rule exceeds it.
    """
    if risk not in RISKS:
        raise ValueError(f"unknown risk {risk!r}; choose from {list(RISKS)}")
    if not 0 < max_risk < 1 or not 0 < delta < 1:
        raise ValueError("max_risk and delta must lie in (0, 1)")
    theta = np.asarray(theta_l, dtype=float)
    y = np.asarray(y_l, dtype=int)
    n_min = int(np.ceil(np.log(delta) / np.log(1 - max_risk)))  # fewer cannot reject, even loss-free
    chosen: tuple[float, int, int, float] | None = None
    for margin in grid:
        n, lost = _losses(theta, y, threshold, risk, margin)
        if n < n_min:
            if chosen is None:
                continue  # not yet testable: skipped, never a failure
            break
        p = float(binom.cdf(lost, n, max_risk))
        if p > delta:
            break
        chosen = (margin, n, lost, p)
    if chosen is None:
        return ReviewRule(risk, max_risk, delta, threshold, None, len(y), 0, None, None)
    margin, n, lost, p = chosen
    return ReviewRule(risk, max_risk, delta, threshold, margin, len(y), n, lost / n, p)
