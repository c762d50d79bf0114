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
from dataclasses import asdict, dataclass, field
from typing import Any

from checkworthy.config import EF_SEARCH, EMBED_MODEL
from checkworthy.data.versioning import git_rev
from checkworthy.method.corrections import CORRECTIONS
from checkworthy.method.decision_cut import PriorDecision
from checkworthy.method.drift import Drift
from checkworthy.method.intervals import INTERVAL_METHODS
from checkworthy.method.nnppi import THRESHOLD
from checkworthy.method.predictor_choice import PREDICTOR_RUNS
from checkworthy.method.selective import RISKS, ReviewRule
from checkworthy.store.knn import KnnPath
from checkworthy.store.rows import ScoreKey, sha256_text

#: the paper's point correction: a run's default, and what a run that records none used
DEFAULT_CORRECTION = "paper"
#: correction names a run accepts: the registry's, ``cv``, the predictors and ``auto``
RUN_CORRECTIONS = (*CORRECTIONS, "cv", *PREDICTOR_RUNS, "auto")
#: what decisions are made for: L's class prior (the paper's 0.5 on theta), the batch's, the cut
#: on theta with the best positive-class F1 on L (:mod:`checkworthy.method.decision_cut`), or that
#: cut where L's share is the batch's and L's prior elsewhere (``auto``)
PRIORS = ("labelled", "batch", "f1", "auto")


@dataclass(frozen=True)
class RunMethods:
    """How a calibration is computed (every field of :class:`RunSpec` but which claims, labels
    and scores); refuses unknown method names, bounds outside (0, 1) and an unknown kNN path or
    ef_search when built."""

    k: int
    alpha: float = 0.05
    threshold: float = THRESHOLD
    interval_method: str = "z"
    #: the embedding space neighbours are found in (its lineage's: migration 0022)
    embed_model: str = EMBED_MODEL
    #: point correction (a :data:`RUN_CORRECTIONS` name)
    correction: str = DEFAULT_CORRECTION
    #: the class prior decisions are made for: ``labelled`` (L's, the paper's), ``batch`` (the
    #: batch's share estimated under label shift, :func:`checkworthy.method.prevalence.prior_threshold`),
    #: ``f1`` (the cut on theta with the best positive-class F1 on L) or ``auto`` (``f1`` where L's share
    #: is the batch's, else ``labelled``: :func:`checkworthy.method.decision_cut.auto_prior`)
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


#: the keys of a run's ``params`` that :class:`RunRecord` holds in fields of their own
_RECORD_FIELDS = ("correction", "n_claims", "n_calibrated", "n_without_score", "knn", "review", "drift",
                  "prevalence", "prior", "auto_choice")


