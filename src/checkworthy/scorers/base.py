"""The one interface every predictor implements.

A scorer maps claim texts to check-worthiness scores in [0, 1]. It never invents a
score: an output that cannot be parsed, is not a number or lies outside [0, 1] is
returned with ``score=None`` and a ``status`` saying why, the raw text kept. The
helpers every scorer shares to get there (:func:`check_score`, :func:`clean_raw`) live here too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from checkworthy.data.user_csv import parse_decimal

#: parse statuses stored with every prediction
OK = "ok"
UNPARSEABLE = "unparseable"
NOT_A_NUMBER = "not_a_number"
OUT_OF_RANGE = "out_of_range"
ERROR = "error"


@dataclass(frozen=True)
class Score:
    """One model output for one claim under one score kind."""

    score: float | None
    status: str
    raw: str
    usage: dict[str, Any] = field(default_factory=dict)


class Scorer(Protocol):
    """A predictor J. ``identity`` names it in the store; ``params`` are its generation parameters."""

    #: e.g. "embedded:gemma3-270m", "ollama:gemma3:1b"
    spec: str
    #: score kinds this scorer yields from one call, e.g. ("verbalised", "token_prob")
    score_kinds: tuple[str, ...]

    def params(self) -> dict[str, Any]:
        """Generation parameters, stored with every score (their hash is part of the cache key)."""
        ...

    def score(self, texts: Sequence[str]) -> list[dict[str, Score]]:
        """Score texts; one dict per text mapping each score kind to its ``Score``."""
        ...


def check_score(number: float) -> tuple[float | None, str]:
    """A parsed number as a score: finite and in [0, 1], else the failure status (never clipped)."""
    if not math.isfinite(number):
        return None, NOT_A_NUMBER
    if not 0.0 <= number <= 1.0:
        return None, OUT_OF_RANGE
    return number, OK


def parse_number(text: str) -> tuple[float | None, str]:
    """Text as a score: empty -> ``unparseable``; not a plain decimal number (words, ``null``,
    ``nan``, Unicode digits) -> ``not_a_number``; then :func:`check_score`. Only ``ok`` carries
    a score."""
    if not text.strip():
        return None, UNPARSEABLE
    value = parse_decimal(text)
    if value is None:
        return None, NOT_A_NUMBER
    return check_score(value)


def clean_raw(text: str) -> str:
    """Raw output as storable text (Postgres text cannot hold NUL)."""
    return text.replace("\x00", "\ufffd")
