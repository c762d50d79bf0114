"""Standard score calibrators and conformal prediction sets, for comparison with NN-PPI.

All map a model score ``c`` in [0, 1] to P(check-worthy) using the labelled calibration set
only (the same ``c_L``, ``y_L`` NN-PPI uses), and share scikit-learn's contract:
``fit(c_L, y_L) -> self`` and ``predict_proba(c) -> (n, 2)`` with column 1 = P(Y = 1).
Unlike NN-PPI they see the score alone, not the claim's neighbours: they fix a model's
*global* miscalibration (e.g. Gemma 3 270M scoring almost everything high) but cannot use
topical similarity.

Registry :data:`CALIBRATORS` (factories keyed by CLI name):

``identity``     the score as a probability (the paper's Baseline).
``platt``        logistic regression on ``logit(c)`` (scikit-learn ``LogisticRegression``,
                 unpenalised): a two-parameter monotone map, ``sigmoid(a logit(c) + b)``.
``platt-score``  logistic regression on ``c`` itself (Platt's original form for bounded scores).
``isotonic``     scikit-learn ``IsotonicRegression``: any monotone step map; needs more data,
                 can overfit small L.
``temperature``  ``sigmoid(logit(c) / T)``, T fitted by minimising the NLL (scipy); one
                 parameter, no shift, so it cannot fix a bias (meant for token-probability
                 scores, whose logit is meaningful).
``venn-abers``   inductive Venn-Abers (the ``venn-abers`` package; Vovk, Petej and Fedorova,
                 NeurIPS 2015): two isotonic fits with the new score added under each label give
                 ``p0 <= p1``, one of which is calibrated under exchangeability whatever the
                 score; the probability is their log-loss merge ``p1 / (1 - p0 + p1)``.

Conformal prediction sets for the binary label (:class:`ConformalSets`, built on crepes'
``ConformalClassifier`` with the hinge score ``1 - P(y)``) turn any calibrator into sets with
``P(Y in set) >= 1 - alpha`` (marginal) or per class (``class_cond=True``, Mondrian), under
exchangeability of L and the test claims. :func:`prediction_sets` returns the sets with their
coverage and size in the interval summary of :mod:`checkworthy.method.intervals`.

Limits: scores of exactly 0 or 1 (verbalised confidences) are clipped to ``[eps, 1 - eps]``
before a logit, so the fitted map near the ends depends on ``eps``. All calibrators learn the
class prior of L: fitted on the paper's class-balanced L they estimate P(Y = 1) under a 50%
prevalence (:func:`adjust_prevalence` converts).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import numpy as np
from crepes import ConformalClassifier
from crepes.extras import hinge
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import minimize_scalar
from scipy.special import expit, logit
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from venn_abers import VennAbers

from checkworthy.method.intervals import IntervalSummary, summarise_sets

FloatArray = NDArray[np.float64]
EPS = 1e-6
CLASSES = np.array([0, 1])

__all__ = [
    "CALIBRATORS",
    "ConformalSets",
    "IdentityCalibrator",
    "IsotonicCalibrator",
    "PlattCalibrator",
    "ScoreCalibrator",
    "TemperatureCalibrator",
    "VennAbersCalibrator",
    "adjust_prevalence",
    "fitted_params",
    "make_calibrator",
    "prediction_sets",
]


class ScoreCalibrator(Protocol):
    """Maps scores in [0, 1] to class probabilities, fitted on labelled scores."""

    def fit(self, c: ArrayLike, y: ArrayLike) -> ScoreCalibrator: ...

    def predict_proba(self, c: ArrayLike) -> FloatArray: ...


def _scores(c: ArrayLike) -> FloatArray:
    c = np.asarray(c, dtype=float).ravel()
    if not np.isfinite(c).all() or c.min(initial=0) < 0 or c.max(initial=0) > 1:
        raise ValueError("scores must be finite and lie in [0, 1]")
    return c


def _labels(y: ArrayLike, n: int) -> NDArray[np.int_]:
    y = np.asarray(y).ravel()
    if len(y) != n or not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be 0/1, one per score")
    return y.astype(int)


def _two_columns(p1: FloatArray) -> FloatArray:
    p1 = np.clip(p1, 0.0, 1.0)
    return np.column_stack([1 - p1, p1])


class _Base:
    def predict(self, c: ArrayLike, threshold: float = 0.5) -> NDArray[np.int_]:
        """1 (check-worthy) where ``P(Y = 1) >= threshold``."""
        p1 = self.predict_proba(c)[:, 1]  # type: ignore[attr-defined]
        decision: NDArray[np.int_] = (p1 >= threshold).astype(int)
        return decision


class IdentityCalibrator(_Base):
    """The score itself as P(Y = 1); fitting does nothing."""

    def fit(self, c: ArrayLike, y: ArrayLike) -> IdentityCalibrator:
        """No-op (validates inputs)."""
        _labels(y, len(_scores(c)))
        return self

    def predict_proba(self, c: ArrayLike) -> FloatArray:
        """``[1 - c, c]``."""
        return _two_columns(_scores(c))


class PlattCalibrator(_Base):
    """Platt scaling: unpenalised logistic regression of Y on ``logit(c)`` (or on ``c``).

    Why ``logit``: a model's probability-like score is better modelled as a logit-linear
    distortion, ``sigmoid(a logit(c) + b)``, which contains the identity (a=1, b=0). Unlike
    Platt (1999) the targets are not smoothed; with |L| in the thousands the difference is
    negligible (scikit-learn's ``CalibratedClassifierCV(method="sigmoid")`` smooths).
    """

    def __init__(self, feature: str = "logit", eps: float = EPS) -> None:
        if feature not in ("logit", "score"):
            raise ValueError("feature must be 'logit' or 'score'")
        self.feature = feature
        self.eps = eps

    def _x(self, c: ArrayLike) -> FloatArray:
        c = _scores(c)
        x = logit(np.clip(c, self.eps, 1 - self.eps)) if self.feature == "logit" else c
        return x.reshape(-1, 1)

    def fit(self, c: ArrayLike, y: ArrayLike) -> PlattCalibrator:
        """Fit ``a``, ``b`` by maximum likelihood on L."""
        x = self._x(c)
        self.model_ = LogisticRegression(C=np.inf).fit(x, _labels(y, len(x)))
        return self

    def predict_proba(self, c: ArrayLike) -> FloatArray:
        """``[1 - p, p]`` with ``p = sigmoid(a x + b)``."""
        p: FloatArray = self.model_.predict_proba(self._x(c))
        return p


class IsotonicCalibrator(_Base):
    """Isotonic regression of Y on ``c`` (scikit-learn), clipped to [0, 1] outside L's range.

    The most flexible monotone map; with the few distinct values verbalised scores take it
    reduces to the empirical positive rate per score value. Ties in c are pooled.
    """

    def fit(self, c: ArrayLike, y: ArrayLike) -> IsotonicCalibrator:
        """Fit the non-decreasing step map on L."""
        c = _scores(c)
        self.model_ = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(
            c, _labels(y, len(c))
        )
        return self

    def predict_proba(self, c: ArrayLike) -> FloatArray:
        """``[1 - p, p]`` with ``p`` the fitted step map at ``c``."""
        return _two_columns(self.model_.predict(_scores(c)))


class TemperatureCalibrator(_Base):
    """Temperature scaling: ``P(Y = 1) = sigmoid(logit(c) / T)``, T by minimum NLL on L.

    Meant for token-probability scores (``c`` = the model's probability of the positive
    answer), where ``logit(c)`` is the model's own log-odds: T > 1 softens an overconfident
    model. One parameter and no intercept, so it cannot correct a model that is biased
    towards one class; Platt can. Fitted over ``log T`` in [-10, 10] by bounded scalar
    minimisation (scipy), as scikit-learn's ``method="temperature"`` does.
    """

    def __init__(self, eps: float = EPS) -> None:
        self.eps = eps

    def _z(self, c: ArrayLike) -> FloatArray:
        z: FloatArray = logit(np.clip(_scores(c), self.eps, 1 - self.eps))
        return z

    def fit(self, c: ArrayLike, y: ArrayLike) -> TemperatureCalibrator:
        """Minimise the mean binary NLL over ``log T``."""
        z = self._z(c)
        y = _labels(y, len(z))
        sign = 2.0 * y - 1.0

        def nll(log_t: float) -> float:
            # -log sigmoid(s z / T), computed stably
            return float(np.mean(np.logaddexp(0.0, -sign * z * np.exp(-log_t))))

        res = minimize_scalar(nll, bounds=(-10.0, 10.0), method="bounded", options={"xatol": 1e-10})
        self.temperature_ = float(np.exp(res.x))
        return self

    def predict_proba(self, c: ArrayLike) -> FloatArray:
        """``[1 - p, p]`` with ``p = sigmoid(logit(c) / T)``."""
        return _two_columns(expit(self._z(c) / self.temperature_))


class VennAbersCalibrator(_Base):
    """Inductive Venn-Abers calibration of the score (``venn_abers.VennAbers`` on L).

    For a new score, isotonic regression is fitted on L plus that score labelled 0 and labelled
    1; the two fitted values ``p0 <= p1`` form a multiprobability, one of whose members is
    calibrated under exchangeability of L and the claim, whatever the score (Vovk et al. 2015).
    The probability used is the merge ``p1 / (1 - p0 + p1)`` (minimal log loss); the gap
    ``p1 - p0`` shrinks as L grows and says how much L supports the figure at that score.
    Like isotonic regression it is a monotone step map, but it does not overfit the ends.
    """

    def fit(self, c: ArrayLike, y: ArrayLike) -> VennAbersCalibrator:
        """Store L's sorted scores and the two isotonic vectors (the package's precomputation)."""
        c = _scores(c)
        self.model_ = VennAbers().fit(_two_columns(c), _labels(y, len(c)))
        return self

    def predict_proba(self, c: ArrayLike) -> FloatArray:
        """``[1 - p, p]`` with ``p`` the merged Venn-Abers probability."""
        p, _ = self.model_.predict_proba(_two_columns(_scores(c)))
        return _two_columns(p[:, 1])

    def bounds(self, c: ArrayLike) -> FloatArray:
        """``(n, 2)``: the multiprobability ``p0, p1`` of each score."""
        _, p0p1 = self.model_.predict_proba(_two_columns(_scores(c)))
        return np.asarray(p0p1, dtype=float)


#: calibrator factories keyed by CLI name
CALIBRATORS: dict[str, Callable[[], ScoreCalibrator]] = {
    "identity": IdentityCalibrator,
    "platt": PlattCalibrator,
    "platt-score": partial(PlattCalibrator, feature="score"),
    "isotonic": IsotonicCalibrator,
    "temperature": TemperatureCalibrator,
    "venn-abers": VennAbersCalibrator,
}


def make_calibrator(name: str) -> ScoreCalibrator:
    """A fresh, unfitted calibrator by registry name."""
    try:
        return CALIBRATORS[name]()
    except KeyError:
        raise ValueError(f"unknown calibrator {name!r}; choose from {sorted(CALIBRATORS)}") from None


def fitted_params(model: ScoreCalibrator) -> dict[str, float]:
    """The fitted numbers of a calibrator, for the record (temperature, slope/intercept, steps)."""
    if hasattr(model, "temperature_"):
        return {"temperature": float(model.temperature_)}
    inner: Any = getattr(model, "model_", None)  # scikit-learn's fitted model (untyped)
    if hasattr(inner, "coef_"):
        return {"slope": float(inner.coef_[0][0]), "intercept": float(inner.intercept_[0])}
    if hasattr(inner, "X_thresholds_"):
        return {"n_steps": float(len(inner.X_thresholds_))}
    return {}


def adjust_prevalence(p: ArrayLike, source: float, target: float) -> FloatArray:
    """Re-weight probabilities learnt at class prevalence ``source`` to prevalence ``target``.

    Bayes' rule under label shift (P(x | y) unchanged): the odds are multiplied by
    ``target (1 - source) / ((1 - target) source)``. For the paper's balanced L (source 0.5)
    and a 26% prevalence the 0.5 threshold moves to about 0.74 on the unadjusted scale.
    ``target`` must come from data without test labels (e.g. the calibration pool).
    """
    q = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
    w = target * (1 - source) / ((1 - target) * source)
    adjusted: FloatArray = w * q / (w * q + (1 - q))
    return adjusted


class ConformalSets:
    """Conformal prediction sets for the binary label on top of a score calibrator (crepes).

    Non-conformity is crepes' ``hinge``, ``1 - P(y)``. With ``calibrator=None`` (identity) the
    score needs no fitting and all of L calibrates; otherwise L is split (stratified, ``seed``)
    into a part that fits the calibrator and a part that calibrates the sets (inductive
    conformal), which the guarantee requires.

    Guarantee: under exchangeability of L and the test claims,
    ``P(Y in set) >= 1 - alpha`` (``class_cond=False``), or ``P(Y in set | Y = y) >= 1 - alpha``
    for each y (``class_cond=True``, Mondrian; robust to a change of class prevalence). Sets
    use non-smoothed p-values (deterministic, slightly conservative). For ``class_cond=True`` a
    strictly monotone calibrator cannot change the sets (they are thresholds on ``c`` fixed by
    within-class ranks), so the identity, which keeps all of L for calibration, is best there.
    """

    def __init__(
        self,
        calibrator: ScoreCalibrator | str | None = None,
        *,
        class_cond: bool = True,
        fit_fraction: float = 0.5,
        seed: int = 0,
    ) -> None:
        self.calibrator = make_calibrator(calibrator) if isinstance(calibrator, str) else calibrator
        self.class_cond = class_cond
        self.fit_fraction = fit_fraction
        self.seed = seed

    def fit(self, c: ArrayLike, y: ArrayLike) -> ConformalSets:
        """Fit the calibrator (on part of L if any) and the conformal classifier."""
        c = _scores(c)
        y = _labels(y, len(c))
        if self.calibrator is None or isinstance(self.calibrator, IdentityCalibrator):
            self.calibrator_: ScoreCalibrator = IdentityCalibrator()
            c_cal, y_cal = c, y
        else:
            c_fit, c_cal, y_fit, y_cal = train_test_split(
                c, y, train_size=self.fit_fraction, stratify=y, random_state=self.seed
            )
            self.calibrator_ = self.calibrator.fit(c_fit, y_fit)
        alphas = hinge(self.calibrator_.predict_proba(c_cal), CLASSES, y_cal)
        self.cc_ = ConformalClassifier().fit(alphas, bins=y_cal if self.class_cond else None)
        return self

    def predict_p(self, c: ArrayLike) -> FloatArray:
        """(n, 2) conformal p-values of labels 0 and 1."""
        alphas = hinge(self.calibrator_.predict_proba(c))
        if not self.class_cond:
            p: FloatArray = self.cc_.predict_p(alphas, smoothing=False)
            return p
        n = len(alphas)
        return np.column_stack(
            [self.cc_.predict_p(alphas, np.full(n, cls), smoothing=False)[:, cls] for cls in CLASSES]
        )

    def predict_set(self, c: ArrayLike, alpha: float = 0.05) -> NDArray[np.bool_]:
        """(n, 2) boolean sets: label y is in claim i's set iff its p-value exceeds ``alpha``."""
        return self.predict_p(c) > alpha


def prediction_sets(
    c_L: ArrayLike,
    y_L: ArrayLike,
    c: ArrayLike,
    *,
    alpha: float = 0.05,
    conformal: ConformalSets | None = None,
    y: ArrayLike | None = None,
) -> tuple[NDArray[np.bool_], IntervalSummary | None]:
    """Conformal sets for claims with scores ``c``, ``conformal`` (unfitted; None: the identity's
    Mondrian sets) fitted here on L; with their summary if ``y`` given.

    The summary (:class:`checkworthy.method.intervals.IntervalSummary`) holds coverage overall and per
    class, mean set size and singleton/empty rates, comparable with the intervals' summaries.
    """
    cs = (conformal or ConformalSets()).fit(c_L, y_L)
    sets = cs.predict_set(c, alpha)
    return sets, (None if y is None else summarise_sets(sets, y))