@dataclass(frozen=True)
class RunRecord:
    """A run's ``params`` JSON, typed: what its spec adds (the correction), what the run counted and
    recorded when it completed (its kNN path and recall, decide-or-review rule, drift figure, the
    batch's share, the prior decided for, the ``auto`` choice) and, in ``extra``, whatever else it
    recorded (what was fitted, its mode's counts, its provenance). :meth:`from_json` reads any
    stored run (a key it lacks: the default of the runs that predate it); :meth:`to_json` writes
    only what is set, so that a record read back is written back unchanged."""

    #: the point correction (None: not recorded here; a run that records none used the paper's)
    correction: str | None = None
    n_claims: int | None = None
    n_calibrated: int | None = None
    n_without_score: int | None = None
    #: how neighbours were found (:meth:`checkworthy.store.knn.KnnPath.as_dict`), with an HNSW
    #: run's recall@k on its sample
    knn: dict[str, Any] | None = None
    #: the decide-or-review rule (:meth:`ReviewRule.as_dict`) and its ``automated_share``
    review: dict[str, Any] | None = None
    #: the batch's drift figure (:func:`checkworthy.method.drift.drift`)
    drift: Drift | None = None
    #: the batch's share of label 1 (:meth:`checkworthy.method.prevalence.Prevalence.as_dict`)
    prevalence: dict[str, Any] | None = None
    #: what the run decided at when not at its own threshold for L's prior
    prior: PriorDecision | None = None
    #: what ``auto`` chose on L: ``chosen`` and its ``cv_f1_positive`` figures
    auto_choice: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, run: Mapping[str, Any]) -> RunRecord:
        """The record of a ``calibration_runs`` row (its ``params``)."""
        return cls.from_json(run["params"])

    @classmethod
    def from_json(cls, params: Mapping[str, Any] | None) -> RunRecord:
        """The record of a stored run's ``params`` (None: a run that recorded none)."""
        params = params or {}
        known: dict[str, Any] = {k: params[k] for k in _RECORD_FIELDS if params.get(k) is not None}
        if "drift" in known:
            known["drift"] = Drift.from_dict(known["drift"])
        if "prior" in known:
            known["prior"] = PriorDecision.from_dict(known["prior"])
        return cls(**known, extra={k: v for k, v in params.items() if k not in _RECORD_FIELDS})

    def to_json(self) -> dict[str, Any]:
        """The record as ``params`` stores it: every field that is set (the drift figure and the
        prior by their ``as_dict``), then ``extra``."""
        out = {k: getattr(self, k) for k in _RECORD_FIELDS if getattr(self, k) is not None}
        return {k: v.as_dict() if isinstance(v, Drift | PriorDecision) else dict(v) if isinstance(v, Mapping)
                else v for k, v in out.items()} | dict(self.extra)

    def __or__(self, other: RunRecord) -> RunRecord:
        """This record with what ``other`` records added (``other``'s where both record a key),
        as the store adds a completing run's record to its params."""
        return RunRecord.from_json(self.to_json() | other.to_json())

    @property
    def used_correction(self) -> str:
        """The run's correction (a run that records none used the paper's)."""
        return self.correction or DEFAULT_CORRECTION

    @property
    def rule(self) -> ReviewRule | None:
        """The run's decide-or-review rule (None: it has none)."""
        return ReviewRule.from_dict(self.review) if self.review else None

    @property
    def automated_share(self) -> float | None:
        """The share of the run's claims its rule decided automatically (None: no rule, or none
        recorded)."""
        return (self.review or {}).get("automated_share")

    @property
    def knn_path(self) -> KnnPath:
        """How the run found its neighbours (a run that records none: exact)."""
        return KnnPath.recorded_by(self.knn)

    @property
    def batch_prior(self) -> bool:
        """Whether the run decided for the batch's prior."""
        return self.prior_mode == "batch"

    @property
    def prior_mode(self) -> str:
        """What the run decided for (:data:`PRIORS`; a run that records none: ``labelled``)."""
        return self.prior.mode if self.prior else "labelled"

    def threshold_on_theta(self, threshold: float) -> float:
        """The threshold the run's decisions are theta >= (the run's own ``threshold`` unless it
        decided for the batch's prior or for F1 on L)."""
        t = self.prior.threshold_on_theta if self.prior else None
        return threshold if t is None else float(t)

    @property
    def chosen(self) -> str | None:
        """The correction ``auto`` chose (None: not an ``auto`` run, or one that recorded none)."""
        return (self.auto_choice or {}).get("chosen")


