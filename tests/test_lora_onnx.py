"""The LoRA classifiers on ONNX Runtime: the same scores as the torch module they are exported from,
on real texts with the real MiniLM and the versioned ``minilm-lora`` artefact; an exported model
cached under its artefact's files' sha256, rebuilt when the artefact changes or the cached file does
not match its sha256."""

from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from checkworthy.runs import train_classifier as training
from checkworthy.scorers.classifier import ARTEFACT_ROOT, latest_version
from checkworthy.scorers.lora_classifier import (
    LoraClassifierScorer,
    encode,
    load_lora,
    onnx_model,
    sha256_bytes,
    torch_graph,
)
from checkworthy.scorers.onnx_runtime import MODEL_FILE, SHA_FILE, intact


def real_texts(n: int, seed: int = 5) -> list[str]:
    groups = training.load_groups(2026, {"claimbuster": None, "clef2024": 1203})
    return [c.text for c in random.Random(seed).sample(groups["claimbuster:2016"], n)]


def torch_scores(art, texts: list[str]) -> np.ndarray:
    """P(check-worthy) from the torch module the graph was exported from, one batch."""
    graph = torch_graph(art.folder, art.base, art.normalise)
    with torch.inference_mode():
        batch = encode(art.tok, art.base, texts)
        return graph(batch["input_ids"], batch["attention_mask"]).double().numpy()


@pytest.fixture(scope="module")
def artefact(tmp_path_factory):
    """A copy of the versioned minilm-lora artefact, with a cache of its own."""
    root = tmp_path_factory.mktemp("artefacts")
    version = latest_version("minilm-lora")
    shutil.copytree(ARTEFACT_ROOT / "minilm-lora" / version, root / "minilm-lora" / version)
    (root / "minilm-lora" / "LATEST").write_text(version + "\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CHECKWORTHY_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield root, root / "minilm-lora" / version


def test_onnx_scores_equal_the_torch_module_on_real_texts(artefact):
    root, _ = artefact
    texts = real_texts(48)
    scorer = LoraClassifierScorer("minilm-lora", root=root)
    art = scorer.artefact
    p = np.array([o["p_positive"].score for o in scorer.score(texts)])
    assert p == pytest.approx(torch_scores(art, texts), abs=1e-5)
    assert p == pytest.approx(art.predict_proba(texts[::-1], batch_size=7)[::-1], abs=1e-6)  # batching, padding
    assert scorer.params()["runtime"] == {"engine": "onnxruntime", "precision": art.base.precision}


def test_the_cached_model_is_keyed_by_the_artefact_and_rebuilt_when_it_changes(artefact):
    root, folder = artefact
    art = load_lora("minilm-lora", root)
    first = onnx_model(folder, art.base, art.normalise, art.base.precision)
    built = first.stat().st_mtime_ns
    assert load_lora("minilm-lora", root) and first.stat().st_mtime_ns == built  # read, not rebuilt
    texts = real_texts(8, seed=9)
    before = art.predict_proba(texts)

    head = load_file(str(folder / "head.safetensors"))  # the same artefact with another head bias
    save_file({**head, "bias": head["bias"] + torch.tensor([0.0, 1.0])}, str(folder / "head.safetensors"))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["head.safetensors"] = sha256_bytes((folder / "head.safetensors").read_bytes())
    (folder / "manifest.json").write_text(json.dumps(manifest))
    changed = load_lora("minilm-lora", root)
    second = onnx_model(folder, changed.base, changed.normalise, changed.base.precision)
    assert second.parent != first.parent and intact(first.parent) and intact(second.parent)
    after = changed.predict_proba(texts)
    assert np.all(after > before)
    assert after == pytest.approx(torch_scores(changed, texts), abs=1e-5)


def test_a_corrupt_cached_model_is_rebuilt(artefact):
    root, folder = artefact
    art = load_lora("minilm-lora", root)
    path = onnx_model(folder, art.base, art.normalise, art.base.precision)
    texts = real_texts(8, seed=13)
    expected = art.predict_proba(texts)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one weight's byte flipped: ONNX Runtime would load it
    path.write_bytes(bytes(data))
    assert not intact(path.parent)
    again = load_lora("minilm-lora", root)
    assert intact(path.parent) and (path.parent / SHA_FILE).is_file() and path.name == MODEL_FILE
    assert again.predict_proba(texts) == pytest.approx(expected, abs=1e-7)
