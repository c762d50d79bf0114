"""``checkworthy predict``: the recommended path for a team's own claims.

L has ``id,text,label``, U ``id,text[,label]``. Both are validated like ``calibrate``'s files
(same reader, same one-line errors) before anything is stored; the recommended model then scores
every text that has no stored score yet, and U is calibrated against L with the recommended
correction and interval, through the same store, lineage and run as ``calibrate``. What is
recommended lives in params.yaml (``predict:``) and docs/method.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from checkworthy.config import EF_SEARCH
from checkworthy.runs.own_scores import (
    CalibrateOutcome,
    Row,
    calibrate_stored,
    check_distinct_ids,
    check_k,
    read_scored_csv,
    store_files,
)
from checkworthy.runs.scoring import score_missing
from checkworthy.scorers.base import Scorer
from checkworthy.scorers.registry import PromptInfo
from checkworthy.store import rows as store
from checkworthy.store.run_spec import RunMethods


@dataclass(frozen=True)
class Recommended:
    """The recommended model, score kind and calibration (params.yaml ``predict:``)."""

    model: str = "embedded:gemma3-270m"
    score_kind: str = "token_prob"
    correction: str = "auto"
    interval: str = "mondrian"
    k: int = 10
    alpha: float = 0.05
    threshold: float = 0.5
    prior: str = "labelled"
    review_risk: str = "error"
    max_risk: float = 0.1
    delta: float = 0.1
    knn: str = "exact"
    ef_search: int = EF_SEARCH

    @property
    def methods(self) -> RunMethods:
        """How U is calibrated (checked when built: one-line ``ValueError``)."""
        return RunMethods(self.k, self.alpha, self.threshold, self.interval, correction=self.correction,
                          prior=self.prior, review_risk=self.review_risk, max_risk=self.max_risk,
                          delta=self.delta, knn=self.knn, ef_search=self.ef_search)

    @classmethod
    def from_params(cls, params: Mapping[str, Any], **overrides: Any) -> Recommended:
        """params.yaml's ``predict:`` section, then the options given (None: not given)."""
        known = {k: v for k, v in dict(params.get("predict") or {}).items() if k in cls.__dataclass_fields__}
        return replace(cls(**known), **{k: v for k, v in overrides.items() if v is not None})


def read_files(labelled: Path, unlabelled: Path, k: int) -> tuple[list[Row], list[Row]]:
    """Both files validated (L: id,text,label; U: id,text[,label]); DataError at the first problem."""
    lab = read_scored_csv(labelled, label_required=True, scored=False)
    unl = read_scored_csv(unlabelled, label_required=False, scored=False)
    check_distinct_ids(labelled, lab, unlabelled, unl)
    check_k(labelled, lab, k)
    return lab, unl


def check_score_kind(rec: Recommended, scorer: Scorer) -> None:
    """The scorer gives the recommended score kind (checked before anything is stored)."""
    if rec.score_kind not in scorer.score_kinds:
        raise ValueError(f"{scorer.spec} gives {', '.join(scorer.score_kinds)}, not {rec.score_kind!r}")


def predict_files(
    engine: Engine, paths: tuple[Path, Path], rows: tuple[list[Row], list[Row]], out: Path,
    rec: Recommended, scored_by: tuple[Scorer, PromptInfo], lineage: str | None = None,
) -> CalibrateOutcome:
    """Store L and U (``paths``, and their ``rows`` from :func:`read_files`), score their texts
    with ``scored_by``'s scorer (checked by :func:`check_score_kind`), calibrate U against L (of
    ``lineage``, default L's own), write ``out``."""
    (labelled, unlabelled), (lab, unl) = paths, rows
    scorer, prompt = scored_by
    files = store_files(engine, labelled, lab, unlabelled, unl, lineage)
    hashes = [store.sha256_text(r.text) for r in lab + unl]
    _, _, keys = score_missing(engine, scorer, hashes, prompt)
    return calibrate_stored(engine, files, keys[rec.score_kind], rec.methods, out)
