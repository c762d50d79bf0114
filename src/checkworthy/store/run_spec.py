"""What a calibration run is: its spec (what is calibrated, and how), the provenance stored beside
it, its run key, and the one conversion between a spec and its ``calibration_runs`` row.

A spec validates itself when it is built (one-line ``ValueError``), so a bad method name or bound
is refused before anything is computed or stored; :class:`RunMethods` is its "how" alone, which
the command line builds to check its options before the store starts. The defaults written here
(the paper's correction above all) are the only copy: the store's SQL binds
:data:`DEFAULT_CORRECTION` for the runs that predate the ``correction`` param.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from checkworthy.config import EF_SEARCH, EMBED_MODEL
from checkworthy.data.versioning import git_rev
from checkworthy.method.corrections import CORRECTIONS
from checkworthy.method.intervals import INTERVAL_METHODS
from checkworthy.method.nnppi import THRESHOLD
from checkworthy.method.predictor_choice import PREDICTOR_RUNS
from checkworthy.method.selective import RISKS
from checkworthy.store.knn import KnnPath
from checkworthy.store.rows import ScoreKey, sha256_text

#: the paper's point correction: a run's default, and what a run that records none used
DEFAULT_CORRECTION = "paper"
#: correction names a run accepts: the registry's, ``cv``, the predictors and ``auto``
RUN_CORRECTIONS = (*CORRECTIONS, "cv", *PREDICTOR_RUNS, "auto")
#: the class prior decisions are made for: L's (the paper's) or the batch's
PRIORS = ("labelled", "batch")


@dataclass(frozen=True)
class RunMethods:
    """How a calibration is computed (every field of :class:`RunSpec` but which claims, labels
    and scores); refuses unknown method names, bounds outside (0, 1) and an unknown kNN path or
    ef_search when built."""

    k: int
    alpha: float = 0.05
    threshold: float = THRESHOLD
    interval_method: str = "z"
    embed_model: str = EMBED_MODEL
    #: point correction (a :data:`RUN_CORRECTIONS` name)
    correction: str = DEFAULT_CORRECTION
    #: the class prior decisions are made for: ``labelled`` (L's, the paper's) or ``batch`` (the
    #: batch's share estimated under label shift, :func:`checkworthy.method.prevalence.prior_threshold`)
    prior: str = "labelled"
    #: decide or review (:mod:`checkworthy.method.selective`): the risk bounded among the claims
    #: decided automatically, the bound, and the chance over L that the chosen rule exceeds it
    review_risk: str = "error"
    max_risk: float = 0.1
    delta: float = 0.1
    #: how neighbours are found (:class:`checkworthy.store.knn.KnnPath`): ``exact`` or ``hnsw``
    #: with its ``ef_search``; an HNSW run records its recall against the exact path
    knn: str = "exact"
    ef_search: int = EF_SEARCH

    def __post_init__(self) -> None:
        self.knn_path  # noqa: B018 - KnnPath refuses an unknown path or ef_search
        if self.review_risk not in RISKS:
            raise ValueError(f"unknown review risk {self.review_risk!r}; choose from {list(RISKS)}")
        for name, value in (("max risk", self.max_risk), ("delta", self.delta)):
            if not 0 < value < 1:
                raise ValueError(f"{name} must lie in (0, 1), got {value}")
        if self.prior not in PRIORS:
            raise ValueError(f"unknown prior {self.prior!r}; choose from {list(PRIORS)}")
        if self.interval_method not in INTERVAL_METHODS:
            raise ValueError(f"unknown interval {self.interval_method!r}; "
                             f"choose from {sorted(INTERVAL_METHODS)}")
        if self.correction not in RUN_CORRECTIONS:
            raise ValueError(f"unknown correction {self.correction!r}; choose from {sorted(RUN_CORRECTIONS)}")

    @property
    def knn_path(self) -> KnnPath:
        return KnnPath(self.knn, self.ef_search)


@dataclass(frozen=True)
class RunSpec:
    """Everything that determines a calibration's result: what (target claims, label set, score
    key) and how (the fields of :class:`RunMethods`, checked when the spec is built). Every field
    is part of the run key (:func:`run_key`)."""

    target: str
    claim_ids: tuple[int, ...]
    label_set_id: int
    key: ScoreKey
    k: int
    alpha: float = 0.05
    threshold: float = THRESHOLD
    interval_method: str = "z"
    embed_model: str = EMBED_MODEL
    correction: str = DEFAULT_CORRECTION
    prior: str = "labelled"
    review_risk: str = "error"
    max_risk: float = 0.1
    delta: float = 0.1
    knn: str = "exact"
    ef_search: int = EF_SEARCH

    def __post_init__(self) -> None:
        self.methods  # noqa: B018 - RunMethods refuses what no run may use

    @classmethod
    def of(cls, target: str, claim_ids: Sequence[int], label_set_id: int, key: ScoreKey,
           methods: RunMethods) -> RunSpec:
        """The spec calibrating ``claim_ids`` against ``label_set_id`` under ``key``, by ``methods``."""
        return cls(target, tuple(claim_ids), label_set_id, key, **asdict(methods))

    @property
    def methods(self) -> RunMethods:
        return RunMethods(**{f.name: getattr(self, f.name) for f in fields(RunMethods)})

    @property
    def knn_path(self) -> KnnPath:
        return KnnPath(self.knn, self.ef_search)

    def to_row(self) -> dict[str, Any]:
        """The spec as a ``calibration_runs`` row stores it: columns, and the ``params`` it adds
        (its correction). The prior, the review rule and the kNN path are recorded in ``params``
        when the run completes (what was fitted with them); :meth:`from_row` reads them back."""
        return {"target": self.target, "claim_ids": sorted({int(i) for i in self.claim_ids}),
                "label_set_id": self.label_set_id, "model_id": self.key.model_id,
                "prompt_version": self.key.prompt_version, "params_hash": self.key.params_hash,
                "score_kind": self.key.score_kind, "embed_model": self.embed_model, "k": self.k,
                "alpha": self.alpha, "threshold": self.threshold, "interval_method": self.interval_method,
                "params": {"correction": self.correction}}

    @classmethod
    def from_row(cls, run: Mapping[str, Any], label_set_id: int, claim_ids: Sequence[int]) -> RunSpec:
        """The calibration a stored run made, on ``label_set_id`` and ``claim_ids`` (a run rerun
        on another label set or on its target's current claims); a run that recorded no
        correction, prior, review rule or kNN path used the defaults."""
        params = run["params"] or {}
        review = params.get("review") or {}
        path = KnnPath.recorded_by(params.get("knn"))
        return cls(
            target=run["target"], claim_ids=tuple(sorted(claim_ids)), label_set_id=label_set_id,
            key=ScoreKey(run["model_id"], run["prompt_version"], run["params_hash"], run["score_kind"]),
            k=run["k"], alpha=run["alpha"], threshold=run["threshold"],
            interval_method=run["interval_method"], embed_model=run["embed_model"],
            correction=params.get("correction", DEFAULT_CORRECTION),
            prior="batch" if (params.get("prior") or {}).get("mode") == "batch" else "labelled",
            review_risk=review.get("risk", "error"), max_risk=review.get("max_risk", 0.1),
            delta=review.get("delta", 0.1), knn=path.path, ef_search=path.ef_search,
        )


@dataclass
class RunContext:
    """Provenance attached to a run (not part of its identity); the code revision is the
    checkout's (or the image's) unless given, so no run is stored without one."""

    flow_run_id: str | None = None
    code_rev: str = field(default_factory=git_rev)
    data_version_id: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def run_key(spec: RunSpec, fingerprint: str) -> str:
    """sha256 over every input of the run."""
    body = asdict(spec) | {"claim_ids": sorted(spec.claim_ids), "fingerprint": fingerprint}
    body["label_set_id"] = None  # the fingerprint, not the row id, identifies the labels
    return key_of(body)


#: how drift acts on a run's decisions (:func:`checkworthy.method.drift.drift_status`), in every run
#: key: a run stored before drift acted sent other claims to a person, so it is never reused
DRIFT_ACTS = "beyond the radius; all of a batch of another kind"
#: what the decide-or-review rule is certified on (:func:`checkworthy.method.selective.fit_review`'s
#: weights), in every run key: a run stored when the rule was certified on all of L automated other
#: claims, so it is never reused
REVIEW_ON = "the batch's labelled neighbours: kNN density ratio weights, Kish effective n"
#: when the batch's share is estimated (:func:`checkworthy.method.prevalence.share_positive`), in the
#: key of a run deciding for the batch's prior only: one stored when a degenerate estimate (no signal
#: on L, a zero-width interval at 0 or 1) moved its threshold is never reused
SHARE_ESTIMABLE = "TPR > FPR at the level; not beyond [0, 1]"


def key_of(body: dict[str, Any]) -> str:
    """The run key of a spec's fields, of how drift acts (:data:`DRIFT_ACTS`) and of what the rule is
    certified on (:data:`REVIEW_ON`), and for the batch's prior of when its share is estimated
    (:data:`SHARE_ESTIMABLE`); L's prior and the exact kNN, the defaults, are left out, as before
    those fields existed."""
    if body.get("prior") == "labelled":
        body = {k: v for k, v in body.items() if k != "prior"}
    elif body.get("prior") == "batch":
        body = body | {"share_estimable": SHARE_ESTIMABLE}
    if body.get("knn", "exact") == "exact":
        body = {k: v for k, v in body.items() if k not in ("knn", "ef_search")}
    return sha256_text(json.dumps(body | {"drift_acts": DRIFT_ACTS, "review_on": REVIEW_ON},
                                  sort_keys=True, default=str))
