"""The flows' decisions as plain functions: which calibrations a flow runs and in which order, under
which validation bounds, what it says, and how a DVC stage reads back the JSON an earlier stage
wrote. The flows of :mod:`checkworthy.flows.pipeline` and :mod:`checkworthy.flows.stages` only wire
tasks around them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from checkworthy.config import model_name
from checkworthy.data.validation import Bounds
from checkworthy.runs.flow_types import (
    AppliedLabels,
    Calibrated,
    LabelVerdict,
    LineageWork,
    ScoredKey,
)
from checkworthy.store.rows import ScoreKey
from checkworthy.store.run_spec import RunMethods, RunSpec


def model_names(params: Mapping[str, Any]) -> list[str]:
    """The names of params.yaml's ``models:`` entries, in order (the first is the paper's pass)."""
    return [model_name(m) for m in params["models"]]


def chunk_size(params: Mapping[str, Any]) -> int:
    """The number of texts per task of the fanned-out embedding and scoring (``scale_out``)."""
    return int((params.get("scale_out") or {}).get("chunk_size", 96))


def claim_ids(lineages: Iterable[LineageWork]) -> list[int]:
    """Every claim the lineages calibrate with or calibrate: their labelled sets and targets."""
    lineages = list(lineages)
    return sorted({i for lin in lineages for i in lin.calibration_ids}
                  | {i for lin in lineages for t in lin.targets.values() for i in t})


def validation_bounds(params: Mapping[str, Any], limit: int | None = None) -> Bounds:
    """The label-validation bounds of params (``validation:``); a smoke run's calibration set is at
    most ``limit`` claims by construction, so its minimum is at most that."""
    bounds = Bounds.from_params(params)
    return replace(bounds, min_rows=min(bounds.min_rows, limit)) if limit else bounds


def run_spec(target: str, claim_ids: Sequence[int], label_set_id: int, key: ScoreKey, k: int,
             params: Mapping[str, Any]) -> RunSpec:
    """The calibration of ``target``'s claims against a label set under a score key at ``k``, by
    params.yaml's methods (the run defaults where it names none)."""
    named = {"interval": "interval_method", "correction": "correction", "knn": "knn",
             "ef_search": "ef_search"}
    methods = RunMethods(k, params["alpha"], params["threshold"],
                         **{attr: params[name] for name, attr in named.items() if name in params})
    return RunSpec.of(target, sorted(claim_ids), label_set_id, key, methods)


@dataclass(frozen=True)
class CalibrationJob:
    """One calibration to bring up to date, and the validation run that cleared its label set."""

    spec: RunSpec
    validation_run_id: int


def calibration_jobs(lineages: Iterable[LineageWork], verdicts: Mapping[str, LabelVerdict],
                     keys: Sequence[ScoredKey], params: Mapping[str, Any]) -> list[CalibrationJob]:
    """Every target of every lineage whose labels passed validation, under each score key and each
    k of params, in that order."""
    return [CalibrationJob(run_spec(target, ids, lin.label_set_id, key.key, k, params),
                           verdicts[lin.lineage].validation_run_id)
            for lin in lineages if verdicts[lin.lineage].success
            for target, ids in sorted(lin.targets.items()) for key in keys for k in params["k"]]


def in_target_order(runs: Iterable[Calibrated], targets: Sequence[str]) -> list[Calibrated]:
    """The runs by target, in ``targets``' order; each target's in the order they were made
    (``models:`` order)."""
    return sorted(runs, key=lambda r: targets.index(r.target))


def distinct_keys(keys: Iterable[ScoredKey]) -> list[ScoredKey]:
    """Each key once, in the order first met."""
    return list(dict.fromkeys(keys))


def blocked(verdicts: Mapping[str, LabelVerdict]) -> list[str]:
    """The lineages whose labels failed validation, sorted."""
    return sorted(n for n, v in verdicts.items() if not v.success)


def changed_lineages(updates: Iterable[AppliedLabels]) -> list[str]:
    """The lineages the applied label files gave a new head, sorted."""
    return sorted({n for u in updates for n in u.new_heads})


def incoming_files(repo: str) -> list[str]:
    """The files of newly arrived claims: ``data/incoming/*.csv`` of the project, sorted."""
    return sorted(str(p) for p in (Path(repo) / "data" / "incoming").glob("*.csv"))


def new_claims_line(added: Mapping[str, list[int]], runs: Iterable[Calibrated]) -> str:
    """What the score-new-claims flow did, in one line."""
    updated = [r for r in runs if r.mode != "reused"]
    return f"{sum(len(v) for v in added.values())} claims arrived; {len(updated)} calibrations updated"


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def read_verdicts(path: Path) -> dict[str, LabelVerdict]:
    """The validate stage's verdicts (lineage -> verdict)."""
    return {n: LabelVerdict(**v) for n, v in _read(path).items()}


def read_keys(path: Path) -> list[ScoredKey]:
    """The score stage's keys."""
    return [ScoredKey(**k) for k in _read(path)["keys"]]


def read_run_ids(path: Path) -> list[int]:
    """The ids of the calibrate stage's runs."""
    return [Calibrated(**r).run_id for r in _read(path)["runs"]]
