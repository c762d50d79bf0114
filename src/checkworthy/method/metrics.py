"""Evaluation metrics, pure functions on label arrays (0 = not check-worthy, 1 = check-worthy).

Computed here rather than with scikit-learn so that each figure is one readable formula;
``tests/test_metrics.py`` checks them against hand-computed cases and scikit-learn.
A class with no predicted (or no gold) members gets precision (or recall) 0, as
scikit-learn's ``zero_division=0`` does. :func:`metric_rows` turns one calibration's
arrays into the rows a run stores (``evaluation_metrics``) and the report's sweeps recompute.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numpy.typing import ArrayLike
from sklearn.metrics import roc_auc_score

from checkworthy.method.nnppi import NNPPIResult

CLASSES = (0, 1)
#: the three methods a calibration run is evaluated on: raw score, kNN mean, NN-PPI
METHODS = ("baseline", "knn", "nnppi")


def _safe_div(a: float, b: float) -> float:
    return float(a) / float(b) if b else 0.0


def per_class(y_true: ArrayLike, y_pred: ArrayLike) -> dict[int, dict[str, float]]:
    """Precision, recall, F1 and support for each class."""
    t = np.asarray(y_true, dtype=int)
    p = np.asarray(y_pred, dtype=int)
    out: dict[int, dict[str, float]] = {}
    for cls in CLASSES:
        tp = np.sum((p == cls) & (t == cls))
        precision = _safe_div(tp, np.sum(p == cls))
        recall = _safe_div(tp, np.sum(t == cls))
        f1 = _safe_div(2 * precision * recall, precision + recall)
        out[cls] = {
            "precision": precision,
            "recall": recall,
            "f1": f1,
            "support": float(np.sum(t == cls)),
        }
    return out


def weighted_f1(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Class F1 averaged with weights equal to each class's gold support (the paper's metric)."""
    pc = per_class(y_true, y_pred)
    total = sum(v["support"] for v in pc.values())
    return _safe_div(sum(v["f1"] * v["support"] for v in pc.values()), total)


def accuracy(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Share of decisions on the right side of the threshold."""
    t = np.asarray(y_true, dtype=int)
    return _safe_div(np.sum(t == np.asarray(y_pred, dtype=int)), len(t))


def positive_rate(y: ArrayLike) -> float:
    """Share of 1s (gold or predicted positive rate)."""
    y = np.asarray(y, dtype=int)
    return _safe_div(np.sum(y == 1), len(y))


def roc_auc(y_true: ArrayLike, scores: ArrayLike) -> float:
    """Area under the ROC curve of ``scores`` for label 1 (NaN when a class is missing): how well
    the score ranks, whatever the threshold."""
    t = np.asarray(y_true, dtype=int)
    if len(np.unique(t)) < 2:
        return float("nan")
    return float(roc_auc_score(t, np.asarray(scores, dtype=float)))


def brier(y_true: ArrayLike, p: ArrayLike) -> float:
    """Mean squared difference between the probability (clipped to [0, 1]) and the 0/1 label."""
    y, q = np.asarray(y_true, dtype=float), np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
    return float(np.mean((q - y) ** 2)) if len(y) else float("nan")


def reliability(y_true: ArrayLike, p: ArrayLike, n_bins: int = 10) -> list[tuple[float, float, int]]:
    """The reliability diagram's points: per non-empty equal-width bin of the probability (clipped
    to [0, 1]; 1 falls in the last bin), its mean probability, its share of label 1 and its count."""
    y, q = np.asarray(y_true, dtype=float), np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
    bins = np.minimum((q * n_bins).astype(int), n_bins - 1)
    return [(float(q[bins == b].mean()), float(y[bins == b].mean()), int((bins == b).sum()))
            for b in range(n_bins) if (bins == b).any()]


def expected_calibration_error(y_true: ArrayLike, p: ArrayLike, n_bins: int = 10) -> float:
    """Expected calibration error (Guo et al., ICML 2017): over equal-width bins of the
    probability, each bin's share of the claims times |its share of label 1 - its mean
    probability|. 0 for a calibrated probability; NaN without claims. Ten bins, as usual; the
    figure grows with fewer claims per bin (noise), so compare it at similar sizes."""
    points = reliability(y_true, p, n_bins)
    n = sum(c for *_, c in points)
    return float(sum(c * abs(rate - mean) for mean, rate, c in points) / n) if n else float("nan")


def mean_score_by_class(y_true: ArrayLike, scores: ArrayLike) -> dict[int, float]:
    """Mean score on gold negatives and on gold positives (NaN for an empty class)."""
    t = np.asarray(y_true, dtype=int)
    s = np.asarray(scores, dtype=float)
    return {cls: float(s[t == cls].mean()) if np.any(t == cls) else float("nan") for cls in CLASSES}


def interval_coverage(
    y_true: ArrayLike, lo: ArrayLike, hi: ArrayLike
) -> dict[str, float]:
    """Share of claims whose gold label lies in ``[lo, hi]``, per class and overall.

    This is the paper's coverage: the interval is read as a statement about the label.
    """
    t = np.asarray(y_true, dtype=float)
    covered = (np.asarray(lo) <= t) & (t <= np.asarray(hi))
    out = {"all": float(covered.mean()) if len(t) else float("nan")}
    for cls in CLASSES:
        m = t == cls
        out[str(cls)] = float(covered[m].mean()) if np.any(m) else float("nan")
    return out


def classification_report(y_true: ArrayLike, y_pred: ArrayLike) -> dict[str, float]:
    """Flat metric rows ``{name: value}``: weighted F1, accuracy, rates, per-class P/R/F1."""
    out = {
        "weighted_f1": weighted_f1(y_true, y_pred),
        "accuracy": accuracy(y_true, y_pred),
        "predicted_positive_rate": positive_rate(y_pred),
        "gold_positive_rate": positive_rate(y_true),
    }
    for cls, m in per_class(y_true, y_pred).items():
        for name in ("precision", "recall", "f1"):
            out[f"{name}_{cls}"] = m[name]
    return out


def metric_rows(y: ArrayLike, res: NNPPIResult) -> Iterator[tuple[str, str, str, float]]:
    """(method, metric, class, value) rows for the three methods on gold labels ``y``.

    ``class`` is '0', '1' or 'all'. Besides the classification figures: mean score by gold
    class (raw score for the baseline, theta for NN-PPI, kNN mean for KNN) and, for NN-PPI,
    interval coverage per class and the mean interval width (overall and per gold class).
    """
    y = np.asarray(y, dtype=int)
    decisions = {"baseline": res.baseline_decision, "knn": res.knn_decision, "nnppi": res.decision}
    values = {"baseline": res.score, "knn": res.knn_mean, "nnppi": res.theta}
    for method in METHODS:
        for name, value in classification_report(y, decisions[method]).items():
            base, _, cls = name.rpartition("_")
            if cls in ("0", "1"):
                yield method, base, cls, value
            else:
                yield method, name, "all", value
        for gold, value in mean_score_by_class(y, values[method]).items():
            yield method, "mean_score", str(gold), value
    for cls, value in interval_coverage(y, res.ci_low, res.ci_high).items():
        yield "nnppi", "coverage", cls, value
    width = res.ci_high - res.ci_low
    yield "nnppi", "mean_width", "all", float(np.mean(width))
    for gold in CLASSES:  # per gold class: are the intervals wider where they miss more?
        in_cls = y == gold
        mean = float(np.mean(width[in_cls])) if np.any(in_cls) else float("nan")
        yield "nnppi", "mean_width", str(gold), mean
    yield "nnppi", "n", "all", float(len(y))
