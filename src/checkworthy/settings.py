"""params.yaml as one typed, validated object: :class:`Settings`, parsed once by :func:`load_settings`.

Each section of params.yaml is a model of its own (:class:`PredictSettings` for ``predict:``,
:class:`AdaptSection` for ``adapt:``, ...), and the models' defaults are the only defaults: they
are params.yaml's values (tests/test_settings.py holds them together), so a section left out of a
params file means what params.yaml says. A value of the wrong type or outside its range, or a key
no section knows, is refused as one :class:`~checkworthy.errors.DataError` line naming the file and
the field (``params.yaml, field 'predict.k': must be greater than 0, got 0``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from checkworthy.config import EF_SEARCH, PARAMS_FILE, WINDOW_SECONDS, load_params
from checkworthy.errors import DataError

PositiveInt = Annotated[int, Field(gt=0)]
OpenUnit = Annotated[float, Field(gt=0, lt=1)]
ClosedUnit = Annotated[float, Field(ge=0, le=1)]
EfSearch = Annotated[int, Field(ge=1, le=1000)]
#: what predict decides for (:data:`checkworthy.store.run_spec.PRIORS`)
Prior = Literal["labelled", "batch", "f1", "auto"]
#: what ``adapt`` trains (:func:`checkworthy.runs.adapt.adapt_start`)
Trainer = Literal["auto", "minilm-lora", "stack"]


class Section(BaseModel):
    """A params.yaml section: immutable, strictly typed (``k: "5"`` is refused, not read as 5),
    unknown keys refused (a misspelt option would otherwise be silently ignored)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class PredictSettings(Section):
    """``predict:``: the recommended model, score kind and calibration of ``checkworthy predict``
    (docs/method.md, "Recommended path"). Method names are checked where they are looked up
    (:class:`checkworthy.store.run_spec.RunMethods`)."""

    model: str = "classifier:minilm-student"
    score_kind: str = "p_positive"
    correction: str = "auto"
    interval: str = "mondrian"
    k: PositiveInt = 10
    alpha: OpenUnit = 0.05
    threshold: ClosedUnit = 0.5
    prior: Prior = "auto"
    review_risk: str = "error"
    max_risk: OpenUnit = 0.1
    delta: OpenUnit = 0.1
    knn: Literal["exact", "hnsw"] = "exact"
    ef_search: EfSearch = EF_SEARCH
    #: a new lineage's embedding space: ``auto`` (MiniLM for English labels, else USE multilingual
    #: v3; docs/method.md, "A lineage's embedding space") or a model's name
    #: (:data:`checkworthy.scorers.embedders.MODELS`, checked where it is looked up)
    embedding: str = "auto"
    #: the model of a lineage whose labels are not English (:func:`checkworthy.runs.predict.
    #: english_labels`); ``model`` stays English lineages' (docs/method.md, "Every language")
    model_other_languages: str = "classifier:multilingual-tweets"


class AdaptSection(Section):
    """``adapt:``: how ``checkworthy adapt`` fine-tunes a lineage's own model. The training options
    params.yaml leaves out (None) keep the trainer's defaults
    (:class:`checkworthy.runs.adapt.AdaptSettings`)."""

    start: str = "minilm-lora"
    #: what a lineage's model is: ``auto`` (a MiniLM LoRA for English labels without a slower model,
    #: else the stack), ``minilm-lora`` or ``stack`` (:func:`checkworthy.runs.adapt.adapt_start`)
    trainer: Trainer = "auto"
    folds: Annotated[int, Field(ge=2)] = 3
    epochs: PositiveInt = 1
    root: str = "models/classifier"
    level: OpenUnit = 0.95
    every_n_labels: PositiveInt = 100
    #: a slower, better classifier (e.g. ``classifier:gemma-lora-ml``) the lineage's stack also
    #: weighs, for the claims its cheap stack is least sure of (None: the cheap stack alone)
    slow_model: str | None = None
    #: the share of the labelled claims (nearest the cheap stack's 0.5) whose band the slower model reads
    slow_share: Annotated[float, Field(gt=0, le=1)] = 1.0
    lr: Annotated[float, Field(gt=0)] | None = None
    head_lr: Annotated[float, Field(gt=0)] | None = None
    batch_size: PositiveInt | None = None
    val_share: OpenUnit | None = None
    n_boot: PositiveInt | None = None


class ModelEntry(Section):
    """A ``models:`` entry: a spec, an optional sampling preset and name, and the backend's own
    options (kept as given: each backend takes the ones it knows)."""

    model_config = ConfigDict(frozen=True, extra="allow", strict=True)

    spec: str
    sampling: str | None = None
    name: str | None = None


class SamplingEntry(Section):
    """``sampling: DATASET:``: the calibration set's size per class (None: the paper's)."""

    n_per_class: PositiveInt | None = None


class ScoringSection(Section):
    """``scoring:``: options every model is scored with (a ``models:`` entry's own win)."""

    model_config = ConfigDict(frozen=True, extra="allow", strict=True)

    batch_size: PositiveInt = 12
    chunk_size: PositiveInt = 96