@dataclass(frozen=True)
class RunSpec:
    """Everything that determines a calibration's result: what (target claims, label set, score
    key) and how (its :class:`RunMethods`, checked when they are built). Every field is part of
    the run key (:func:`run_key`)."""

    target: str
    claim_ids: tuple[int, ...]
    label_set_id: int
    key: ScoreKey
    methods: RunMethods

    @classmethod
    def of(cls, target: str, claim_ids: Sequence[int], label_set_id: int, key: ScoreKey,
           methods: RunMethods) -> RunSpec:
        """The spec calibrating ``claim_ids`` against ``label_set_id`` under ``key``, by ``methods``."""
        return cls(target, tuple(claim_ids), label_set_id, key, methods)

    def to_row(self) -> dict[str, Any]:
        """The spec as a ``calibration_runs`` row stores it: columns, and the ``params`` it adds
        (its correction). The prior, the review rule and the kNN path are recorded in ``params``
        when the run completes (what was fitted with them); :meth:`from_row` reads them back."""
        m = self.methods
        return {"target": self.target, "claim_ids": sorted({int(i) for i in self.claim_ids}),
                "label_set_id": self.label_set_id, "model_id": self.key.model_id,
                "prompt_version": self.key.prompt_version, "params_hash": self.key.params_hash,
                "score_kind": self.key.score_kind, "embed_model": m.embed_model, "k": m.k,
                "alpha": m.alpha, "threshold": m.threshold, "interval_method": m.interval_method,
                "params": RunRecord(correction=m.correction).to_json()}

    @classmethod
    def from_row(cls, run: Mapping[str, Any], label_set_id: int, claim_ids: Sequence[int]) -> RunSpec:
        """The calibration a stored run made, on ``label_set_id`` and ``claim_ids`` (a run rerun
        on another label set or on its target's current claims); a run that recorded no
        correction, prior, review rule or kNN path used the defaults."""
        record = RunRecord.of(run)
        review = record.review or {}
        path = record.knn_path
        methods = RunMethods(
            k=run["k"], alpha=run["alpha"], threshold=run["threshold"],
            interval_method=run["interval_method"], embed_model=run["embed_model"],
            correction=record.used_correction, prior=record.prior_mode,
            review_risk=review.get("risk", "error"), max_risk=review.get("max_risk", 0.1),
            delta=review.get("delta", 0.1), knn=path.path, ef_search=path.ef_search)
        key = ScoreKey(run["model_id"], run["prompt_version"], run["params_hash"], run["score_kind"])
        return cls(run["target"], tuple(sorted(claim_ids)), label_set_id, key, methods)


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
    return key_of(key_body(spec, sorted(spec.claim_ids), fingerprint))


def key_body(spec: RunSpec, claim_ids: list[int], fingerprint: str) -> dict[str, Any]:
    """What a run key hashes: the spec's what and its methods' fields side by side (as when the
    spec held them itself), its sorted ``claim_ids`` and the label set's ``fingerprint`` instead of
    the label set's row id."""
    return {"target": spec.target, "key": asdict(spec.key), "claim_ids": claim_ids,
            "label_set_id": None,  # the fingerprint, not the row id, identifies the labels
            "fingerprint": fingerprint} | asdict(spec.methods)


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
#: what the decide-or-review margin is compared to (:func:`checkworthy.method.selective.distance`)
#: and how the F1 cut weighs L, in the key of a run whose threshold may lie off 0.5 (another prior,
#: another threshold): one stored when the margin was ``|theta - threshold|`` automated other claims
MARGIN_ON = "each side of the threshold scaled to 0.5; the F1 cut with L weighted to the batch's share"


def key_of(body: dict[str, Any]) -> str:
    """The run key of a spec's fields, of how drift acts (:data:`DRIFT_ACTS`) and of what the rule is
    certified on (:data:`REVIEW_ON`), and for the batch's prior of when its share is estimated
    (:data:`SHARE_ESTIMABLE`), and where the threshold may lie off 0.5 of how the margin is measured
    (:data:`MARGIN_ON`); L's prior and the exact kNN, the defaults, are left out, as before those
    fields existed."""
    if body.get("prior") == "labelled":
        body = {k: v for k, v in body.items() if k != "prior"}
    elif body.get("prior") == "batch":
        body = body | {"share_estimable": SHARE_ESTIMABLE}
    if body.get("prior", "labelled") != "labelled" or body.get("threshold", 0.5) != 0.5:
        body = body | {"margin_on": MARGIN_ON}
    if body.get("knn", "exact") == "exact":
        body = {k: v for k, v in body.items() if k not in ("knn", "ef_search")}
    return sha256_text(json.dumps(body | {"drift_acts": DRIFT_ACTS, "review_on": REVIEW_ON},
                                  sort_keys=True, default=str))
