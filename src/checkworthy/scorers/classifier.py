"""A supervised check-worthiness classifier as a predictor J (where the paper's fine-tuned XLM-R stands).

Model: a logistic-regression head on the project's MiniLM sentence embeddings
(:mod:`checkworthy.scorers.sentence_encoder`), small enough to keep in git (one JSON file of 385
numbers). Training it, leakage-free, is :mod:`checkworthy.runs.train_classifier`.

Artefact: ``models/classifier/<name>/<version>/{head.json, manifest.json}`` with ``LATEST`` naming
the newest version; ``version`` = the first 12 hex digits of the head's sha256. The manifest holds
the sha256 (checked on load), the training-data fingerprint, the excluded groups with their
fingerprints, the hyper-parameters and the test metrics. ``classifier:<name>`` scores with the
latest version, ``classifier:<name>@<version>`` with a pinned one; the sha256 is in ``params()``,
so retraining yields new cache keys rather than mixing scores.

Score kinds:

* ``p_positive``: the probability of the check-worthy class.
* ``paper_c``: the paper's mapping, ``p`` if ``p > 0.5`` else ``1 - p``, i.e. the probability of the
  predicted class. It is always >= 0.5 (so thresholding it at 0.5 calls everything check-worthy); it
  is kept because it is what the paper fed to NN-PPI.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from checkworthy.config import EMBED_DIM, EMBED_MODEL, ROOT
from checkworthy.data.versioning import pull_tracked
from checkworthy.scorers.base import OK, Score
from checkworthy.scorers.sentence_encoder import Embedder, embed

ARTEFACT_ROOT = ROOT / "models" / "classifier"
FORMAT_VERSION = 1
SCORE_KINDS = ("paper_c", "p_positive")
#: ``model_type`` of a MiniLM + LoRA artefact (:mod:`checkworthy.scorers.lora_classifier`)
LORA = "minilm_lora"
#: ``model_type`` of a SetFit artefact: a LoRA adapter and head too, on normalised vectors
SETFIT = "minilm_setfit"
#: ``model_type`` of Gemma 3 270M with a LoRA adapter and a head on its last token
GEMMA_LORA = "gemma_lora"
#: ``model_type`` of a lineage's cross-fitted model: MiniLM adapters for each fold and for all of its
#: labels (:mod:`checkworthy.scorers.crossfit`)
CROSSFIT = "crossfit_lora"
#: ``model_type`` of the multilingual char n-gram TF-IDF and USE stack
#: (:mod:`checkworthy.scorers.multilingual`)
MULTILINGUAL = "multilingual_tfidf_use"
#: ``model_type`` of a non-English lineage's own model: the multilingual model's logit stacked with a
#: TF-IDF and a USE head fitted on the lineage's labels, cross-fitted
#: (:mod:`checkworthy.scorers.lineage_stack`)
LINEAGE_STACK = "multilingual_lineage_stack"
#: the model types :class:`checkworthy.scorers.lora_classifier.LoraClassifierScorer` scores
ADAPTER_TYPES = (LORA, SETFIT, GEMMA_LORA, CROSSFIT)


def paper_c(p: float) -> float:
    """The paper's classifier score: probability of the predicted class (always >= 0.5)."""
    return p if p > 0.5 else 1.0 - p


#: :func:`paper_c` as an artefact manifest's ``score_kinds`` states it
PAPER_C_FORMULA = "p if p > 0.5 else 1 - p (the paper's mapping; always >= 0.5)"


# --------------------------------------------------------------------------- artefact


@dataclass
class Artefact:
    """A trained head and its manifest."""

    name: str
    version: str
    coef: NDArray[np.float64]
    intercept: float
    manifest: dict[str, Any] = field(default_factory=dict)

    def predict_proba(self, x: NDArray[np.float32]) -> NDArray[np.float64]:
        """P(check-worthy) for embedding rows ``x``."""
        z = np.clip(x.astype(np.float64) @ self.coef + self.intercept, -50.0, 50.0)
        return 1.0 / (1.0 + np.exp(-z))


def head_bytes(coef: NDArray[np.float64], intercept: float) -> bytes:
    """The bytes of ``head.json`` (the format :func:`load_artefact` reads)."""
    head = {"format_version": FORMAT_VERSION, "type": "logistic_regression", "classes": [0, 1],
            "embedding_model": EMBED_MODEL, "coef": [float(v) for v in coef], "intercept": float(intercept)}
    return (json.dumps(head, separators=(",", ":")) + "\n").encode()


