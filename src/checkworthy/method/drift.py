"""Drift: are the claims being decided still like the labelled ones? NN-PPI borrows the residuals
of a claim's nearest labelled claims; far from every labelled claim, those neighbours say little.

The measure is each claim's cosine distance to its nearest labelled claim. On L, each claim's
distance to its nearest *other* labelled claim gives the reference: the radius is the
``ceil((m + 1) q)``-th smallest of those m distances, so that a new claim exchangeable with L lies
beyond it with probability at most ``1 - q`` (the split-conformal quantile). A batch is flagged when
the share of its claims beyond the radius is significantly above ``tolerance`` (three times
``1 - q`` by default): the one-sided exact binomial p-value of "share <= tolerance" at most
``alpha``. The tolerance keeps a mild, expected difference (a new debate against last year's
labels: 11% beyond instead of 5% in our tests) from raising an alarm; a batch of another kind lies
beyond almost entirely.

When a batch alerts, its claims beyond the radius are never decided automatically
(:func:`drift_status`), and the batch's share of check-worthy claims is not estimated under label
shift. When most of it lies beyond (:data:`ANOTHER_KIND`), the batch is of another kind and its
claims within the radius are its fringe, not claims like L's: none of it is decided automatically.
Measured (``docs/method.md``, "Drift"): CheckThat! 2022 tweets against debate labels lie 88%
beyond, and the rule chosen on L erred on 7 of the 18 tweets within the radius it would decide (a
batch of another kind may also call check-worthy what L does not, which no distance shows); a 2016
debate against the 2012 debates lies 26% beyond, and the rule erred on 4.8% of the 248 claims
within the radius it decided. Without an alert nothing changes: claims like L's lie beyond the
radius too (at most ``1 - q`` of them), and the decide-or-review rule chosen on L covers them.

A claim in a language none of L's claims is in (:func:`new_languages`; its language as detected,
``und`` never counting) is held back too, whatever its distance: L says nothing about claims in
that language, and the English sentence encoder's distances say little across languages. The
batch's figure then names those languages (``languages``), and when they are more than
``tolerance`` of it its share of check-worthy claims is not estimated (:func:`unlike_labelled`).

Limits: the claims of a batch are treated as independent given L (a batch of near-duplicates counts
each); a batch that is only easier (closer to L) is never flagged. Pure: arrays in and out.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.stats import binom

#: the default share of L's own claims inside the radius, the share beyond it tolerated in a batch,
#: and the test level of an alert
QUANTILE, TOLERANCE, ALPHA = 0.95, 0.15, 0.01


@dataclass(frozen=True)
class Drift:
    """A batch against L: the radius, how many claims lie beyond it, their share against the
    expected ``1 - quantile`` and the tolerated one, the p-value and whether it is an alert; and,
    when any of its claims is in a language none of L's claims is in, how many in each."""

    quantile: float
    radius: float | None
    n: int
    n_beyond: int
    share: float
    expected: float
    tolerance: float
    p_value: float
    alert: bool
    #: the claims in each language L has none of (:func:`new_languages`: code and count, most
    #: first); None: none (or the batch's languages were not read)
    languages: tuple[tuple[str, int], ...] | None = None

    def as_dict(self) -> dict[str, object]:
        """The figure as a run's ``params->'drift'``, an API answer and the drift event hold it:
        every field in order, ``languages`` (code: count) only when there are any."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "languages"}
        return out if self.languages is None else out | {"languages": dict(self.languages)}

    @classmethod
    def from_dict(cls, figure: Mapping[str, Any]) -> Drift:
        """The figure :meth:`as_dict` wrote (a stored run's, as it was stored)."""
        new = figure.get("languages")
        return cls(**{f.name: figure[f.name] for f in fields(cls) if f.name != "languages"},
                   languages=None if new is None else tuple(new.items()))

    @property
    def n_new_language(self) -> int:
        """How many of the batch's claims are in languages L has none of."""
        return sum(n for _, n in self.languages or ())


def fit_radius(loo_nearest: ArrayLike, quantile: float = QUANTILE) -> float | None:
    """The split-conformal radius of L's leave-one-out nearest distances (None when L is too small
    for the quantile: then no claim is ever beyond it)."""
    d = np.sort(np.asarray(loo_nearest, dtype=float))
    if not 0 < quantile < 1:
        raise ValueError("quantile must lie in (0, 1)")
    rank = int(np.ceil((len(d) + 1) * quantile))
    return float(d[rank - 1]) if rank <= len(d) else None


def check_drift(nearest: ArrayLike, radius: float | None, quantile: float = QUANTILE,
                tolerance: float = TOLERANCE, alpha: float = ALPHA) -> Drift:
    """The batch's claims (their nearest labelled distances) against the radius."""
    if not 1 - quantile <= tolerance < 1:
        raise ValueError("tolerance must lie in [1 - quantile, 1)")
    d = np.asarray(nearest, dtype=float)
    n, beyond = len(d), 0 if radius is None else int(np.sum(d > radius))
    p = float(binom.sf(beyond - 1, n, tolerance)) if n else 1.0
    return Drift(quantile, radius, n, beyond, beyond / n if n else 0.0, 1.0 - quantile, tolerance, p,
                 p <= alpha)


def drift(loo_nearest: ArrayLike, nearest: ArrayLike, quantile: float = QUANTILE,
          tolerance: float = TOLERANCE, alpha: float = ALPHA) -> Drift:
    """:func:`check_drift` of a batch against the radius of L's leave-one-out nearest distances."""
    return check_drift(nearest, fit_radius(loo_nearest, quantile), quantile, tolerance, alpha)


#: a claim's drift status (:func:`drift_status`): drift does not hold it back; it lies within the
#: radius of a batch of another kind; it lies beyond the radius of a batch that alerts; it is in a
#: language none of L's claims is in (whatever its distance)
CALM, DRIFTING, FAR, NEW_LANGUAGE = 0, 1, 2, 3
#: a batch that alerts with more than this share beyond the radius is of another kind: most of it
#: is unlike L's claims (under a mixture of L-like claims, at most 1 - q of them beyond, and others)
ANOTHER_KIND = 0.5


def another_kind(figure: Drift | None) -> bool:
    """Whether a batch's drift figure says it is of another kind: it alerts, and more than
    :data:`ANOTHER_KIND` of it lies beyond the radius."""
    return figure is not None and figure.alert and figure.share > ANOTHER_KIND


def drift_status(nearest: ArrayLike, figure: Drift | None,
                 languages: Sequence[str | None] | None = None) -> NDArray[np.int8]:
    """Each claim's :data:`CALM`, :data:`DRIFTING` or :data:`FAR`, from its distance to its nearest
    labelled claim (``nearest``) and its batch's figure: all calm when the figure does not alert
    (or there is none); beyond the radius far; within it drifting in a batch of another kind
    (:func:`another_kind`), else calm. With ``languages`` (each claim's, None where unknown), a
    claim in one of the figure's new languages is :data:`NEW_LANGUAGE`."""
    d = np.asarray(nearest, dtype=float)
    if figure is None or not figure.alert:
        status = np.full(d.shape, CALM, dtype=np.int8)
    else:
        far = np.zeros(d.shape, dtype=bool) if figure.radius is None else d > float(figure.radius)
        status = np.where(far, FAR, DRIFTING if another_kind(figure) else CALM).astype(np.int8)
    new = dict(figure.languages or ()) if figure is not None else {}
    if new and languages is not None:
        status[np.array([lang in new for lang in languages], dtype=bool)] = NEW_LANGUAGE
    return status


#: the code of a text in no detectable language (:data:`checkworthy.data.language.UND`): never a
#: language L lacks, since it names none
UNDETERMINED = "und"


def new_languages(languages: Sequence[str | None], labelled: Collection[str]) -> dict[str, int]:
    """How many of a batch's claims (``languages``: each one's, None where unknown) are in each
    language that none of L's claims (``labelled``: L's languages) is in; ``und`` and unknown never
    count. Sorted by count, then code."""
    counts: dict[str, int] = {}
    for lang in languages:
        if lang is not None and lang != UNDETERMINED and lang not in labelled:
            counts[lang] = counts.get(lang, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def with_languages(figure: Drift, languages: Sequence[str | None] | None,
                   labelled: Collection[str] | None) -> Drift:
    """A batch's figure with ``languages``, the claims in each language L has none of
    (:func:`new_languages`), when there are any: the figure of a batch in L's languages (or
    without languages) is left as it was."""
    if languages is None or labelled is None:
        return figure
    new = new_languages(languages, labelled)
    return replace(figure, languages=tuple(new.items())) if new else figure


def unlike_labelled(figure: Drift | None) -> bool:
    """Whether a batch is too unlike L for label shift (its share of check-worthy claims is then
    not estimated): its figure alerts, or more than its tolerance of it is in languages L has none
    of."""
    if figure is None:
        return False
    return figure.alert or (figure.n > 0 and figure.n_new_language / figure.n > figure.tolerance)
