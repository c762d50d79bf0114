"""A non-English lineage's own model (``model_type`` :data:`LINEAGE_STACK`), cross-fitted.

``adapt`` of a lineage whose labels are not English (:func:`checkworthy.runs.embedding.english_labels`)
trains it: a class-balanced logistic regression over three logits, the shared multilingual model's
(:mod:`checkworthy.scorers.multilingual`, the ``name@version`` in the manifest), a char n-gram
TF-IDF head's and a USE multilingual v3 head's, both fitted on the lineage's labels (cross-fitted to
fit the stacker: :func:`checkworthy.runs.train_multilingual.fit_lineage_member`). Measured offline
(docs/method.md, "Every language: the multilingual predictor"), it beats the shared model and a
TF-IDF alone in every language.

With a slower model (``adapt.slow_model``, e.g. the multilingual Gemma LoRA) each member holds a
second stacker over four logits (the slower model's too), and the slower model reads only the
claims whose cheap stacked probability lies in a band around 0.5 fixed on the labels
(:mod:`checkworthy.method.cascade`; the whole range at ``adapt.slow_share`` 1): a cascade whose
score of a claim never depends on its batch.

Like :mod:`checkworthy.scorers.crossfit`, it is K + 1 members: ``fold-i`` fitted on the labels
outside fold i, ``full`` on all of them; a training text is scored by its fold's member, any other
text by ``full``, so the lineage's labelled claims get out-of-sample scores.

Artefact: ``<root>/<name>/<version>/{model.npz, manifest.json}``: every member's vocabulary, idf
weights and coefficients and each training text's fold (by its sha256), as numpy arrays read with
``allow_pickle=False``; the manifest holds the npz's sha256 (checked on load), the shared model's
``name@version`` and, with a slower model, its ``name@version`` and the band's half-width.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from checkworthy.method.cascade import in_band
from checkworthy.scorers.base import Score
from checkworthy.scorers.classifier import ARTEFACT_ROOT, LINEAGE_STACK, checked_file
from checkworthy.scorers.crossfit import FULL, member_name, text_key
from checkworthy.scorers.embedders import USE_MULTILINGUAL, dimension, embed
from checkworthy.scorers.lora_classifier import LoraArtefact, load_lora
from checkworthy.scorers.multilingual import (
    LinearHead,
    MultilingualModel,
    MultilingualScorer,
    load_multilingual,
    logit,
    p_scores,
    tfidf_vectoriser,
)
from checkworthy.scorers.onnx_runtime import runtime_identity


@dataclass(frozen=True)
class StackMember:
    """One member: a TF-IDF head, a USE head and the stacker over (shared logit, TF-IDF logit, USE logit)."""

    vocabulary: tuple[str, ...]
    idf: NDArray[np.float64]
    tfidf_head: LinearHead
    use_head: LinearHead
    stack: LinearHead

    @cached_property
    def vectoriser(self) -> Any:
        return tfidf_vectoriser(self.vocabulary, self.idf)

    def own_logits(self, texts: Sequence[str], use_vectors: NDArray[np.float32]) -> NDArray[np.float64]:
        """The (TF-IDF, USE) logits of ``texts`` (their USE vectors given): what the labels taught."""
        tfidf = logit(self.tfidf_head.proba(self.vectoriser.transform(list(texts))))
        return np.c_[tfidf, logit(self.use_head.proba(use_vectors))]

    def proba(self, texts: Sequence[str], shared_logit: NDArray[np.float64],
              use_vectors: NDArray[np.float32]) -> NDArray[np.float64]:
        """The stacked P(check-worthy) of ``texts`` given the shared model's logits and their USE vectors."""
        return self.stack.proba(np.c_[shared_logit, self.own_logits(texts, use_vectors)])


@dataclass(frozen=True)
class SlowPath:
    """The slower model a lineage's stack sends its uncertain claims to, the band that sends them,
    and each member's stacker over (shared, slower, TF-IDF, USE) logits."""

    #: ``name@version`` of the slower classifier
    ref: str
    model: LoraArtefact
    #: a claim is sent when its cheap stacked probability lies within this of 0.5 (0.5: every claim)
    half_width: float
    stacks: dict[str, LinearHead]


@dataclass
class LineageStack:
    """The members, the shared model they stack on, each training text's fold, and the slower model
    (None: the cheap stack alone)."""

    name: str
    version: str
    shared: MultilingualModel
    members: dict[str, StackMember]
    #: each training text's fold (1 to K), by :func:`~checkworthy.scorers.crossfit.text_key`
    folds: dict[str, int]
    manifest: dict[str, Any] = field(default_factory=dict)
    slow: SlowPath | None = None

    def member_of(self, text: str) -> str:
        """The member that scores ``text``: its fold's if it was a training text, else ``full``."""
        fold = self.folds.get(text_key(text))
        return FULL if fold is None else member_name(fold)

    def predict_proba(self, texts: Sequence[str], use_vectors: NDArray[np.float32]) -> NDArray[np.float64]:
        """P(check-worthy) of ``texts`` (their USE vectors given): :meth:`predict`'s first part."""
        return self.predict(texts, use_vectors)[0]

    def predict(self, texts: Sequence[str], use_vectors: NDArray[np.float32]
                ) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
        """P(check-worthy) of ``texts`` (their USE vectors given), each from the member that scores it:
        the cheap stack's, or within the band the stack over the slower model's logit too; and
        whether each was sent to the slower model."""
        shared = logit(self.shared.predict_proba(texts, use_vectors))
        who = np.array([self.member_of(t) for t in texts])
        own = np.zeros((len(texts), 2), dtype=np.float64)
        out = np.zeros(len(texts), dtype=np.float64)
        for name in np.unique(who):
            idx = np.flatnonzero(who == name)
            own[idx] = self.members[str(name)].own_logits([texts[int(i)] for i in idx], use_vectors[idx])
            out[idx] = self.members[str(name)].stack.proba(np.c_[shared[idx], own[idx]])
        if self.slow is None:
            return out, np.zeros(len(texts), dtype=bool)
        band = in_band(out, self.slow.half_width)
        sent = np.flatnonzero(band)
        if sent.size:
            slow = logit(self.slow.model.predict_proba([texts[int(i)] for i in sent]))
            for name in np.unique(who[sent]):
                part = who[sent] == name
                idx = sent[part]
                out[idx] = self.slow.stacks[str(name)].proba(np.c_[shared[idx], slow[part], own[idx]])
        return out, band


