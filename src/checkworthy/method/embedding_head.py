"""A stronger predictor built from L alone: a logistic head on [claim embedding, model score].

NN-PPI corrects a score with its neighbours' residuals, but Gemma 3 270M's scores carry little
signal (its raw weighted F1 is the majority-class figure), so most of what NN-PPI gains comes from
the neighbours' labels. This head uses the same inputs (the vectors already stored for the kNN,
in the run's embedding space: MiniLM, or USE multilingual v3 for a lineage in other languages,
migration 0022; the model's score; L's labels) and nothing else: a regularised logistic
regression whose strength is chosen by cross-validation on L. Its probability is then a
predictor like any other, and NN-PPI corrects it with residuals that are **cross-fitted**: each
labelled claim's residual uses the head fitted without that claim's fold, so no label predicts
itself.

Anything judged on L by leave-one-out (the CV choice of a correction, conformal scores) needs
one level more: for labelled claim i and its neighbour j, the residual ``Y_j - c_j`` must come
from a head that saw neither label. A head that saw ``Y_i`` pulls ``c_j`` towards it (i and j
are similar), so the residual argues against ``Y_i`` and NN-PPI looks worse on L than it is on
new claims (measured: leave-one-out weighted F1 of NN-PPI at k = 10 on CLEF's L 0.774 with the
plain out-of-fold scores, 0.783 cross-fitted; the head alone 0.776-0.781, so the plain CV
wrongly prefers the head alone). :meth:`HeadFit.labelled_set` returns L with these pairwise
cross-fitted neighbour scores (``nbr_c``), from one head per pair of folds.

Pure: arrays in, arrays out (scikit-learn). Limits: a linear head on frozen embeddings; with a
small L (a few hundred claims) it can do worse than the plain score, which is why it is compared
beside the other methods rather than made the default.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

from checkworthy.method.corrections import LabelledSet

FloatArray = NDArray[np.float64]

#: inverse regularisation strengths tried (L2); chosen by cross-validated log loss on L
CS: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
#: heads fitted in this process, by a digest of their inputs: the head does not depend on k, so a
#: main job's runs of one model at k = 3, 5 and 10 (and their comparisons' inner folds) fit it once
FITTED: dict[str, HeadFit] = {}
MAX_FITTED = 64


def features(emb: FloatArray, c: FloatArray) -> FloatArray:
    """The head's inputs: the embedding and the model's score, side by side."""
    return np.column_stack([np.asarray(emb, dtype=float), np.asarray(c, dtype=float)])


def stratified_folds(
    y: NDArray[np.int_], n_folds: int, seed: int
) -> list[tuple[NDArray[np.int_], NDArray[np.int_]]]:
    """(train, test) index pairs of a stratified K-fold split (fewer folds if a class is small)."""
    n = max(2, min(n_folds, int(np.bincount(y, minlength=2).min())))
    return list(StratifiedKFold(n, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))


def _fit(x: FloatArray, y: NDArray[np.int_], C: float) -> LogisticRegression:
    return LogisticRegression(C=C, max_iter=2000).fit(x, y)


@dataclass(frozen=True)
class HeadFit:
    """The fitted head: the model on all of L, L's out-of-fold probabilities, the chosen C.

    ``fold`` (m,) is each labelled claim's fold and ``pair`` (F, F, m) the probabilities of the
    head fitted without folds f and g (``pair[f, f]`` without f alone), for every claim of L.
    """

    model: LogisticRegression
    oof: FloatArray
    C: float
    fold: NDArray[np.int_]
    pair: FloatArray

    def predict(self, emb: FloatArray, c: FloatArray) -> FloatArray:
        """P(check-worthy) for new claims."""
        p: FloatArray = self.model.predict_proba(features(emb, c))[:, 1]
        return p

    def neighbour_scores(self, nbr: NDArray[np.int_]) -> FloatArray:
        """(m, K) scores of L's listed neighbours as seen from each labelled claim: neighbour j
        of claim i scored by the head fitted without i's fold and j's fold."""
        nbr = np.asarray(nbr)
        return self.pair[self.fold[:, None], self.fold[nbr], nbr]

    def labelled_set(self, cal: LabelledSet) -> LabelledSet:
        """L with the head as its score: out-of-fold ``c``, pairwise cross-fitted ``nbr_c``."""
        return LabelledSet(y=cal.y, c=self.oof, nbr=cal.nbr, dist=cal.dist,
                           nbr_c=self.neighbour_scores(cal.nbr))


def fit_head(emb: FloatArray, c: FloatArray, y: NDArray[np.int_], *, n_folds: int = 5,
             Cs: tuple[float, ...] = CS, seed: int = 0) -> HeadFit:
    """Choose C by out-of-fold log loss on L, then fit on all of L and on every pair of folds
    (once per process for the same inputs: :data:`FITTED`).

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
    key = digest(x, y, n_folds, Cs, seed)
    if key not in FITTED:
        if len(FITTED) >= MAX_FITTED:
            FITTED.pop(next(iter(FITTED)))
        FITTED[key] = _fit_head(x, y, n_folds, Cs, seed)
    return FITTED[key]


def digest(x: FloatArray, y: NDArray[np.int_], *options: object) -> str:
    """sha256 of a head's inputs: the features' and labels' values and shapes, and the options."""
    h = hashlib.sha256(repr((x.shape, options)).encode())
    for a in (x, y):
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    return h.hexdigest()


def _fit_head(x: FloatArray, y: NDArray[np.int_], n_folds: int, Cs: tuple[float, ...], seed: int) -> HeadFit:
    folds = stratified_folds(y, n_folds, seed)
    best: tuple[float, float, FloatArray, list[LogisticRegression]] | None = None
    for C in Cs:
        oof = np.empty(len(y))
        models = [_fit(x[train], y[train], C) for train, _ in folds]
        for model, (_, test) in zip(models, folds):
            oof[test] = model.predict_proba(x[test])[:, 1]
        p = np.clip(oof, 1e-12, 1 - 1e-12)
        loss = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
        if best is None or loss < best[0]:
            best = (loss, C, oof, models)
    assert best is not None
    _, C, oof, models = best
    fold = np.empty(len(y), dtype=np.int_)
    for f, (_, test) in enumerate(folds):
        fold[test] = f
    n = len(folds)
    pair = np.empty((n, n, len(y)))
    for f in range(n):
        pair[f, f] = models[f].predict_proba(x)[:, 1]  # without fold f alone: the C search's own fit
        for g in range(f + 1, n):
            keep = (fold != f) & (fold != g)
            pair[f, g] = pair[g, f] = _fit(x[keep], y[keep], C).predict_proba(x)[:, 1]
    return HeadFit(_fit(x, y, C), oof, C, fold, pair)
