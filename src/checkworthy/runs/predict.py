"""``checkworthy predict``: the recommended path for a team's own claims.

L has ``id,text,label``, U ``id,text[,label]``. Both are validated like ``calibrate``'s files
(same reader, same one-line errors) before anything is stored; the recommended model then scores
every text that has no stored score yet, and U is calibrated against L with the recommended
correction and interval, through the same store, lineage and run as ``calibrate``. What is
recommended lives in params.yaml (``predict:``, :class:`checkworthy.settings.PredictSettings`) and
docs/method.md; labels that are not English are scored by ``predict.model_other_languages``
(:func:`for_language`), and a lineage whose own model was promoted (``checkworthy adapt``) uses its
champion. A lineage calibrates in one embedding space (``--embedding``, :func:`lineage_embedding`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from checkworthy.config import ROOT
from checkworthy.errors import UsageError
from checkworthy.runs.embedding import AUTO, auto_space, english_labels
from checkworthy.runs.own_scores import (
    CalibrateOutcome,
    Row,
    UserFile,
    calibrate_stored,
    check_distinct_ids,
    check_k,
    read_scored_csv,
    store_files,
)
from checkworthy.runs.scoring import score_missing
from checkworthy.scorers.base import Scorer
from checkworthy.scorers.embedders import MODELS
from checkworthy.scorers.registry import PromptInfo, configured_scorer
from checkworthy.settings import PredictSettings, Settings, parse_section
from checkworthy.store import model_registry as registry
from checkworthy.store.engine import get_engine
from checkworthy.store.lineages import lineage_datasets, lineage_space
from checkworthy.store.run_spec import RunMethods

#: the score kind an adapted model is calibrated with
SCORE_KIND = "p_positive"


class Recommended(PredictSettings):
    """The recommended model, score kind and calibration: params.yaml's ``predict:`` (its fields and
    defaults are :class:`checkworthy.settings.PredictSettings`', declared once) with the options
    given on the command line (checked when :attr:`methods` is read)."""

    @property
    def methods(self) -> RunMethods:
        """How U is calibrated (checked when built: one-line ``ValueError``)."""
        return RunMethods(self.k, self.alpha, self.threshold, self.interval, correction=self.correction,
                          prior=self.prior, review_risk=self.review_risk, max_risk=self.max_risk,
                          delta=self.delta, knn=self.knn, ef_search=self.ef_search)

    @classmethod
    def of(cls, section: PredictSettings, **overrides: Any) -> Recommended:
        """The ``predict:`` section, then the options given (None: not given)."""
        return cls(**section.model_dump()).but(**{k: v for k, v in overrides.items() if v is not None})

    def but(self, **changes: Any) -> Recommended:
        """This calibration with ``changes`` (like :func:`dataclasses.replace`; the method names are
        checked by :attr:`methods`, as the command line's options are)."""
        return self.model_copy(update=changes)

    @classmethod
    def from_params(cls, params: Mapping[str, Any], **overrides: Any) -> Recommended:
        """:meth:`of` a params mapping's ``predict:`` section (as the flows hold params)."""
        return cls.of(parse_section(PredictSettings, params.get("predict") or {}, "predict"), **overrides)


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
    engine: Engine, files: tuple[UserFile, UserFile], rows: tuple[list[Row], list[Row]], out: Path,
    rec: Recommended, scored_by: tuple[Scorer, PromptInfo], lineage: str | None = None,
) -> CalibrateOutcome:
    """Store L and U (``files``, each hashed once, and their ``rows`` from :func:`read_files`),
    score their texts with ``scored_by``'s scorer (checked by :func:`check_score_kind`), calibrate
    U against L (of ``lineage``, default L's own) in ``rec``'s embedding space (``auto``: the
    lineage's, else MiniLM; :func:`predict` resolves it first), write ``out``."""
    (labelled, unlabelled), (lab, unl) = files, rows
    scorer, prompt = scored_by
    stored = store_files(engine, labelled, lab, unlabelled, unl, lineage,
                         None if rec.embedding == AUTO else rec.embedding)
    _, _, keys = score_missing(engine, scorer, stored.text_hashes, prompt)
    return calibrate_stored(engine, stored, keys[rec.score_kind], rec.methods, out)


@dataclass(frozen=True)
class PredictRequest:
    """What ``checkworthy predict`` was asked: the two files, the output, the lineage's name
    (None: L's own), and whether a model was named (else the lineage's champion, if it has one)."""

    labelled: Path
    unlabelled: Path
    out: Path
    lineage: str | None = None
    model_given: bool = False
    #: the option that named the embedding (``--embedding``, else params.yaml's ``predict.embedding``)
    embedding_option: str = "predict.embedding"


@dataclass(frozen=True)
class Predicted:
    """What ``predict`` produced, and the recommendation it used (the champion's model, if so)."""

    outcome: CalibrateOutcome
    rec: Recommended


