"""A multilingual check-worthiness classifier: char n-gram TF-IDF per language and a USE head, stacked.

Every other model of the project reads English MiniLM vectors; on Arabic, Spanish, Dutch,
Bulgarian or Turkish tweets a team's own 1,000 labels fitted into a char n-gram TF-IDF do better.
This model (``model_type`` :data:`MULTILINGUAL`) is trained once on the CheckThat! tweets of every
language (:mod:`checkworthy.runs.train_multilingual`) and scores a claim by

* the logit of a logistic regression on char n-gram TF-IDF (2-5 within word bounds) fitted on the
  tweets of the claim's language (:func:`checkworthy.data.language.detect`), and
* the logit of one logistic regression on Universal Sentence Encoder multilingual v3 vectors
  (:func:`checkworthy.scorers.embedders.embed`) fitted on the tweets of every language,

combined by that language's stacking regression (fitted on cross-fitted logits, so it weighs
out-of-sample scores). A claim in a language the model has no TF-IDF for is scored by the USE head
alone. ``p_positive`` is that probability; the regressions are class-balanced, so it is not the
prevalence-calibrated probability of a tweet (``predict``'s NN-PPI correction is what calibrates).

Artefact: ``models/classifier/<name>/<version>/{model.npz, manifest.json}``: vocabularies, idf
weights and coefficients only, as numpy arrays read with ``allow_pickle=False`` (no pickled
objects); the manifest holds the npz's sha256 (checked on load) and the training data.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from checkworthy.data.language import detect
from checkworthy.scorers.base import OK, Score
from checkworthy.scorers.classifier import ARTEFACT_ROOT, MULTILINGUAL, SCORE_KINDS, checked_file, paper_c
from checkworthy.scorers.embedders import USE_MULTILINGUAL, dimension, embed

MODEL_FILE = "model.npz"
#: the TF-IDF every language's vectoriser is (the vocabulary and idf weights are the artefact's)
TFIDF = {"analyzer": "char_wb", "ngram_range": (2, 5), "sublinear_tf": True}


def logit(p: NDArray[np.float64]) -> NDArray[np.float64]:
    """log(p / (1 - p)), ``p`` clipped to [1e-4, 1 - 1e-4] (as the stacker was fitted)."""
    q = np.clip(p, 1e-4, 1 - 1e-4)
    return np.asarray(np.log(q / (1 - q)), dtype=np.float64)


def sigmoid(z: NDArray[np.float64]) -> NDArray[np.float64]:
    """1 / (1 + exp(-z)), ``z`` clipped to [-50, 50]."""
    return np.asarray(1.0 / (1.0 + np.exp(-np.clip(z, -50.0, 50.0))), dtype=np.float64)


@dataclass(frozen=True)
class LinearHead:
    """A logistic regression: P = sigmoid(x . coef + intercept)."""

    coef: NDArray[np.float64]
    intercept: float

    def proba(self, x: Any) -> NDArray[np.float64]:
        """P(check-worthy) of rows ``x`` (dense or sparse)."""
        return sigmoid(np.asarray(x @ self.coef, dtype=np.float64).ravel() + self.intercept)


def tfidf_vectoriser(vocabulary: Sequence[str], idf: NDArray[np.float64]) -> Any:
    """A :data:`TFIDF` transform with a saved vocabulary and idf weights (nothing is fitted)."""
    from sklearn.feature_extraction.text import TfidfVectorizer  # start-up: only when scoring

    vec = TfidfVectorizer(**TFIDF, vocabulary={g: i for i, g in enumerate(vocabulary)})
    vec.idf_ = idf
    return vec


def p_scores(ps: NDArray[np.float64], notes: Sequence[Mapping[str, Any]] | None = None
             ) -> list[dict[str, Score]]:
    """Both score kinds (:data:`SCORE_KINDS`) of each P(check-worthy); each of ``notes`` joins its
    claim's raw output."""
    out = []
    for p, note in zip(ps, notes or [{}] * len(ps), strict=True):
        raw = json.dumps({"p_positive": float(p), **note})
        out.append({"paper_c": Score(paper_c(float(p)), OK, raw), "p_positive": Score(float(p), OK, raw)})
    return out


@dataclass(frozen=True)
class LanguageModel:
    """One language's char n-gram TF-IDF head and its stacker over (TF-IDF logit, USE logit)."""

    vocabulary: tuple[str, ...]
    idf: NDArray[np.float64]
    head: LinearHead
    stack: LinearHead

    @cached_property
    def vectoriser(self) -> Any:
        """A TF-IDF transform with this vocabulary and these idf weights (nothing is fitted)."""
        return tfidf_vectoriser(self.vocabulary, self.idf)

    def proba(self, texts: Sequence[str], use_logit: NDArray[np.float64]) -> NDArray[np.float64]:
        """The stacked P(check-worthy) of ``texts`` given their USE head logits."""
        tfidf = logit(self.head.proba(self.vectoriser.transform(list(texts))))
        return self.stack.proba(np.c_[tfidf, use_logit])


