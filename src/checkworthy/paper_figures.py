"""The paper's reference figures (Amatya et al. 2026), for side-by-side reports.

Weighted F1, (baseline, knn, nnppi) per k, and Gemma 3 270M class F1 where the paper gives it.
"""

from __future__ import annotations

WEIGHTED_F1: dict[str, dict[str, dict[int, tuple[float, float, float]]]] = {
    "claimbuster": {
        "gemma3-270m": {3: (0.114, 0.697, 0.698), 5: (0.114, 0.710, 0.709), 10: (0.114, 0.703, 0.721)},
        "gemma3-1b": {3: (0.638, 0.698, 0.721), 5: (0.638, 0.712, 0.733), 10: (0.638, 0.699, 0.734)},
        "gemma3-4b": {3: (0.568, 0.703, 0.729), 5: (0.568, 0.719, 0.745), 10: (0.568, 0.707, 0.760)},
        "xlmr-large-ft": {3: (0.789, 0.704, 0.767), 5: (0.789, 0.723, 0.790), 10: (0.789, 0.712, 0.820)},
        "gpt-5.2": {3: (0.843, 0.703, 0.817), 5: (0.843, 0.720, 0.827), 10: (0.843, 0.706, 0.846)},
        "claude-opus-4.6": {3: (0.832, 0.703, 0.816), 5: (0.832, 0.720, 0.836), 10: (0.832, 0.706, 0.858)},
    },
    "clef2024": {
        "gemma3-270m": {3: (0.179, 0.801, 0.800), 5: (0.179, 0.824, 0.827), 10: (0.179, 0.809, 0.822)},
        "gemma3-1b": {3: (0.720, 0.780, 0.771), 5: (0.720, 0.801, 0.777), 10: (0.720, 0.803, 0.761)},
        "gemma3-4b": {3: (0.688, 0.790, 0.795), 5: (0.688, 0.801, 0.824), 10: (0.688, 0.807, 0.827)},
        "xlmr-large-ft": {3: (0.754, 0.755, 0.787), 5: (0.754, 0.780, 0.811), 10: (0.754, 0.782, 0.837)},
        "gpt-5.2": {3: (0.835, 0.786, 0.852), 5: (0.835, 0.801, 0.879), 10: (0.835, 0.801, 0.863)},
        "claude-opus-4.6": {3: (0.855, 0.790, 0.866), 5: (0.855, 0.801, 0.899), 10: (0.855, 0.804, 0.899)},
    },
}

#: Gemma 3 270M class F1 (class 0, class 1) given in the paper: method -> (k, f1_0, f1_1)
GEMMA_270M_CLASS_F1: dict[str, dict[str, tuple[int | None, float, float]]] = {
    "claimbuster": {"baseline": (None, 0.000, 0.425), "nnppi": (10, 0.790, 0.532)},
    "clef2024": {"baseline": (None, 0.000, 0.513), "nnppi": (5, 0.863, 0.760)},
}

#: empirical coverage of the nominal 95% interval averaged over models: k -> (class 0, 1, all)
COVERAGE: dict[str, dict[int, tuple[float, float, float]]] = {
    "claimbuster": {3: (0.688, 0.536, 0.648), 5: (0.663, 0.468, 0.611), 10: (0.516, 0.328, 0.466)},
    "clef2024": {3: (0.727, 0.605, 0.685), 5: (0.695, 0.568, 0.652), 10: (0.581, 0.421, 0.526)},
}


def paper_model_name(spec: str) -> str | None:
    """Map one of our model specs to the paper's model row, if it has one."""
    if "gemma3-270m" in spec or "gemma3:270m" in spec:
        return "gemma3-270m"
    if "gemma3:1b" in spec:
        return "gemma3-1b"
    if "gemma3:4b" in spec:
        return "gemma3-4b"
    return None