def latest_version(name: str, root: Path = ARTEFACT_ROOT) -> str:
    """The version ``LATEST`` names; a DVC-tracked artefact missing here is pulled first."""
    pull_tracked(root / name)
    latest = root / name / "LATEST"
    if not latest.exists():
        raise FileNotFoundError(f"no classifier {name!r} under {root} (train it: checkworthy "
                                f"train-classifier --name {name})")
    return latest.read_text().strip()


def model_type(ref: str, root: Path = ARTEFACT_ROOT) -> str:
    """What kind of model ``name[@version]`` is (its manifest's ``model_type``; the logistic head
    predates the field)."""
    name, _, version = ref.partition("@")
    folder = root / name / (version or latest_version(name, root))
    if not (folder / "manifest.json").exists():
        raise FileNotFoundError(f"no version {folder.name!r} of classifier {name!r} under {root}")
    return json.loads((folder / "manifest.json").read_text()).get("model_type", "logistic_regression")


@dataclass(frozen=True)
class CheckedFile:
    """A saved classifier's manifest and the bytes of the file it names, its sha256 checked."""

    name: str
    version: str
    manifest: dict[str, Any]
    data: bytes


def checked_file(ref: str, entry: str, root: Path = ARTEFACT_ROOT) -> CheckedFile:
    """Read ``name`` (latest) or ``name@version``: its manifest, and the file that the manifest's
    ``entry`` names (``{"file": ..., "sha256": ...}``), refused unless it matches that sha256."""
    name, _, version = ref.partition("@")
    version = version or latest_version(name, root)
    folder = root / name / version
    if not (folder / "manifest.json").exists():
        raise FileNotFoundError(f"no version {version!r} of classifier {name!r} under {root}")
    manifest = json.loads((folder / "manifest.json").read_text())
    data = (folder / manifest[entry]["file"]).read_bytes()
    if hashlib.sha256(data).hexdigest() != manifest[entry]["sha256"]:
        raise ValueError(f"classifier {name}@{version}: {manifest[entry]['file']} does not match its "
                         "manifest's sha256")
    return CheckedFile(name, version, manifest, data)


def load_artefact(ref: str, root: Path = ARTEFACT_ROOT) -> Artefact:
    """Load ``name`` (latest) or ``name@version``; the head's sha256 must match the manifest."""
    checked = checked_file(ref, "head", root)
    name, version, manifest = checked.name, checked.version, checked.manifest
    head = json.loads(checked.data)
    if head.get("embedding_model") != EMBED_MODEL or len(head["coef"]) != EMBED_DIM:
        raise ValueError(f"classifier {name}@{version}: built for {head.get('embedding_model')}, "
                         f"not {EMBED_MODEL}")
    coef = np.asarray(head["coef"], dtype=np.float64)
    return Artefact(name, version, coef, float(head["intercept"]), manifest)


# --------------------------------------------------------------------------- scorer


class ClassifierScorer:
    """Scores from a saved classifier (``classifier:<name>[@version]``): ``paper_c`` and ``p_positive``."""

    score_kinds = SCORE_KINDS

    def __init__(self, ref: str, *, root: str | Path | None = None, batch_size: int = 64,
                 embedder: Embedder | None = None) -> None:
        self.artefact = load_artefact(ref, Path(root) if root else ARTEFACT_ROOT)
        self.spec = f"classifier:{ref}"
        self.batch_size = batch_size
        self._embedder = embedder

    def params(self) -> dict[str, Any]:
        """The artefact's identity: a retrained head is a new cache key."""
        m = self.artefact.manifest
        return {
            "backend": "classifier",
            "name": self.artefact.name,
            "version": self.artefact.version,
            "head_sha256": m["head"]["sha256"],
            "embedding_model": EMBED_MODEL,
            "training_fingerprint": m["training_data"]["fingerprint"],
            "excluded": sorted(m["training_data"]["excluded"]),
            "score_formulas": m["score_kinds"],
        }

    def score(self, texts: Sequence[str]) -> list[dict[str, Score]]:
        """Both score kinds for each text (one embedding pass)."""
        if self._embedder is not None:
            x = self._embedder(list(texts))
        else:
            x = embed(list(texts), batch_size=self.batch_size)
        out = []
        for p in self.artefact.predict_proba(x):
            p = float(p)
            raw = json.dumps({"p_positive": p})
            out.append({"paper_c": Score(paper_c(p), OK, raw), "p_positive": Score(p, OK, raw)})
        return out
