"""A lineage's adapted model, cross-fitted (``classifier:<name>@<version>``, model type ``crossfit_lora``).

It is K + 1 MiniLM LoRA adapters (:mod:`checkworthy.scorers.lora_classifier`): ``fold-i`` trained
on the lineage's labelled texts outside fold i, ``full`` on all of them. A text of the training
set is scored by the adapter of its own fold, which never saw it; every other text by ``full``.
So the lineage's labelled claims get honest scores (NN-PPI's residuals and the review rule's
figures measure the model's real errors, not what it remembers), and new claims get the model
that learnt from every label. A text's score depends on the text alone, so one store key holds
both and a run's labelled and unlabelled claims read the same key.

Artefact: ``<root>/<name>/<version>/`` with ``full/`` and ``fold-1/`` ... ``fold-K/`` (each an
adapter folder: :data:`~checkworthy.scorers.lora_classifier.ARTEFACT_FILES`) and
``folds.json`` (the fold of each training text, by its sha256) and ``manifest.json``: every
file's sha256 (checked on load), the training data and hyper-parameters. Training:
:mod:`checkworthy.runs.adapt`.
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

from checkworthy.scorers.classifier import ARTEFACT_ROOT
from checkworthy.scorers.lora_classifier import MINILM, Base, LoraArtefact, load_member, verified_folder

FULL = "full"


def member_name(fold: int) -> str:
    """The folder of fold ``fold``'s adapter (folds count from 1)."""
    return f"fold-{fold}"


def text_key(text: str) -> str:
    """How the manifest names a training text: sha256 of its UTF-8 bytes (the store's text hash)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class CrossFitArtefact:
    """The fold adapters and the full one; scores like :class:`LoraArtefact`."""

    name: str
    version: str
    folder: Path
    manifest: dict[str, Any]
    #: each training text's fold (1 to K), by :func:`text_key`
    folds: dict[str, int] = field(default_factory=dict)
    members: dict[str, LoraArtefact] = field(default_factory=dict)
    base: Base = MINILM

    def member_of(self, text: str) -> str:
        """The adapter that scores ``text``: its fold's if it was a training text, else ``full``."""
        fold = self.folds.get(text_key(text))
        return FULL if fold is None else member_name(fold)

    def predict_proba(self, texts: Sequence[str], batch_size: int = 64) -> NDArray[np.float64]:
        """P(check-worthy) for each text, in order, each from the adapter that scores it."""
        who = np.array([self.member_of(t) for t in texts])
        p = np.zeros(len(texts), dtype=np.float64)
        for name in np.unique(who):
            idx = np.flatnonzero(who == name)
            p[idx] = self.members[str(name)].predict_proba([texts[i] for i in idx], batch_size)
        return p


def load_crossfit(ref: str, root: Path = ARTEFACT_ROOT) -> CrossFitArtefact:
    """Load ``name`` (latest) or ``name@version``: every file checked against the manifest."""
    name, folder, manifest = verified_folder(ref, root)
    members = {}
    for member in [FULL] + [member_name(i) for i in range(1, manifest["n_folds"] + 1)]:
        members[member] = load_member(LoraArtefact(name, folder.name, folder / member, manifest, base=MINILM))
    folds = json.loads((folder / "folds.json").read_text())
    return CrossFitArtefact(name, folder.name, folder, manifest, folds, members)