def predict(request: PredictRequest, settings: Settings, rec: Recommended) -> Predicted:
    """``checkworthy predict`` after its options: validate both files, refuse a ``--name`` of other
    labels, take the lineage's champion unless a model was named, build and check the scorer (a
    :class:`UsageError` naming ``--model``), then :func:`predict_files`. Each file is hashed once,
    and nothing is stored before every check has passed. Whether the labels are English
    (:func:`~checkworthy.runs.embedding.english_labels`) is decided once, for the space and the model."""
    lab, unl = read_files(request.labelled, request.unlabelled, rec.k)
    files = UserFile.of(request.labelled), UserFile.of(request.unlabelled)
    engine = get_engine()
    check_lineage_name(engine, request.lineage, files[0])
    english = english_labels([r.text for r in lab])  # decided once: the space and the model follow it
    rec = rec.but(embedding=lineage_embedding(engine, rec.embedding, request.lineage or files[0].lineage,
                                              english, request.embedding_option))
    params = settings.params
    if not request.model_given:
        rec = for_language(rec, english)
        params, rec = with_champion(engine, params, rec, request.lineage or files[0].lineage)
    try:
        scorer, prompt = configured_scorer(params, rec.model)
        check_score_kind(rec, scorer)
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(f"--model {rec.model}: {exc}") from None
    outcome = predict_files(engine, files, (lab, unl), request.out, rec, (scorer, prompt),
                            lineage=request.lineage)
    return Predicted(outcome, rec)


def check_embedding(value: str, option: str = "--embedding") -> None:
    """``auto`` or a known embedding model, else a :class:`UsageError` naming ``option``."""
    if value != AUTO and value not in MODELS:
        raise UsageError(f"{option} {value}: unknown embedding; choose {AUTO} or one of {', '.join(MODELS)}")


def lineage_embedding(engine: Engine, embedding: str, lineage: str, english: bool,
                      option: str = "--embedding") -> str:
    """The space ``lineage`` calibrates in, checked before anything is stored: its recorded one
    (``embedding`` must be ``auto`` or the same: another would mix embedding spaces, refused as
    one line naming ``option``, the lineage and both spaces); for a new lineage ``embedding``, and
    for ``auto`` the one its labels call for (:func:`auto_space`; ``english``: whether they are English)."""
    check_embedding(embedding, option)
    with engine.connect() as conn:
        space = lineage_space(conn, lineage)
    if space is None:
        return auto_space(english) if embedding == AUTO else embedding
    if embedding not in (AUTO, space):
        raise UsageError(f"{option} {embedding}: lineage {lineage} is in {space}; calibrating it in "
                         f"{embedding} would mix embedding spaces (use {space} or {AUTO}, or another --name)")
    return space


def for_language(rec: Recommended, english: bool) -> Recommended:
    """``rec`` with ``model_other_languages`` as the model when the labels are not ``english``
    (:func:`checkworthy.runs.embedding.english_labels`, decided by the caller); English labels keep
    ``model``."""
    return rec if english else rec.but(model=rec.model_other_languages)


def check_lineage_name(engine: Engine, name: str | None, labelled: UserFile) -> None:
    """Refuse (before anything is stored) a ``--name`` that already names a lineage of other
    claims than ``labelled``'s: a lineage's runs, champion and served answers are of one file's labels."""
    if name is None:
        return
    with engine.connect() as conn:
        others = [d for d in lineage_datasets(conn, name) if d != labelled.dataset]
    if others:
        raise UsageError(f"--name {name}: already the lineage of other labels (dataset {others[0]}, not "
                         f"{labelled.path}); choose another name")


def artefact_root(root: str) -> Path:
    """A models root as params.yaml gives it: relative to the project root, or absolute."""
    path = Path(root)
    return path if path.is_absolute() else ROOT / path


def champion_params(params: Mapping[str, Any], row: Mapping[str, Any] | None) -> dict[str, Any]:
    """``params`` with a ``models:`` entry for a registry version whose artefact lives under its own
    root, so that the registry (:func:`~checkworthy.scorers.registry.configured_scorer`) and the
    server's scorer lookup find it."""
    out = dict(params)
    root = (row or {}).get("artefact", {}).get("root")
    if row is not None and root:
        entry = {"spec": row["spec"], "root": str(artefact_root(root))}
        out["models"] = [*(params.get("models") or []), entry]
    return out


def champion_model(params: Mapping[str, Any], row: Mapping[str, Any] | None,
                   english: bool = True) -> tuple[str, str]:
    """The model spec and score kind a lineage uses: its own champion's, else params.yaml ``predict:``
    (its ``model_other_languages`` when the lineage's labels are not ``english``: :func:`for_language`)."""
    if not adapted_champion(row):
        rec = for_language(Recommended.from_params(params), english)
        return rec.model, rec.score_kind
    assert row is not None
    return row["spec"], row["artefact"].get("score_kind", SCORE_KIND)


def adapted_champion(row: Mapping[str, Any] | None) -> bool:
    """Whether a lineage's champion is a model of its own (not params.yaml's recommended model,
    which stays whatever params.yaml recommends now)."""
    return row is not None and not row["artefact"].get("recommended")


def with_champion(engine: Engine, params: Mapping[str, Any], rec: Recommended, lineage: str
                  ) -> tuple[dict[str, Any], Recommended]:
    """``params`` and ``rec`` with the lineage's champion as the model (unchanged without one)."""
    with engine.connect() as conn:
        row = registry.champion(conn, lineage)
    if not adapted_champion(row):
        return dict(params), rec
    spec, kind = champion_model(params, row)
    return champion_params(params, row), rec.but(model=spec, score_kind=kind)
