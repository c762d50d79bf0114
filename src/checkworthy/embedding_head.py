"""A stronger predictor built from L alone: a logistic head on [claim embedding, model score].

NN-PPI corrects a score with its neighbours' residuals, but Gemma 3 270M's scores carry little
signal (its raw weighted F1 is the majority-class figure), so most of what NN-PPI gains comes from
the neighbours' labels. This head uses the same inputs (the MiniLM vectors already stored for the
kNN, the model's score, L's labels) and nothing else: a regularised logistic regression whose
strength is chosen by cross-validation on L. Its probability is then a predictor like any other,
and NN-PPI corrects it with residuals that are **cross-fitted**: each labelled claim's residual
uses the head fitted without that claim's fold, so no label predicts itself.

Pure: arrays in, arrays out (scikit-learn). Limits: a linear head on frozen embeddings; with a
small L (a few hundred claims) it can do worse than the plain score, which is why it is compared
beside the other methods rather than made the default.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

FloatArray = NDArray[np.float64]

#: inverse regularisation strengths tried (L2); chosen by cross-validated log loss on L
CS: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)


def features(emb: FloatArray, c: FloatArray) -> FloatArray:
    """The head's inputs: the embedding and the model's score, side by side."""
    return np.column_stack([np.asarray(emb, dtype=float), np.asarray(c, dtype=float)])


def _folds(y: NDArray[np.int_], n_folds: int, seed: int) -> list[tuple[NDArray, NDArray]]:
    n = max(2, min(n_folds, int(np.bincount(y, minlength=2).min())))
    return list(StratifiedKFold(n, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))


def _fit(x: FloatArray, y: NDArray[np.int_], C: float) -> LogisticRegression:
    return LogisticRegression(C=C, max_iter=2000).fit(x, y)


@dataclass(frozen=True)
class HeadFit:
    """The fitted head: the model on all of L, L's out-of-fold probabilities, the chosen C."""

    model: LogisticRegression
    oof: FloatArray
    C: float

    def predict(self, emb: FloatArray, c: FloatArray) -> FloatArray:
        """P(check-worthy) for new claims."""
        return self.model.predict_proba(features(emb, c))[:, 1]


def fit_head(emb: FloatArray, c: FloatArray, y: NDArray[np.int_], *, n_folds: int = 5,
             Cs: tuple[float, ...] = CS, seed: int = 0) -> HeadFit:
    """Choose C by out-of-fold log loss on L, then fit on all of L; keep the out-of-fold probabilities.

    Parameters
    ----------
    emb : (m, d) embeddings of the labelled claims.
    c : (m,) their model scores.
    y : (m,) labels in {0, 1}; both classes must occur at least twice.
    """
    y = np.asarray(y, dtype=np.int_)
    if np.bincount(y, minlength=2).min() < 2:
        raise ValueError("the embedding head needs at least two labelled claims of each class")
    x = features(emb, c)
    folds = _folds(y, n_folds, seed)
    best: tuple[float, float, FloatArray] | None = None
    for C in Cs:
        oof = np.empty(len(y))
        for train, test in folds:
            oof[test] = _fit(x[train], y[train], C).predict_proba(x[test])[:, 1]
        p = np.clip(oof, 1e-12, 1 - 1e-12)
        loss = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
        if best is None or loss < best[0]:
            best = (loss, C, oof)
    assert best is not None
    return HeadFit(_fit(x, y, best[1]), best[2], best[1])
