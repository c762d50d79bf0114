"""The LoRA classifiers on three runtimes: torch fp32, ONNX Runtime fp32 and ONNX Runtime int8
(dynamic quantisation): claims/s at the batch sizes of the API and of ``predict``, ROC AUC on the
two labelled sets, and how far each runtime's scores are from torch's.

Texts and labels: the main job's calibration sets L of ClaimBuster and CLEF 2024
(``train_classifier.load_groups``, seed 2026, 1,203 CLEF claims a class), which no versioned
classifier was trained on (``--auc-n``: a seeded sample of each). The torch path is the exported
module itself (:func:`checkworthy.scorers.lora_classifier.torch_graph`), so the three differ in
runtime and precision only. Each is timed in this process after a first call, in calls of 1 text
(the API's one sentence), 100 (the API's largest request) and 1,000 (``predict``'s chunks), each
call scored as the scorer scores it: sorted by length, in batches of 64. ROC AUC and score
differences come from the sets scored the same way. Both ONNX models are built (or read from the
cache) before the clock. Prints a table and a JSON line. Run from the repository root:
``.venv/bin/python -m bench.bench_runtimes [--models minilm-lora gemma-lora] [--n 400] [--auc-n N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from bench.bench_scale import CORES
from checkworthy.config import quiet_offline_env
from checkworthy.method.metrics import roc_auc
from checkworthy.runs.train_classifier import load_groups
from checkworthy.scorers.lora_classifier import (
    base_of,
    base_tokenizer,
    encode,
    onnx_model,
    torch_graph,
    verified_folder,
)
from checkworthy.scorers.onnx_runtime import INPUTS, OUTPUT, session

SETS = ("claimbuster:calibration", "clef2024:calibration")
BATCHES = (1, 100, 1000)
#: texts a forward pass, as the scorer batches them
BATCH_SIZE = 64
Forward = Callable[[dict[str, Any]], np.ndarray]


def labelled(n: int | None) -> dict[str, tuple[list[str], list[int]]]:
    """Each labelled set's texts and labels (``n``: a seeded sample of each)."""
    groups = load_groups(2026, {"claimbuster": None, "clef2024": 1203})
    out = {}
    for name in SETS:
        claims = groups[name]
        if n is not None and n < len(claims):
            keep = np.random.default_rng(1).choice(len(claims), n, replace=False)
            claims = [claims[i] for i in sorted(keep)]
        out[name] = ([c.text for c in claims], [c.label for c in claims])
    return out


def paths(ref: str) -> tuple[Any, Any, dict[str, Forward]]:
    """The artefact's base, tokenizer and one forward function a runtime (numpy batches in)."""
    _, folder, manifest = verified_folder(ref)
    base = base_of(manifest)
    normalise = bool(manifest.get("base_model", {}).get("normalised", False))
    graph = torch_graph(folder, base, normalise)

    def on_torch(batch: dict[str, Any]) -> np.ndarray:
        with torch.inference_mode():
            return graph(*(torch.from_numpy(batch[k]) for k in INPUTS)).numpy()

    def on_ort(precision: str) -> Forward:
        s = session(onnx_model(folder, base, normalise, precision))
        return lambda batch: s.run([OUTPUT], {k: batch[k] for k in INPUTS})[0]

    return base, base_tokenizer(base), {"torch fp32": on_torch, "onnxruntime fp32": on_ort("fp32"),
                                        "onnxruntime int8": on_ort("int8")}


def scores(forward: Forward, tok: Any, base: Any, texts: Sequence[str], batch_size: int) -> np.ndarray:
    """P(check-worthy) for each text, batches sorted by length as the scorer sorts them."""
    order = np.argsort([len(t) for t in texts], kind="stable")
    p = np.zeros(len(texts))
    for start in range(0, len(texts), batch_size):
        idx = order[start: start + batch_size]
        p[idx] = forward(dict(encode(tok, base, [texts[i] for i in idx], tensors="np")))
    return p


def claims_per_s(forward: Forward, tok: Any, base: Any, texts: Sequence[str], call: int) -> float:
    """Claims/s on ``texts`` in calls of ``call`` texts, each scored as the scorer scores it."""
    scores(forward, tok, base, texts[:min(call, BATCH_SIZE)], BATCH_SIZE)  # warm: first shapes
    t0 = time.perf_counter()
    for start in range(0, len(texts), call):
        scores(forward, tok, base, texts[start: start + call], BATCH_SIZE)
    return len(texts) / (time.perf_counter() - t0)


def measure(ref: str, data: dict[str, tuple[list[str], list[int]]], n: int) -> list[dict[str, Any]]:
    base, tok, forwards = paths(ref)
    pool = [t for texts, _ in data.values() for t in texts]
    timed = [pool[i] for i in np.random.default_rng(0).permutation(len(pool))]
    rows, reference = [], {}
    for runtime, forward in forwards.items():
        row: dict[str, Any] = {"model": ref, "runtime": runtime}
        for b in BATCHES:
            size = min(n, 100) if b == 1 else max(n, b)
            row[f"claims_per_s_batch_{b}"] = claims_per_s(forward, tok, base, timed[:size], b)
        for name, (texts, labels) in data.items():
            p = scores(forward, tok, base, texts, BATCH_SIZE)
            reference.setdefault(name, p)
            row[f"roc_auc {name}"] = roc_auc(labels, p)
            row[f"max_abs_diff {name}"] = float(np.max(np.abs(p - reference[name])))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["minilm-lora", "gemma-lora"])
    ap.add_argument("--n", type=int, default=400, help="texts timed per batch size (at least the batch; "
                    "at most 100 one at a time)")
    ap.add_argument("--auc-n", type=int, help="texts of each labelled set (default: all)")
    args = ap.parse_args()
    quiet_offline_env()
    torch.set_num_threads(CORES)
    data = labelled(args.auc_n)
    rows = [r for ref in args.models for r in measure(ref, data, args.n)]
    print(f"load average {os.getloadavg()[0]:.2f}; {CORES} cores; "
          + "; ".join(f"{k}: {len(v[0])} texts" for k, v in data.items()))
    print("| model | runtime | claims/s, 1 | claims/s, 100 | claims/s, 1,000 | "
          + " | ".join(f"ROC AUC {s}" for s in SETS) + " | max |p - torch| |\n|---|---|" + "---:|" * 6)
    for r in rows:
        print(f"| {r['model']} | {r['runtime']} | "
              + " | ".join(f"{r[f'claims_per_s_batch_{b}']:.1f}" for b in BATCHES) + " | "
              + " | ".join(f"{r[f'roc_auc {s}']:.4f}" for s in SETS)
              + f" | {max(r[f'max_abs_diff {s}'] for s in SETS):.1e} |")
    print(json.dumps({"bench": "runtimes", "load_average": os.getloadavg()[0], "rows": rows}))


if __name__ == "__main__":
    main()
