"""Sampling settings of the generating scorers and the presets a ``sampling:`` option names.

``paper`` is the paper's setting per Gemma 3 size (270M T=0.8; 1B/4B T=1.0; top_k 64, top_p
0.95), ``t0.1`` its low-temperature ablation. Shared by the Ollama backend and the embedded
model (through the registry), so both read the same numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Sampling:
    """Decoding parameters; ``temperature == 0`` means greedy."""

    temperature: float
    top_k: int
    top_p: float


#: the paper's settings (Gemma 3 size tag -> sampling); other models get ``DEFAULT_SAMPLING``
PAPER_SAMPLING = {
    "270m": Sampling(0.8, 64, 0.95),
    "1b": Sampling(1.0, 64, 0.95),
    "4b": Sampling(1.0, 64, 0.95),
}
#: Gemma's recommended settings (= the paper's 1B/4B), recorded explicitly for any other model so
#: the scores never depend on a server-side default (an Ollama Modelfile's)
DEFAULT_SAMPLING = Sampling(1.0, 64, 0.95)
#: the paper's low-temperature ablation
ABLATION_T01 = Sampling(0.1, 64, 0.95)
GREEDY = Sampling(0.0, 0, 1.0)
_GEMMA3 = re.compile(r"^(?:[\w.-]+/)*gemma3:(270m|1b|4b)(?:-[\w.-]+)?$")


def paper_sampling(model: str, preset: str = "paper") -> tuple[Sampling, str]:
    """The sampling a model (an Ollama model name) gets under a preset, and the preset name
    actually applied (``default`` for a model the paper did not use)."""
    if preset == "t0.1":
        return ABLATION_T01, "t0.1"
    if preset != "paper":
        raise ValueError(f"unknown sampling preset {preset!r} (paper, t0.1)")
    match = _GEMMA3.match(model)
    if match:
        return PAPER_SAMPLING[match.group(1)], "paper"
    return DEFAULT_SAMPLING, "default"
