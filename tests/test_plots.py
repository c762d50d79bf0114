"""Figures are valid PNGs, identical for identical data, and carry no timestamps."""

import hashlib
import io

import matplotlib as mpl
import pytest
from matplotlib.image import imread

from checkworthy.report import plots

SERIES = {"baseline": [(1, 0.2), (3, 0.2), (10, 0.2)], "knn": [(1, 0.6), (3, 0.7), (10, 0.72)],
          "nnppi": [(1, 0.65), (3, 0.74), (10, 0.78)]}

FIGURES = {
    "f1_vs_k": lambda: plots.f1_vs_k("t", SERIES, {"nnppi": [(3, 0.8), (10, 0.82)]}),
    "f1_vs_size": lambda: plots.f1_vs_size("t", {3: [(50, 0.6, 0.05), (100, 0.7, 0.02)],
                                                 5: [(50, 0.62, 0.04)]}),
    "reliability": lambda: plots.reliability("t", [("k=3", {"baseline": [(0.55, 0.3, 10), (0.85, 0.4, 5)],
                                                            "nnppi": [(0.2, 0.1, 8), (0.7, 0.8, 7)]})]),
    "histograms": lambda: plots.histograms("t", [("raw", [0, 0.5, 1], {"0": [3, 1], "1": [1, 4]})]),
    "grouped_bars": lambda: plots.grouped_bars("t", ["recommended", "NN-PPI", "raw score"], ["a", "b"],
                                               [[0.8, 0.7], [0.6, None], [0.4, 0.5]], "F1", [(1, 0, 0.55)]),
}


@pytest.mark.parametrize("name", list(FIGURES))
def test_figure_is_a_deterministic_png(name):
    a, b = FIGURES[name](), FIGURES[name]()
    assert a[:8] == b"\x89PNG\r\n\x1a\n"
    assert hashlib.sha256(a).digest() == hashlib.sha256(b).digest()
    assert b"Software" not in a and b"matplotlib" not in a.lower()
    img = imread(io.BytesIO(a), format="png")
    assert img.shape[0] > 200 and img.shape[1] > 300
    assert img[..., :3].std() > 0.05  # something was drawn


def test_local_style_settings_do_not_change_the_bytes():
    before = FIGURES["f1_vs_k"]()
    with mpl.rc_context({"font.size": 20, "lines.linewidth": 5, "axes.facecolor": "black"}):
        assert FIGURES["f1_vs_k"]() == before
