"""The typed values the Prefect flows exchange: the settings a flow runs with (:class:`FlowContext`),
what each of their tasks returns and what each flow returns.

Dataclasses rather than dicts read by string keys: a flow reads fields its type checker knows. The
JSON the DVC stages write (``metrics/*.json``) is these values' fields (:func:`dataclasses.asdict`),
so a stage reads back what an earlier stage wrote (``of_json``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from checkworthy.config import PARAMS_FILE, ROOT, load_params
from checkworthy.runs.label_updates import LabelUpdateOutcome
from checkworthy.store.rows import ScoreKey


class FlowContext(BaseModel):
    """Where a flow works: its store (``DATABASE_URL`` or the embedded Postgres where none is
    named), the project it versions with DVC (``repo``) and its params file. Frozen, so a task
    argument that Prefect can hash and a Dask worker can unpickle."""

    model_config = ConfigDict(frozen=True)

    db_url: str | None = None
    repo: str = str(ROOT)
    params_path: str = str(PARAMS_FILE)

    def params(self) -> dict[str, Any]:
        """The params file, loaded (and refused in one line where it is wrong)."""
        return load_params(Path(self.params_path))


@dataclass(frozen=True)
class ScoredKey:
    """A score key a score task filled, with the spec of the scorer that gave its scores."""

    spec: str
    model_id: int
    prompt_version: str
    params_hash: str
    score_kind: str

    @classmethod
    def of(cls, spec: str, key: ScoreKey) -> ScoredKey:
        """The scorer ``spec``'s key."""
        return cls(spec, key.model_id, key.prompt_version, key.params_hash, key.score_kind)

    @property
    def key(self) -> ScoreKey:
        """The store's key of these scores."""
        return ScoreKey(self.model_id, self.prompt_version, self.params_hash, self.score_kind)


@dataclass(frozen=True)
class LineageWork:
    """A lineage as the flows calibrate it: its head, the claims of its labelled set and its
    targets (name -> claim ids)."""

    lineage: str
    label_set_id: int
    calibration_ids: list[int]
    targets: dict[str, list[int]]


@dataclass(frozen=True)
class PreparedDataset:
    """A dataset of params.yaml, stored and split: its lineage's head and its test target."""

    name: str
    lineage: str
    label_set_id: int
    prepared_label_set_id: int
    target: str
    calibration_ids: list[int]
    test_ids: list[int]

    def summary(self) -> str:
        """The progress line of the main job."""
        return (f"{self.name}: calibration set {len(self.calibration_ids)} claims ({self.lineage}, label set "
                f"{self.label_set_id}), test {len(self.test_ids)}")

    def work(self) -> LineageWork:
        """Its lineage, calibrating its test target only."""
        return LineageWork(self.lineage, self.label_set_id, self.calibration_ids,
                           {self.target: self.test_ids})


@dataclass(frozen=True)
class LabelVerdict:
    """The stored verdict of the label-validation suite on a label set."""

    label_set_id: int
    validation_run_id: int
    success: bool
    failures: list[str]


@dataclass(frozen=True)
class Calibrated:
    """A calibration brought up to date (``mode``: reused, incremental or full)."""

    run_id: int
    mode: str
    target: str
    k: int
    spec: str
    score_kind: str
    n_recomputed: int
    n_copied: int


@dataclass(frozen=True)
class Recalibrated:
    """A calibration in force recalibrated on its lineage's new head."""

    run_id: int
    mode: str
    parent_run_id: int | None
    n_recomputed: int
    n_copied: int
    changes: dict[str, int]

    def line(self) -> str:
        """The line the recalibrate flow prints."""
        return f"run {self.run_id}: {self.mode}, {self.n_recomputed} recomputed, {self.n_copied} copied"


@dataclass(frozen=True)
class Evaluation:
    """The runs' metrics (as DVC reads them) and the report written, if any."""

    metrics: dict[str, Any]
    report: str | None


