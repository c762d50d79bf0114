"""ONNX Runtime for the fine-tuned classifiers: a model exported once per artefact, cached, scored.

A classifier (base with its LoRA adapter merged, pooling and head) is exported to ONNX by
``torch.onnx.export`` and, for ``int8``, quantised with ONNX Runtime's dynamic quantisation
(int8 weights, activations quantised per batch). Exporting takes seconds for MiniLM and minutes
for Gemma, so the model is built once and kept in the local cache directory
(:func:`checkworthy.scorers.gguf_weights.cache_dir`), keyed by what it is made of (:func:`model_key`:
the artefact's files' sha256, the base, the precision, the exporter's versions). Nothing is
downloaded. One process builds a model at a time (a lock file), in a temporary folder renamed onto
its target, so parallel loaders never read half a model nor build it twice; every load checks the
model's sha256 against the one written beside it, and rebuilds a model that does not match (a
truncated or altered file).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from checkworthy.data.outputs import atomic_folder
from checkworthy.scorers.gguf_weights import cache_dir

#: the exported graph's inputs (token ids and attention mask, int64, batch x tokens) and output
#: (P(check-worthy), float32, batch)
INPUTS = ("input_ids", "attention_mask")
OUTPUT = "p_positive"
#: the precisions a model is served at: the exported fp32 graph, or its int8 dynamic quantisation
PRECISIONS = ("fp32", "int8")
MODEL_FILE, SHA_FILE = "model.onnx", "model.sha256"
#: how the graph is made; a change here is a new cache key
RECIPE = {"exporter": "torch.onnx.export (dynamo)", "opset": 18,
          "int8": "onnxruntime.quantization.quantize_dynamic, QInt8 weights, per tensor"}


def threads() -> int:
    """ONNX Runtime's intra-op threads: the cores this process may run on, or its share of them
    where ``OMP_NUM_THREADS`` says (a Dask worker's, as torch reads it)."""
    return int(os.environ.get("OMP_NUM_THREADS") or 0) or len(os.sched_getaffinity(0))


def runtime_identity(precision: str) -> dict[str, str]:
    """What scores a model: part of its scorer's params, so scores of another runtime or precision
    (equal only to the last digits) are stored under another key."""
    return {"engine": "onnxruntime", "precision": precision}


def model_key(identity: dict[str, Any], precision: str) -> str:
    """sha256 of the model's identity (artefact files, base), its precision and the recipe and
    library versions that made it."""
    import onnx
    import onnxruntime
    import torch

    made = {"identity": identity, "recipe": RECIPE, "torch": torch.__version__, "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__, **runtime_identity(precision)}
    return hashlib.sha256(json.dumps(made, sort_keys=True).encode()).hexdigest()


def model_dir(name: str, key: str) -> Path:
    """The cache folder of one exported model."""
    return cache_dir() / "onnx" / f"{name}-{key[:16]}"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def intact(folder: Path) -> bool:
    """Whether ``folder`` holds a model whose bytes match the sha256 written beside it."""
    model, sha = folder / MODEL_FILE, folder / SHA_FILE
    return model.is_file() and sha.is_file() and file_sha256(model) == sha.read_text().strip()


def cached_model(folder: Path, export: Callable[[Path], None], precision: str) -> Path:
    """The model file in ``folder``, built first where it is missing or does not match its sha256.

    ``export(path)`` writes the fp32 ONNX graph to ``path``; ``int8`` quantises it afterwards. One
    process builds at a time (a lock file beside the folder): the others wait and read its build."""
    import fasteners

    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: one of {', '.join(PRECISIONS)}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    with fasteners.InterProcessLock(str(folder) + ".lock"):
        if not intact(folder):
            build(folder, export, precision)
    return folder / MODEL_FILE


def build(folder: Path, export: Callable[[Path], None], precision: str) -> None:
    """Export (and quantise) in a temporary folder beside ``folder``, then rename it onto ``folder``
    (a corrupt build there is replaced whole)."""
    with atomic_folder(folder) as tmp:
        graph = tmp / ("fp32.onnx" if precision == "int8" else MODEL_FILE)
        export(graph)
        if precision == "int8":
            quantise(graph, tmp / MODEL_FILE)
            graph.unlink()
        (tmp / SHA_FILE).write_text(file_sha256(tmp / MODEL_FILE) + "\n")


def export_graph(module: Any, example: dict[str, Any], path: Path, output: str = OUTPUT) -> None:
    """``module(input_ids, attention_mask) -> output`` (P(check-worthy), or an embedding) as one ONNX
    file (weights inside), batch and sequence length dynamic."""
    import torch

    dims = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}  # batch, tokens
    torch.onnx.export(module.eval(), tuple(example[k] for k in INPUTS), str(path), input_names=list(INPUTS),
                      output_names=[output], dynamic_shapes={k: dims for k in INPUTS}, dynamo=True,
                      external_data=False, opset_version=RECIPE["opset"], verbose=False)


def quantise(source: Path, target: Path) -> None:
    """Int8 dynamic quantisation of every matrix product's weights (ONNX Runtime's)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8)


def session(path: Path) -> Any:
    """An ONNX Runtime session on the CPU, with as many intra-op threads as this process has cores."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads()
    options.inter_op_num_threads = 1
    # no busy-waiting between runs: a request's store work and the database then get the cores
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_by_length(model: Any, output: str, texts: Sequence[str], batch_size: int,
                  tokenise: Callable[[list[str]], Mapping[str, Any]], out: NDArray[Any]) -> NDArray[Any]:
    """``model``'s ``output`` for every text, written to ``out``'s rows in the texts' order: the
    texts batched by length (the least padding), each batch tokenised by ``tokenise`` to numpy."""
    order = np.argsort([len(t) for t in texts], kind="stable")
    for start in range(0, len(texts), batch_size):
        idx = order[start: start + batch_size]
        batch = tokenise([texts[i] for i in idx])
        out[idx] = model.run([output], {k: batch[k] for k in INPUTS})[0]
    return out
