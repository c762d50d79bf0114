"""What replaces the model score before the decision, fitted on L alone, and the ``auto`` choice.

A run's correction is either a correction of :mod:`checkworthy.method.corrections` (NN-PPI and
its variants), ``cv`` (the best of them by cross-validation on L), or a *predictor run*: a
predictor fitted on L (a score calibrator, or the embedding head) whose probability is then
corrected (:data:`PREDICTOR_RUNS`). Which is best depends on the score: a strong score (the
fine-tuned MiniLM) is best just calibrated, since its neighbours' residuals and frozen embedding
features add noise; a weak one (Gemma 3 270M) gains most from the embedding head. ``auto``
measures that on L: each of :data:`AUTO_CANDIDATES` is fitted on all folds of L but one and
decides the claims of that fold, which play a batch it never saw; the best mean positive-class F1
(the shared task's metric) wins, the simpler on a tie. Pure: arrays in, arrays out.

Limits: stratified folds, not folds by event (L records no event), so the figure is optimistic
where claims of one debate resemble each other; the ranking, not the figure, is what is used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.metrics import f1_score

from checkworthy.method import nnppi
from checkworthy.method.calibrators import CALIBRATORS, fitted_params
from checkworthy.method.corrections import (
    Choice,
    LabelledSet,
    Neighbourhood,
    estimate_lambda,
    first_kept,
    select_by_cv,
)
from checkworthy.method.embedding_head import fit_head, stratified_folds

#: neighbour counts the ``cv`` correction chooses from (those up to the run's k, and k itself)
CV_KS = (3, 5, 10)
#: predictors fitted on L that replace the model score before a correction:
#: run correction name -> (predictor, correction applied to the predictor's probability)
PREDICTOR_RUNS: dict[str, tuple[str, str]] = {
    **{name: (name, "raw") for name in ("platt", "platt-score", "isotonic", "temperature", "venn-abers")},
    "head": ("head", "raw"),
    "head+nnppi": ("head", "paper"),
    "head-cv": ("head", "cv"),
}
#: what ``auto`` chooses from, simplest first (a tie goes to the earlier)
AUTO_CANDIDATES = ("platt", "head-cv", "cv")
AUTO_FOLDS = 5

Embeddings = tuple[np.ndarray, np.ndarray]


def uses_head(correction: str) -> bool:
    """Whether a run correction fits the embedding head (and so needs the claims' embeddings)."""
    return PREDICTOR_RUNS.get(correction, ("",))[0] == "head"


def cv_ks(k: int) -> tuple[int, ...]:
    """The k a ``cv`` run may choose: :data:`CV_KS` up to the run's k, plus k (k is the budget)."""
    return tuple(sorted({x for x in CV_KS if x <= k} | {k}))


def auto_columns(k: int) -> int:
    """Neighbour columns ``auto`` needs: k of them must remain once a fold's claims are dropped."""
    return max(4 * k, k + 30)


def fit_choice(cal: LabelledSet, correction: str, k: int, threshold: float) -> tuple[Choice, dict[str, Any]]:
    """The correction as a fully fitted :class:`Choice` (on L only), and what to record about it.

    ``ppi++``/``shrink`` get their factor by leave-one-out least squares on L; ``cv`` runs
    :func:`select_by_cv` over every method of its grid and the k of :func:`cv_ks`.
    """
    if correction == "cv":
        best = select_by_cv(cal, ks=cv_ks(k), thresholds=(threshold,)).best
        return best, {"cv_choice": {"method": best.method, "k": best.k, "params": dict(best.params),
                                    "threshold": best.threshold, "cv_weighted_f1": best.cv_score}}
    params: dict[str, Any] = {}
    if correction == "ppi++":
        params["lam"] = estimate_lambda(cal, k, form="ppi++")
    elif correction == "shrink":
        params["kappa"] = estimate_lambda(cal, k, form="shrink")
    return Choice(correction, k, params, threshold), ({"correction_params": params} if params else {})


@dataclass(frozen=True)
class Predictor:
    """A predictor fitted on L: L with the predictor's scores in place of the model's, the fitted
    numbers to record, and the map from a target's model score (and embedding) to its probability."""

    cal: LabelledSet
    params: dict[str, Any]
    apply: Callable[[np.ndarray, np.ndarray | None], np.ndarray]
    #: whether :attr:`apply` reads the targets' embeddings (the embedding head)
    uses_embeddings: bool = False


def predictor_on(name: str, cal: LabelledSet, emb: np.ndarray | None = None, seed: int = 0) -> Predictor:
    """Fit a predictor on L alone (``emb``: L's embeddings, for the embedding head).

    A score calibrator (:data:`checkworthy.method.calibrators.CALIBRATORS`) maps every score, L's
    included (one or two parameters: L's in-sample probabilities are fair game for conformal
    scores). The embedding head gives L its out-of-fold probabilities and pairwise cross-fitted
    neighbour scores (:meth:`checkworthy.method.embedding_head.HeadFit.labelled_set`), so no label
    judges itself.
    """
    if name == "head":
        if emb is None:
            raise ValueError("the embedding head needs the claims' embeddings")
        head = fit_head(emb, cal.c, cal.y, seed=seed)

        def head_apply(c: np.ndarray, emb_t: np.ndarray | None) -> np.ndarray:
            if emb_t is None:
                raise ValueError("the embedding head needs the targets' embeddings")
            return head.predict(emb_t, c)

        return Predictor(head.labelled_set(cal), {"C": head.C}, head_apply, uses_embeddings=True)
    model = CALIBRATORS[name]().fit(cal.c, cal.y)
    p_cal = model.predict_proba(cal.c)[:, 1]
    return Predictor(LabelledSet(y=cal.y, c=p_cal, nbr=cal.nbr, dist=cal.dist), fitted_params(model),
                     lambda c, _emb: model.predict_proba(c)[:, 1])


def fit_predictor(
    name: str, cal: LabelledSet, c: np.ndarray, emb: Embeddings | None = None, seed: int = 0,
) -> tuple[LabelledSet, np.ndarray, dict[str, Any]]:
    """:func:`predictor_on` applied to targets with scores ``c`` (``emb`` = (L's vectors, the
    targets' vectors)): (L, the targets' probabilities, the fitted numbers to record)."""
    p = predictor_on(name, cal, None if emb is None else emb[0], seed)
    return p.cal, p.apply(c, None if emb is None else emb[1]), p.params


@dataclass(frozen=True)
class FittedCorrection:
    """A run's correction fitted on L: the :class:`Choice`, L as the correction sees it, the
    predictor whose probability it corrects (None: the model score), what was fitted."""

    choice: Choice
    cal: LabelledSet
    predictor: Predictor | None
    fitted: dict[str, Any]

    def scores(self, c: np.ndarray, emb: np.ndarray | None = None) -> np.ndarray:
        """The targets' scores the correction corrects (the predictor's, else the model's)."""
        return c if self.predictor is None else self.predictor.apply(c, emb)


def correction_on(name: str, cal: LabelledSet, k: int, threshold: float, emb: np.ndarray | None = None,
                  seed: int = 0) -> FittedCorrection:
    """Fit a run's correction on L alone (``emb``: L's embeddings, for the head)."""
    fitted: dict[str, Any] = {}
    correction, predictor = name, None
    if name in PREDICTOR_RUNS:
        kind, correction = PREDICTOR_RUNS[name]
        predictor = predictor_on(kind, cal, emb, seed)
        cal = predictor.cal
        fitted["predictor"] = {"name": kind, "params": predictor.params}
    choice, chosen = fit_choice(cal, correction, k, threshold)
    return FittedCorrection(choice, cal, predictor, fitted | chosen)


def fit_correction(
    name: str, cal: LabelledSet, c: np.ndarray, k: int, threshold: float,
    emb: Embeddings | None = None, seed: int = 0,
) -> tuple[Choice, LabelledSet, np.ndarray, dict[str, Any]]:
    """:func:`correction_on` applied to targets with scores ``c`` (``emb`` = (L's vectors, the
    targets' vectors)): the Choice, L, the targets' scores it corrects, what was fitted."""
    f = correction_on(name, cal, k, threshold, None if emb is None else emb[0], seed)
    return f.choice, f.cal, f.scores(c, None if emb is None else emb[1]), f.fitted


def choose_correction(
    cal: LabelledSet, emb: np.ndarray, k: int, threshold: float, *,
    candidates: Sequence[str] = AUTO_CANDIDATES, n_folds: int = AUTO_FOLDS, seed: int = 0,
) -> tuple[str, dict[str, float]]:
    """The candidate with the best cross-validated positive-class F1 on L, and each one's figure.

    Parameters
    ----------
    cal : L with leave-one-out neighbour lists of at least :func:`auto_columns` (k) columns.
    emb : (m, d) L's embeddings (for the embedding head).
    k : the run's neighbour budget; fewer are used where a fold leaves a claim fewer.
    threshold : the decision threshold on each candidate's theta.
    """
    folds = stratified_folds(cal.y, n_folds, seed)
    figures: dict[str, list[float]] = {name: [] for name in candidates}
    for train, test in folds:
        inside = np.zeros(cal.m, dtype=bool)
        inside[train] = True
        k_fold = min(k, int(inside[cal.nbr].sum(axis=1).min()))
        if k_fold < 1:
            raise ValueError("a labelled claim has no neighbour outside its fold: fetch more columns")
        where = np.full(cal.m, -1)
        where[train] = np.arange(len(train))
        dist = cal.dist
        nbr_tr, d_tr = first_kept(cal.nbr[train], None if dist is None else dist[train],
                                  inside[cal.nbr[train]], k_fold)
        nbr_te, d_te = first_kept(cal.nbr[test], None if dist is None else dist[test],
                                  inside[cal.nbr[test]], k_fold)
        part = LabelledSet(y=cal.y[train], c=cal.c[train], nbr=where[nbr_tr], dist=d_tr)
        for name in candidates:
            choice, fold_cal, c, _ = fit_correction(name, part, cal.c[test], k_fold, threshold,
                                                    (emb[train], emb[test]), seed)
            theta = choice.theta(Neighbourhood(c=c, nbr=where[nbr_te], cal=fold_cal, dist=d_te))
            figures[name].append(float(f1_score(cal.y[test], nnppi.decide(theta, threshold),
                                                zero_division=0)))
    mean = {name: float(np.mean(v)) for name, v in figures.items()}
    best = max(candidates, key=lambda name: (mean[name], -list(candidates).index(name)))
    return best, mean