@dataclass(frozen=True)
class AppliedLabels(LabelUpdateOutcome):
    """What applying one label file (``path``) did (:class:`LabelUpdateOutcome`); a file the suite
    rejected is ``moved_to`` rejected/ when it lay in data/labels/; ``event_id``: the event
    announcing new heads, if one was emitted."""

    path: str = ""
    moved_to: str | None = None
    event_id: str | None = None

    def line(self) -> str:
        """The line the label-update flow prints."""
        return (f"{self.path}: {self.status}, {self.n_appended} labels appended, "
                f"new heads {self.new_heads}")


@dataclass(frozen=True)
class RefusedFile:
    """A label file refused before it was versioned, why, and where it was moved (if it was)."""

    path: str
    reason: str
    moved_to: str | None


@dataclass(frozen=True)
class CheckedFiles:
    """Label files checked against the store: those to apply and those refused."""

    good: list[str]
    refused: list[RefusedFile]


@dataclass(frozen=True)
class GuidelinesVersion:
    """A guidelines file as a prompt version: ``new`` when first seen, ``baseline`` when it is the
    first version ever seen (nothing to rescore), and the event announcing it, if emitted."""

    version: str
    new: bool
    baseline: bool = False
    event_id: str | None = None
    data_version_id: int | None = None

    def line(self) -> str:
        """The line the guidelines-update flow prints."""
        return f"guidelines {self.version}: {'new version' if self.new else 'already known'}"


@dataclass(frozen=True)
class Adapted:
    """What the adapt task did for a lineage: trained again (and promoted or not) or not, and why."""

    lineage: str
    adapted: bool
    why: str
    version_id: int | None = None
    spec: str | None = None
    promoted: bool = False
    figures: dict[str, Any] | None = None


@dataclass
class PipelineResult:
    """The main job's runs (each target's in ``models:`` order), data version, verdicts (by
    lineage), report, metrics and wall time."""

    runs: list[Calibrated]
    run_ids: list[int]
    data_version_id: int
    validations: dict[str, LabelVerdict]
    report: str | None
    metrics: dict[str, Any]
    seconds: float


@dataclass
class RecalibrateResult:
    """The recalibrate flow's verdicts (by lineage), runs, lineages skipped (their labels failed
    validation) and metrics (none without runs)."""

    validations: dict[str, LabelVerdict] = field(default_factory=dict)
    runs: list[Recalibrated] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    metrics: dict[str, Any] | None = None


@dataclass
class AdaptResult:
    """Each lineage's adaptation and the runs recalibrated with a new champion."""

    lineages: list[Adapted] = field(default_factory=list)
    runs: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class LabelUpdateResult:
    """The label-update flow's applied and refused files, its data version, the lineages with a
    new head and the recalibration run now (if asked for)."""

    updates: list[AppliedLabels]
    refused: list[RefusedFile]
    data_version_id: int | None = None
    changed: list[str] = field(default_factory=list)
    recalibration: RecalibrateResult | None = None


@dataclass(frozen=True)
class RescoreResult:
    """The rescore flow's runs, their metrics and the verdicts (by lineage)."""

    runs: list[Calibrated]
    metrics: dict[str, Any]
    validations: dict[str, LabelVerdict]


@dataclass(frozen=True)
class GuidelinesUpdate:
    """The guidelines version recorded and the rescoring run now (if asked for)."""

    change: GuidelinesVersion
    rescore: RescoreResult | None = None


@dataclass(frozen=True)
class NewClaimsResult:
    """The claims ingested (target -> claim ids) and the calibrations brought up to date."""

    ingested: dict[str, list[int]]
    runs: list[Calibrated]


@dataclass(frozen=True)
class WatchResult:
    """What the watch flow found: label files, a guidelines edit, runs a dead process left."""

    labels: LabelUpdateResult
    guidelines: GuidelinesUpdate
    abandoned: list[int]


@dataclass(frozen=True)
class EmbedStage:
    """The embed stage's figures (``metrics/embed.json``)."""

    n_claims: int
    n_embedded_now: int


@dataclass(frozen=True)
class ScoreStage:
    """The score stage's keys (``metrics/scores.json``), read back by the calibrate stage."""

    n_claims: int
    keys: list[ScoredKey]


@dataclass(frozen=True)
class CalibrateStage:
    """The calibrate stage's runs and the lineages its verdicts blocked (``metrics/calibration.json``),
    read back by the evaluate stage."""

    runs: list[Calibrated]
    blocked: list[str]