@dataclass
class MultilingualModel:
    """The USE head and the language models, by ISO 639-1 code, with the artefact's manifest."""

    name: str
    version: str
    use_head: LinearHead
    languages: dict[str, LanguageModel]
    manifest: dict[str, Any] = field(default_factory=dict)

    def predict_proba(self, texts: Sequence[str], use_vectors: NDArray[np.float32]) -> NDArray[np.float64]:
        """P(check-worthy) of ``texts`` (their USE vectors given): each by its language's stack, a
        language without a model by the USE head alone."""
        use_p = self.use_head.proba(use_vectors)
        out = use_p.copy()
        codes = [d.code for d in detect(texts)]
        for code, lang in self.languages.items():
            idx = [i for i, c in enumerate(codes) if c == code]
            if idx:
                out[idx] = lang.proba([texts[i] for i in idx], logit(use_p[idx]))
        return out


def model_arrays(model: MultilingualModel) -> dict[str, NDArray[Any]]:
    """The arrays :func:`load_multilingual` reads back (``model.npz``)."""
    arrays: dict[str, NDArray[Any]] = {
        "languages": np.array(sorted(model.languages), dtype=str),
        "use_coef": model.use_head.coef.astype(np.float32),
        "use_intercept": np.array([model.use_head.intercept]),
    }
    for code, lang in model.languages.items():
        arrays |= {f"{code}_vocabulary": np.array(lang.vocabulary, dtype=str),
                   f"{code}_idf": lang.idf.astype(np.float32),
                   f"{code}_coef": lang.head.coef.astype(np.float32),
                   f"{code}_intercept": np.array([lang.head.intercept]),
                   f"{code}_stack": np.r_[lang.stack.coef, lang.stack.intercept]}
    return arrays


def npz_bytes(arrays: Mapping[str, NDArray[Any]]) -> bytes:
    """``arrays`` as the bytes of a compressed npz (no pickled objects)."""
    buf = io.BytesIO()
    np.savez_compressed(buf, allow_pickle=False, **arrays)
    return buf.getvalue()


def load_multilingual(ref: str, root: Path = ARTEFACT_ROOT) -> MultilingualModel:
    """Load ``name`` (latest) or ``name@version``; ``model.npz`` must match the manifest's sha256
    and hold a USE head of the USE dimension."""
    checked = checked_file(ref, "model", root)
    name, version, manifest = checked.name, checked.version, checked.manifest
    with np.load(io.BytesIO(checked.data), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    if arrays["use_coef"].shape != (dimension(USE_MULTILINGUAL),):
        raise ValueError(f"classifier {name}@{version}: its USE head has {arrays['use_coef'].shape} "
                         f"coefficients, not {dimension(USE_MULTILINGUAL)}")

    def head(coef: NDArray[Any], intercept: NDArray[Any]) -> LinearHead:
        return LinearHead(coef.astype(np.float64), float(intercept[0]))

    languages = {
        str(code): LanguageModel(tuple(arrays[f"{code}_vocabulary"].tolist()),
                                 arrays[f"{code}_idf"].astype(np.float64),
                                 head(arrays[f"{code}_coef"], arrays[f"{code}_intercept"]),
                                 head(arrays[f"{code}_stack"][:2], arrays[f"{code}_stack"][2:]))
        for code in arrays["languages"].tolist()}
    return MultilingualModel(name, version, head(arrays["use_coef"], arrays["use_intercept"]), languages,
                             manifest)


class MultilingualScorer:
    """Scores from a saved multilingual classifier (``classifier:<name>[@version]`` whose manifest's
    ``model_type`` is :data:`MULTILINGUAL`): ``paper_c`` and ``p_positive``. Subclasses name another
    model type and its loader (a lineage's stack over such a model)."""

    score_kinds = SCORE_KINDS
    model_type = MULTILINGUAL

    def __init__(self, ref: str, *, root: str | Path | None = None) -> None:
        self.model = self.load(ref, Path(root) if root else ARTEFACT_ROOT)
        self.spec = f"classifier:{ref}"

    @staticmethod
    def load(ref: str, root: Path) -> Any:
        """The model ``ref`` names under ``root``."""
        return load_multilingual(ref, root)

    def params(self) -> dict[str, Any]:
        """The artefact's identity: a retrained model is a new cache key."""
        m = self.model.manifest
        return {
            "backend": "classifier",
            "model_type": self.model_type,
            "name": self.model.name,
            "version": self.model.version,
            "model_sha256": m["model"]["sha256"],
            "embedding_model": USE_MULTILINGUAL,
            "training_fingerprint": m["training_data"]["fingerprint"],
            "score_formulas": m["score_kinds"],
        }

    def score(self, texts: Sequence[str]) -> list[dict[str, Score]]:
        """Both score kinds for each text (one USE pass)."""
        texts = list(texts)
        if not texts:
            return []
        return p_scores(self.model.predict_proba(texts, embed(USE_MULTILINGUAL, texts)))