class ScaleOut(Section):
    """``scale_out:``: where embedding and scoring run (``checkworthy.flows.task_runners``)."""

    dask: str | None = None
    workers: PositiveInt = 2
    chunk_size: PositiveInt = 96


class ValidationSection(Section):
    """``validation:``: the label-validation suite's bounds (:mod:`checkworthy.data.validation`)."""

    min_rows: PositiveInt = 100
    max_rows: PositiveInt = 100_000
    positive_rate: list[ClosedUnit] = [0.3, 0.7]

    @field_validator("positive_rate")
    @classmethod
    def _a_range(cls, value: list[float]) -> list[float]:
        if len(value) != 2 or value[0] > value[1]:
            raise ValueError(f"must be [low, high] with low <= high, got {value!r}")
        return value


class Serving(Section):
    """``serving:``: how the API records the requests it calibrates (docs/api.md)."""

    window_seconds: Annotated[float, Field(gt=0)] = WINDOW_SECONDS

    @field_validator("window_seconds")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError(f"must be a positive number of seconds, got {value!r}")
        return value


S = TypeVar("S", bound=Section)


def _default_models() -> list[ModelEntry]:
    return [ModelEntry(spec="embedded:gemma3-270m"), ModelEntry(spec="embedded:gemma3-270m", sampling="t0.1"),
            ModelEntry(spec="classifier:minilm-lr"), ModelEntry(spec="classifier:minilm-lora"),
            ModelEntry(spec="classifier:minilm-student")]


def _default_sampling() -> dict[str, SamplingEntry]:
    return {"claimbuster": SamplingEntry(n_per_class=None), "clef2024": SamplingEntry(n_per_class=1203)}


class Settings(Section):
    """Every section of a params file, typed. ``params`` keeps the mapping as read (``extends:``
    applied) for what still takes a mapping: the scorer registry's per-model options and the flows."""

    seed: int = 2026
    datasets: list[str] = ["claimbuster", "clef2024"]
    k: list[PositiveInt] = [3, 5, 10]
    alpha: OpenUnit = 0.05
    threshold: ClosedUnit = 0.5
    interval: str = "z"
    correction: str = "paper"
    knn: Literal["exact", "hnsw"] = "exact"
    ef_search: EfSearch = EF_SEARCH
    compare: bool = True
    models: list[ModelEntry] = Field(default_factory=_default_models)
    predict: PredictSettings = PredictSettings()
    adapt: AdaptSection = AdaptSection()
    sampling: dict[str, SamplingEntry] = Field(default_factory=_default_sampling)
    scoring: ScoringSection = ScoringSection()
    scale_out: ScaleOut = ScaleOut()
    validation: ValidationSection = ValidationSection()
    serving: Serving = Serving()
    #: the report's options (``checkworthy.flows``: passed on as given)
    report: dict[str, Any] | None = None

    _params: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def params(self) -> dict[str, Any]:
        """The params file's mapping as read (a copy)."""
        return dict(self._params)

    def labelled_sizes(self) -> dict[str, int | None]:
        """Each dataset's calibration-set size per class (``sampling: NAME: n_per_class``)."""
        return {name: entry.n_per_class for name, entry in self.sampling.items()}

    @classmethod
    def parse(cls, params: dict[str, Any], path: Path | str = PARAMS_FILE) -> Settings:
        """``params`` (a params file's mapping) validated; the first problem is a one-line
        :class:`DataError` naming ``path`` and the field."""
        settings = parse_section(cls, params, "", path)
        settings._params = dict(params)
        return settings


def parse_section(cls: type[S], value: Any, name: str, path: Path | str = PARAMS_FILE) -> S:
    """One section (``name``, "" for the whole file) validated as ``cls``; the first problem is a
    one-line :class:`DataError` naming ``path`` and the field."""
    try:
        return cls.model_validate(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = (name, *err["loc"]) if name else tuple(err["loc"])
        raise DataError(path, None, _field(loc) or None, _problem(err)) from None


def load_settings(path: Path | str = PARAMS_FILE) -> Settings:
    """The params file at ``path`` (``extends:`` applied, models checked by
    :func:`checkworthy.config.load_params`) as :class:`Settings`."""
    return Settings.parse(load_params(Path(path)), path)


def _field(loc: tuple[int | str, ...]) -> str:
    """``('models', 2, 'spec')`` -> ``models[3].spec`` (entries 1-based, as check_models names them)."""
    out = ""
    for part in loc:
        out += f"[{part + 1}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def _problem(err: Any) -> str:
    """A pydantic error in the project's words: ``must be ..., got VALUE``."""
    if err["type"] == "extra_forbidden":
        return "not a known option (a misspelt key?)"
    if err["type"] == "missing":
        return "required"
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        return msg.removeprefix("Value error, ")
    msg = msg.removeprefix("Input should be ").removeprefix("input should be ")
    return f"must be {msg}, got {err['input']!r}"
