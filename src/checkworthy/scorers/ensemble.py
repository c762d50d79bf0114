"""Several trained classifiers as one predictor (``ensemble:minilm-lora+gemma-lora``).

The score is the logistic function of the members' mean log-odds of ``p_positive``: an
unweighted average, so no label chooses a weight and the members' leakage-free training is all
the ensemble has seen. Two classifiers that rank claims well for different reasons (MiniLM's
sentence vector and Gemma's last token) err on different claims, and their mean ranks better than
either (docs/method.md, "Two fine-tuned models together"). Each probability is clipped to
[1e-6, 1 - 1e-6] before its log-odds, so a member's 0 or 1 cannot decide alone.

A claim a member cannot score gets no score, with that member's status. Where a store keeps the
members' scores, :func:`checkworthy.runs.scoring.score_missing` scores each member once and joins
their stored scores with :meth:`EnsembleScorer.combine`, so an ensemble run after its members'
runs scores nothing again. Score kinds are the
classifiers' (:mod:`checkworthy.scorers.classifier`): ``p_positive`` and the paper's ``paper_c``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from checkworthy.scorers.base import OK, Score, Scorer
from checkworthy.scorers.classifier import SCORE_KINDS, paper_c

#: how far from 0 and 1 a member's probability is held before its log-odds
CLIP = 1e-6


def log_odds(p: float) -> float:
    """log(p / (1 - p)) of ``p`` clipped to [CLIP, 1 - CLIP]."""
    p = min(max(p, CLIP), 1.0 - CLIP)
    return math.log(p / (1.0 - p))


class EnsembleScorer:
    """The members' mean log-odds of ``p_positive``, as a probability."""

    score_kinds = SCORE_KINDS

    def __init__(self, spec: str, members: Sequence[Scorer]) -> None:
        if len(members) < 2:
            raise ValueError(f"{spec}: an ensemble needs at least two members joined by '+'")
        missing = [m.spec for m in members if "p_positive" not in m.score_kinds]
        if missing:
            raise ValueError(f"{spec}: {', '.join(missing)} give no p_positive")
        self.spec = spec
        self.members = list(members)

    def params(self) -> dict[str, Any]:
        """Every member's identity (a retrained member is a new cache key); a group counts as
        excluded from training only where every member excluded it."""
        members = [{"spec": m.spec, **m.params()} for m in self.members]
        excluded = set.intersection(*(set(p.get("excluded") or ()) for p in members))
        return {"backend": "ensemble", "rule": "sigmoid of the mean member log-odds of p_positive",
                "clip": CLIP, "members": members, "excluded": sorted(excluded)}

    def score(self, texts: Sequence[str]) -> list[dict[str, Score]]:
        """Both score kinds for each text, from one pass of every member."""
        return self.combine([[r["p_positive"] for r in m.score(texts)] for m in self.members])

    def combine(self, per_member: Sequence[Sequence[Score]]) -> list[dict[str, Score]]:
        """Both score kinds for each text from each member's ``p_positive`` of it (in member order):
        how :meth:`score` joins fresh scores and the store joins scores it already holds."""
        out = []
        for scores in zip(*per_member):
            failed = next((s for s in scores if s.score is None), None)
            if failed is not None:
                out.append({k: Score(None, failed.status, failed.raw) for k in SCORE_KINDS})
                continue
            z = sum(log_odds(s.score) for s in scores) / len(scores)
            p = 1.0 / (1.0 + math.exp(-z))
            raw = json.dumps({"p_positive": p, "members": [s.score for s in scores]})
            out.append({"paper_c": Score(paper_c(p), OK, raw), "p_positive": Score(p, OK, raw)})
        return out