def stack_arrays(members: Mapping[str, StackMember], folds: Mapping[str, int],
                 slow_stacks: Mapping[str, LinearHead] | None = None) -> dict[str, NDArray[Any]]:
    """The arrays :func:`load_lineage_stack` reads back (``model.npz``); ``slow_stacks``: each
    member's stacker over the slower model's logit too (None: no slower model)."""
    keys = sorted(folds)
    arrays: dict[str, NDArray[Any]] = {"members": np.array(sorted(members), dtype=str),
                                       "fold_texts": np.array(keys, dtype=str),
                                       "fold_of": np.array([folds[k] for k in keys], dtype=np.int64)}
    for m, s in members.items():
        arrays |= {f"{m}.vocabulary": np.array(s.vocabulary, dtype=str), f"{m}.idf": s.idf,
                   f"{m}.tfidf": np.r_[s.tfidf_head.coef, s.tfidf_head.intercept],
                   f"{m}.use": np.r_[s.use_head.coef, s.use_head.intercept],
                   f"{m}.stack": np.r_[s.stack.coef, s.stack.intercept]}
    for m, head in (slow_stacks or {}).items():
        arrays[f"{m}.slow_stack"] = np.r_[head.coef, head.intercept]
    return arrays


def _head(row: NDArray[Any]) -> LinearHead:
    """A :class:`LinearHead` from its coefficients followed by its intercept."""
    return LinearHead(row[:-1].astype(np.float64), float(row[-1]))


def load_lineage_stack(ref: str, root: Path = ARTEFACT_ROOT) -> LineageStack:
    """Load ``name`` (latest) or ``name@version``, the shared model it stacks on and its slower model
    if it has one (both from the project's models); ``model.npz`` must match the manifest's sha256."""
    checked = checked_file(ref, "model", root)
    with np.load(io.BytesIO(checked.data), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    members = {}
    for m in arrays["members"].tolist():
        use = _head(arrays[f"{m}.use"])
        if use.coef.shape != (dimension(USE_MULTILINGUAL),):
            raise ValueError(f"classifier {checked.name}@{checked.version}: member {m}'s USE head has "
                             f"{use.coef.shape} coefficients, not {dimension(USE_MULTILINGUAL)}")
        members[str(m)] = StackMember(tuple(arrays[f"{m}.vocabulary"].tolist()),
                                      arrays[f"{m}.idf"].astype(np.float64), _head(arrays[f"{m}.tfidf"]),
                                      use, _head(arrays[f"{m}.stack"]))
    folds = dict(zip(arrays["fold_texts"].tolist(), (int(f) for f in arrays["fold_of"])))
    slow = checked.manifest.get("slow_model")
    path = None if slow is None else SlowPath(
        slow["model"], load_lora(slow["model"]), float(slow["half_width"]),
        {m: _head(arrays[f"{m}.slow_stack"]) for m in members})
    return LineageStack(checked.name, checked.version, load_multilingual(checked.manifest["shared_model"]),
                        members, folds, checked.manifest, path)


class LineageStackScorer(MultilingualScorer):
    """Scores from a lineage's stack (``classifier:<name>[@version]`` whose manifest's ``model_type``
    is :data:`LINEAGE_STACK`): ``paper_c`` and ``p_positive``."""

    model_type = LINEAGE_STACK

    @staticmethod
    def load(ref: str, root: Path) -> Any:
        """The lineage's stack ``ref`` names under ``root``."""
        return load_lineage_stack(ref, root)

    def params(self) -> dict[str, Any]:
        """The artefact's identity, the shared model's and the slower model's (and the runtime it is
        served on): a retrained model is a new cache key."""
        out = super().params() | {"shared_model": self.model.manifest["shared_model"]}
        slow = self.model.slow
        if slow is not None:
            out |= {"slow_model": slow.ref, "slow_runtime": runtime_identity(slow.model.base.precision)}
        return out

    def score(self, texts: Sequence[str]) -> list[dict[str, Score]]:
        """Both score kinds for each text; the raw output names the slower model where a claim was
        sent to it (what an audit of the score reads)."""
        texts = list(texts)
        if not texts:
            return []
        ps, sent = self.model.predict(texts, embed(USE_MULTILINGUAL, texts))
        slow = self.model.slow.ref if self.model.slow is not None else None
        return p_scores(ps, [{"slow_model": slow} if was_sent else {} for was_sent in sent])
