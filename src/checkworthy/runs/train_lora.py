"""Fine-tuning MiniLM or Gemma 3 270M with a LoRA adapter (:mod:`checkworthy.scorers.lora_classifier`),
leakage-free.

The training texts are the logistic classifier's (:func:`checkworthy.runs.train_classifier.
build_training_set`: every labelled file minus, by normalised text, the held-out evaluation sets
and both calibration sets), or a seeded class-balanced sample of ``examples`` per class of them.
A stratified share is held back to choose the epoch (lowest log-loss), never a test split.
Cross-entropy, AdamW with a linear warm-up and decay; only the adapter (``peft``, rank ``rank``
on every attention and feed-forward projection) and the two-class head learn. The result is
saved like every classifier artefact, with every file's sha256 in its manifest, then versioned
with DVC (``dvc add`` and ``dvc push`` to the project's remote) so the git history holds only
the pointer.

Limits: on 2 cores, MiniLM on the full set takes about 13 minutes, Gemma 3 270M about 0.16 s a
text and epoch (3,000 a class: about 16 minutes); it is run once, by hand (never in CI), and the
command that made the artefact is written into its ``.dvc`` file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from numpy.typing import NDArray

from checkworthy.config import ROOT
from checkworthy.data.outputs import place_folder, replace_text, staging_folder
from checkworthy.data.versioning import dvc_in, made_now
from checkworthy.method.sampling import balanced_sample
from checkworthy.runs.train_classifier import TrainingData, TrainingSet, evaluate, leakage_free_set
from checkworthy.scorers.classifier import ARTEFACT_ROOT, LORA, PAPER_C_FORMULA
from checkworthy.scorers.lora_classifier import (
    ARTEFACT_FILES,
    BASES,
    MAX_TOKENS,
    Base,
    LoraArtefact,
    encode,
    load_base,
    load_lora,
    logits,
    sha256_bytes,
)

#: the bases whose layers a student may keep the first of (read at their last token)
DECODERS = tuple(k for k, b in BASES.items() if b.pooling == "last")
#: each base's training defaults: MiniLM as the artefact was made; Gemma, 20x MiniLM's size, one
#: pass at a lower adapter rate, its new head at a higher one
DEFAULTS = {
    "minilm": {"epochs": 2, "rank": 16, "lr": 5e-4, "head_lr": 5e-4, "batch_size": 32},
    "gemma3-270m": {"epochs": 1, "rank": 8, "lr": 3e-4, "head_lr": 1e-3, "batch_size": 16},
}


@dataclass(frozen=True)
class FineTuning:
    """How an adapter and head are fine-tuned: the base (a key of :data:`BASES`), the adapter's
    rank, the passes over the texts, the adapter's and head's peak learning rates, the batch size,
    the share held back to choose the epoch, the torch device that trains (``cpu``, ``cuda``) and,
    for a decoder base, the first layers kept (a shallower, cheaper student; None: all). Checked
    when made; :meth:`for_base` fills the options not given with the base's
    :data:`DEFAULTS`."""

    base: str
    epochs: int
    rank: int
    lr: float
    head_lr: float
    batch_size: int
    val_share: float = 0.1
    device: str = "cpu"
    layers: int | None = None

    def __post_init__(self) -> None:
        if self.base not in BASES:
            raise ValueError(f"unknown base {self.base!r}; choose from {sorted(BASES)}")
        if self.layers is not None and (BASES[self.base].pooling != "last" or self.layers < 1):
            raise ValueError(f"layers: a positive count for a decoder base ({', '.join(DECODERS)}), got "
                             f"{self.layers} for {self.base}")
        for name in ("epochs", "rank", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("lr", "head_lr"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 < self.val_share < 1:
            raise ValueError(f"val_share must lie between 0 and 1, got {self.val_share}")
        if not _usable(self.device):
            raise ValueError(f"--device {self.device}: not a device this machine has (cpu, or cuda where a "
                             "GPU is)")

    @classmethod
    def for_base(cls, base: str = "minilm", *, epochs: int | None = None, rank: int | None = None,
                 lr: float | None = None, head_lr: float | None = None, batch_size: int | None = None,
                 device: str = "cpu") -> FineTuning:
        """``base``'s :data:`DEFAULTS`, then the options given (None: not given)."""
        if base not in DEFAULTS:
            raise ValueError(f"unknown base {base!r}; choose from {sorted(BASES)}")
        given = {"epochs": epochs, "rank": rank, "lr": lr, "head_lr": head_lr, "batch_size": batch_size}
        options = DEFAULTS[base] | {k: v for k, v in given.items() if v is not None}
        return cls(base=base, device=device, **options)

    @property
    def model_base(self) -> Base:
        """The base model named by :attr:`base`, cut to :attr:`layers` where given."""
        base = BASES[self.base]
        return base if self.layers is None else replace(base, layers=self.layers)


