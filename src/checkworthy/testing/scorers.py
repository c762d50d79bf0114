"""A scorer whose answers depend only on the text, for killing a scoring worker mid-run."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any

from checkworthy.scorers.base import OK, Score


def expected_score(t: str) -> float:
    """What the runtime computes for a text (a deterministic stand-in for a model's answer)."""
    return int(hashlib.sha256(t.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


class SlowHashScorer:
    """The same answers computed in-process, slowly (for killing the scoring worker itself)."""

    score_kinds = ("verbalised",)

    def __init__(self, spec: str, delay: float = 0.0) -> None:
        self.spec, self.delay = spec, delay
        self.texts_sent: list[str] = []

    def params(self) -> dict[str, Any]:
        return {"temperature": 0.0, "runtime": "pipe"}

    def score(self, texts: Sequence[str]) -> list[dict[str, Score]]:
        time.sleep(self.delay)
        self.texts_sent += texts
        return [{"verbalised": Score(expected_score(t), OK, f"{expected_score(t):.6f}")} for t in texts]
