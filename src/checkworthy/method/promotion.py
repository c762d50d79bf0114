"""Whether a challenger model replaces a lineage's champion: cross-validated decisions on L and a
paired bootstrap of their positive-class F1 difference. Pure: arrays in, figures out.

Both models' scores on L must be honest (from a model that never saw the claim: the challenger's
out-of-fold scores, the champion's own). Each is Platt-scaled on all folds but one and decides the
claims of that fold (the same folds for both), so each claim has one decision per model, made as
on a batch neither calibration saw. Resampling the claims (both models' decisions together, so the
difference keeps their pairing) gives an interval for F1(challenger) - F1(champion); the challenger
is promoted only when the whole interval lies above 0, so a champion is never replaced by a model
the labels cannot tell is better.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.metrics import f1_score

from checkworthy.method.calibrators import PlattCalibrator
from checkworthy.method.metrics import roc_auc

#: bootstrap resamples and the interval's level
N_BOOT = 2000
LEVEL = 0.95


def fold_of(n: int, folds: Sequence[tuple[NDArray[np.int_], NDArray[np.int_]]]) -> NDArray[np.int_]:
    """Each claim's fold (the index of the split that tests it)."""
    out = np.full(n, -1)
    for i, (_, test) in enumerate(folds):
        out[test] = i
    if (out < 0).any():
        raise ValueError("the folds leave a claim untested")
    return out


def cross_fitted_decisions(scores: ArrayLike, y: ArrayLike, fold: ArrayLike, threshold: float = 0.5
                           ) -> NDArray[np.int_]:
    """Each claim decided by Platt scaling fitted on the other folds' claims."""
    c, labels, f = np.asarray(scores, dtype=float), np.asarray(y, dtype=int), np.asarray(fold)
    out = np.zeros(len(c), dtype=int)
    for k in np.unique(f):
        test = f == k
        out[test] = PlattCalibrator().fit(c[~test], labels[~test]).predict(c[test], threshold)
    return out


def paired_bootstrap(y: ArrayLike, challenger: ArrayLike, champion: ArrayLike, *, n_boot: int = N_BOOT,
                     level: float = LEVEL, seed: int = 0) -> dict[str, float]:
    """Positive-class F1 of both decision vectors on the same claims, their difference and its
    percentile interval over ``n_boot`` resamples of the claims."""
    labels, a, b = (np.asarray(v, dtype=int) for v in (y, challenger, champion))
    rng = np.random.default_rng(seed)
    diffs = np.empty(n_boot)
    for i in range(n_boot):
        idx = rng.integers(0, len(labels), len(labels))
        diffs[i] = (f1_score(labels[idx], a[idx], zero_division=0)
                    - f1_score(labels[idx], b[idx], zero_division=0))
    f1_a = float(f1_score(labels, a, zero_division=0))
    f1_b = float(f1_score(labels, b, zero_division=0))
    tail = (1 - level) / 2
    return {"f1_challenger": f1_a, "f1_champion": f1_b, "difference": f1_a - f1_b,
            "low": float(np.quantile(diffs, tail)), "high": float(np.quantile(diffs, 1 - tail)),
            "level": level, "n_boot": n_boot, "n": len(labels)}


@dataclass(frozen=True)
class PromotionRule:
    """How a promotion is decided: the decision threshold on the Platt-scaled scores, and the paired
    bootstrap's resamples, interval level and seed. Checked when made."""

    threshold: float = 0.5
    n_boot: int = N_BOOT
    level: float = LEVEL
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.threshold < 1:
            raise ValueError(f"threshold must lie between 0 and 1, got {self.threshold}")
        if self.n_boot < 1:
            raise ValueError(f"n_boot must be at least 1, got {self.n_boot}")
        if not 0 < self.level < 1:
            raise ValueError(f"level must lie between 0 and 1, got {self.level}")


def compare(y: ArrayLike, challenger: ArrayLike, champion: ArrayLike, fold: ArrayLike,
            rule: PromotionRule = PromotionRule()) -> dict[str, float | bool]:
    """The figures a promotion is decided on (by ``rule``): each model's cross-validated
    positive-class F1 and raw ROC AUC on L, the paired bootstrap interval of the F1 difference, and
    ``promote`` (the interval's lower end above 0)."""
    dec_a = cross_fitted_decisions(challenger, y, fold, rule.threshold)
    dec_b = cross_fitted_decisions(champion, y, fold, rule.threshold)
    out: dict[str, float | bool] = dict(paired_bootstrap(y, dec_a, dec_b, n_boot=rule.n_boot,
                                                         level=rule.level, seed=rule.seed))
    out["roc_auc_challenger"] = roc_auc(y, challenger)
    out["roc_auc_champion"] = roc_auc(y, champion)
    out["promote"] = bool(out["low"] > 0)
    return out