def _usable(device: str) -> bool:
    """Whether ``device`` is a torch device this machine has."""
    import torch

    try:
        kind = torch.device(device).type
    except RuntimeError:
        return False
    return kind == "cpu" or (kind == "cuda" and torch.cuda.is_available())


def _split(labels: Sequence[int], share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of a stratified (train, validation) split."""
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(labels))
    return train_test_split(idx, test_size=share, stratify=labels, random_state=seed)


def length_batches(idx: np.ndarray, lengths: np.ndarray, batch_size: int, gen: Any) -> list[np.ndarray]:
    """Batches of similar length (less padding, several times faster on a CPU), in random order:
    a random permutation cut into pools of 50 batches, each pool sorted by text length."""
    import torch

    order = idx[torch.randperm(len(idx), generator=gen).numpy()]
    pool = 50 * batch_size
    batches = []
    for s in range(0, len(order), pool):
        chunk = order[s: s + pool]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[b: b + batch_size] for b in range(0, len(chunk), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]


def fine_tune(texts: Sequence[str], labels: Sequence[int], spec: FineTuning, *, seed: int,
              echo: Callable[[str], None], init: Path | None = None,
              targets: Sequence[float] | None = None) -> tuple[Any, Any, dict[str, Any]]:
    """Train the adapter and head as ``spec`` says (on its device); return them on the CPU (the
    epoch with the lowest validation log-loss against ``labels``). ``init``: an artefact folder whose
    adapter and head training continues from (its rank wins over ``spec.rank``), else a fresh
    adapter. ``targets``: a teacher's P(check-worthy) of each text, learnt instead of the labels
    (distillation: the cross-entropy against the teacher's two-class distribution); the epoch is
    still chosen by the held-back texts' labels."""
    import torch

    torch.manual_seed(seed)
    encoder, head, tok, rank = _start(spec, init)
    tr, va = _split(labels, spec.val_share, seed)
    y = torch.tensor(np.asarray(labels), dtype=torch.long, device=spec.device)
    soft = None if targets is None else torch.tensor(np.asarray(targets, dtype=np.float32),
                                                     device=spec.device)
    run = _Training(encoder, head, tok, spec.model_base, spec.device, texts, y, soft)
    history, (lora_state, head_state) = _epochs(run, spec, tr, va, seed, echo)
    encoder.load_state_dict(lora_state, strict=False)
    head.load_state_dict(head_state)
    encoder.to("cpu")
    head.to("cpu")
    return encoder, head, _hyperparameters(spec, rank, history, (len(tr), len(va)), seed, init, targets)


def _start(spec: FineTuning, init: Path | None) -> tuple[Any, Any, Any, int]:
    """The encoder with its adapter (fresh, or ``init``'s to continue from), the head, both on
    ``spec``'s device, the tokenizer and the adapter's rank. Draws from torch's seeded generator in
    a fixed order (the head, then a fresh adapter)."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors.torch import load_file

    base, rank = spec.model_base, spec.rank
    model, tok = load_base(base)
    head = torch.nn.Linear(base.hidden_size, 2)
    if init is None:
        config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.1, target_modules=base.target_modules)
        encoder = get_peft_model(model, config)
    else:
        encoder = PeftModel.from_pretrained(model, str(init), is_trainable=True)
        rank = encoder.peft_config["default"].r
        head.load_state_dict(load_file(str(init / "head.safetensors")))
    encoder = encoder.to(spec.device)
    encoder.peft_config["default"].base_model_name_or_path = base.model  # not this machine's path
    return encoder, head.to(spec.device), tok, rank


#: the adapter's and the head's weights (``state_dict``)
Weights = tuple[dict[str, Any], dict[str, Any]]


@dataclass(frozen=True)
class _Training:
    """What a fine-tuning works on: the adapted encoder and head (on ``device``), the tokenizer,
    the base, the texts, their labels ``y`` and, when distilling, the teacher's ``soft`` targets
    (tensors on ``device``)."""

    encoder: Any
    head: Any
    tok: Any
    base: Base
    device: str
    texts: Sequence[str]
    y: Any
    soft: Any | None

    def logits(self, idx: np.ndarray) -> Any:
        """The model's two-class logits of the texts ``idx``."""
        batch = encode(self.tok, self.base, [self.texts[i] for i in idx])
        return logits(self.encoder, self.head, {k: v.to(self.device) for k, v in batch.items()},
                      pooling=self.base.pooling)

    def train_pass(self, batches: list[np.ndarray], opt: Any, sched: Any) -> float:
        """One pass over ``batches``, a step each; the summed training log-loss."""
        import torch

        self.encoder.train()
        self.head.train()
        running = 0.0
        for idx in batches:
            soft = self.soft
            target = self.y[idx] if soft is None else torch.stack([1 - soft[idx], soft[idx]], dim=1)
            loss = torch.nn.functional.cross_entropy(self.logits(idx), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            running += loss.item() * len(idx)
        return running

    def val_loss(self, va: np.ndarray) -> float:
        """The mean log-loss of the held-back texts ``va`` against their labels."""
        import torch

        self.encoder.eval()
        self.head.eval()
        total = 0.0
        with torch.inference_mode():
            for s in range(0, len(va), 128):
                idx = va[s: s + 128]
                loss = torch.nn.functional.cross_entropy(self.logits(idx), self.y[idx], reduction="sum")
                total += float(loss)
        return total / len(va)

    def snapshot(self) -> Weights:
        """Copies of the adapter's and the head's weights (the best epoch's, kept)."""
        import copy

        lora_state = {k: v.detach().clone() for k, v in self.encoder.state_dict().items() if "lora_" in k}
        return lora_state, copy.deepcopy(self.head.state_dict())


def _epochs(run: _Training, spec: FineTuning, tr: np.ndarray, va: np.ndarray, seed: int,
            echo: Callable[[str], None]) -> tuple[list[dict[str, float]], Weights]:
    """``spec.epochs`` passes over ``tr`` (AdamW, linear schedule with 6% warm-up, length-sorted
    batches drawn with ``seed``); each epoch's losses, and the weights of the epoch with the lowest
    validation log-loss."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    adapter = [p for p in run.encoder.parameters() if p.requires_grad]
    groups = [{"params": adapter, "lr": spec.lr}, {"params": list(run.head.parameters()), "lr": spec.head_lr}]
    opt = torch.optim.AdamW(groups, weight_decay=0.01)
    steps = spec.epochs * int(np.ceil(len(tr) / spec.batch_size))
    sched = get_linear_schedule_with_warmup(opt, int(0.06 * steps), steps)
    gen = torch.Generator().manual_seed(seed)
    lengths = np.array([len(t) for t in run.texts])
    history: list[dict[str, float]] = []
    best: tuple[float, Weights] | None = None
    for epoch in range(1, spec.epochs + 1):
        t0 = time.monotonic()
        running = run.train_pass(length_batches(tr, lengths, spec.batch_size, gen), opt, sched)
        vl = run.val_loss(va)
        history.append({"epoch": epoch, "train_log_loss": round(running / len(tr), 5),
                        "val_log_loss": round(vl, 5), "seconds": round(time.monotonic() - t0, 1)})
        echo(f"epoch {epoch}: {history[-1]}")
        if best is None or vl < best[0]:
            best = (vl, run.snapshot())
    assert best is not None
    return history, best[1]


def _hyperparameters(spec: FineTuning, rank: int, history: list[dict[str, float]], sizes: tuple[int, int],
                     seed: int, init: Path | None, targets: Sequence[float] | None) -> dict[str, Any]:
    """The manifest's record of how the adapter was trained (``sizes``: the training and
    validation texts)."""
    import torch

    base, device = spec.model_base, spec.device
    return {"rank": rank, "lora_alpha": 2 * rank, "lora_dropout": 0.1, "target_modules": base.target_modules,
            "epochs": spec.epochs, "lr": spec.lr, "head_lr": spec.head_lr, "batch_size": spec.batch_size,
            "weight_decay": 0.01, "schedule": "linear, 6% warm-up", "max_tokens": MAX_TOKENS,
            "val_share": spec.val_share,
            "epoch_selection": "lowest validation log-loss (held back from the training texts)",
            "history": history, "chosen_epoch": min(history, key=lambda h: h["val_log_loss"])["epoch"],
            "n_train": sizes[0], "n_val": sizes[1], "seed": seed,
            "targets": "labels" if targets is None else "a teacher's P(check-worthy) (distillation)",
            "continued_from": None if init is None else f"{init.parent.name}@{init.name}",
            "device": torch.cuda.get_device_name(device) if str(device).startswith("cuda") else str(device)}


@dataclass(frozen=True)
class Teacher:
    """A model whose P(check-worthy) of each training text is learnt instead of its label
    (distillation): its spec, for the manifest, and what gives those probabilities (the CLI reads
    them through the store: :func:`checkworthy.runs.scoring.teacher_probabilities`)."""

    spec: str
    probabilities: Callable[[Sequence[str]], NDArray[np.float64]]


def write_adapter(folder: Path, encoder: Any, head: Any) -> dict[str, str]:
    """Write the adapter and head into ``folder`` (:data:`ARTEFACT_FILES`, nothing else); return
    each file's sha256."""
    from safetensors.torch import save_file

    encoder.save_pretrained(str(folder), save_embedding_layers=False)
    save_file({k: v.contiguous() for k, v in head.state_dict().items()}, str(folder / "head.safetensors"))
    for extra in set(p.name for p in folder.iterdir()) - set(ARTEFACT_FILES):  # peft's model card
        (folder / extra).unlink()
    return {f: sha256_bytes((folder / f).read_bytes()) for f in ARTEFACT_FILES}


def save_lora(name: str, encoder: Any, head: Any, manifest: dict[str, Any], root: Path = ARTEFACT_ROOT,
              model_type: str = LORA) -> Path:
    """Write ``<root>/<name>/<version>/`` atomically (version: the files' sha256) and point
    ``LATEST`` at it; return the folder."""
    return save_artefact(name, lambda folder: write_adapter(folder, encoder, head),
                         {"model_type": model_type, **manifest}, root)


def save_artefact(name: str, write: Callable[[Path], dict[str, str]], manifest: dict[str, Any],
                  root: Path = ARTEFACT_ROOT) -> Path:
    """Write an artefact as ``<root>/<name>/<version>/`` atomically: ``write`` fills a temporary
    folder and returns each file's sha256; the version is the sha256 of them in file-name order,
    the manifest gets them, its name and version. ``LATEST`` then points at it; return the folder."""
    if not name or "/" in name or "@" in name or name.startswith("."):
        raise ValueError(f"bad classifier name {name!r}")
    base = root / name
    with staging_folder(base) as tmp:
        files = write(tmp)
        version = sha256_bytes("".join(files[f] for f in sorted(files)).encode())[:12]
        manifest = {**manifest, "name": name, "version": version, "files": files}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        target = base / version
        place_folder(tmp, target)
    replace_text(base / "LATEST", version + "\n")
    return target


def version_with_dvc(folder: Path, command: str, repo: Path = ROOT) -> Path:
    """``dvc add`` the artefact folder, note the command that made it in its ``.dvc`` file, and
    ``dvc push`` it to the remote of ``repo`` (the project's); return the ``.dvc`` file."""
    rel = folder.relative_to(repo)
    dvc_in(repo, "add", "-q", str(rel))
    dvc_file = folder.with_name(folder.name + ".dvc")
    spec = yaml.safe_load(dvc_file.read_text())
    spec["outs"][0]["desc"] = f"made by: {command}"
    dvc_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    dvc_in(repo, "push", "-q", str(dvc_file.relative_to(repo)))
    return dvc_file


@dataclass(frozen=True)
class Trained:
    """What an adapter was trained on and how, for its manifest: the leakage-free set with the seed
    and calibration sizes it was drawn with, the balanced sample (``examples`` a class, None: every
    text), the teacher (None: the labels), the base, the hyperparameters and the seconds it took."""

    ts: TrainingSet
    seed: int
    n_per_class: Mapping[str, int | None]
    examples: int | None
    n_trained_on: int
    teacher: str | None
    base: Base
    hyper: dict[str, Any]
    seconds: float


def save_trained(name: str, encoder: Any, head: Any, trained: Trained, groups: Mapping[str, Sequence[Any]],
                 root: Path = ARTEFACT_ROOT, echo: Callable[[str], None] = lambda _: None) -> LoraArtefact:
    """Save a trained adapter and head with their manifest, then evaluate them on the CPU on every
    held-out group (the manifest's ``metrics``)."""
    import torch

    ts, base = trained.ts, trained.base
    manifest = {
        **made_now(),
        "base_model": {"model": base.model, "package": base.package, "pooling": base.pooling,
                       "template": base.template, **({} if base.layers is None else {"layers": base.layers})},
        "hyperparameters": trained.hyper,
        "training_seconds": round(trained.seconds, 1),
        "torch_threads": torch.get_num_threads(),
        "training_data": {
            "fingerprint": ts.fingerprint, "n_texts": len(ts.texts), "n_positive": int(sum(ts.labels)),
            "sources": ts.sources, "n_rows_excluded": ts.n_rows_excluded,
            "n_dropped_conflicting": ts.n_dropped_conflicting, "n_duplicates_merged": ts.n_duplicates_merged,
            "excluded": ts.excluded, "exclusion_key": "datasets.normalise_text",
            "seed": trained.seed, "calibration_n_per_class": dict(trained.n_per_class),
            "examples_per_class": trained.examples, "n_trained_on": trained.n_trained_on,
            "teacher": trained.teacher,
        },
        "score_kinds": {"p_positive": "P(check-worthy)",
                        "paper_c": PAPER_C_FORMULA},
    }
    folder = save_lora(name, encoder, head, manifest, root, base.model_type)
    art = load_lora(f"{name}@{folder.name}", root)
    art.manifest["metrics"] = evaluate(art.predict_proba, art.manifest, groups)
    (folder / "manifest.json").write_text(json.dumps(art.manifest, indent=2, sort_keys=True) + "\n")
    echo(f"saved {folder}")
    return art


def train_lora(
    name: str,
    spec: FineTuning | None = None,
    data: TrainingData | None = None,
    *,
    examples: int | None = None,
    root: Path = ARTEFACT_ROOT,
    echo: Callable[[str], None] = lambda _: None,
    teacher: Teacher | None = None,
) -> LoraArtefact:
    """Fine-tune (as ``spec`` says; None: MiniLM's :data:`DEFAULTS`), save and evaluate (on the CPU)
    a LoRA classifier on every text of ``data`` or ``examples`` of each class; seed and calibration
    sizes from params.yaml unless ``data`` gives them. ``teacher``: a model whose P(check-worthy)
    of each training text is learnt instead of its label (distillation)."""
    import torch

    spec = spec or FineTuning.for_base()
    t0 = time.monotonic()
    ts, groups, seed, n_per_class = leakage_free_set(data or TrainingData())
    echo(f"training set: {len(ts.texts):,} texts ({sum(ts.labels):,} check-worthy) from {ts.sources}; "
         f"{ts.n_rows_excluded:,} rows excluded, {ts.n_dropped_conflicting} conflicting texts dropped; "
         f"{torch.get_num_threads()} threads")
    texts, labels = ts.texts, ts.labels
    if examples is not None:
        pick = balanced_sample(labels, examples, seed=seed)
        texts, labels = [texts[i] for i in pick], [labels[i] for i in pick]
        echo(f"a balanced sample of {len(texts):,} ({sum(labels):,} check-worthy)")
    teacher_p = None if teacher is None else teacher.probabilities(texts)
    encoder, head, hyper = fine_tune(texts, labels, spec, seed=seed, echo=echo, targets=teacher_p)
    trained = Trained(ts, seed, n_per_class, examples, len(texts), teacher.spec if teacher else None,
                      spec.model_base, hyper, time.monotonic() - t0)
    return save_trained(name, encoder, head, trained, groups, root, echo)
