"""The F1 cut on theta: the best positive-class F1 on L, ties to the cut nearest the run's threshold."""

from __future__ import annotations

import numpy as np
import pytest

from checkworthy.method.decision_cut import CUTS, f1_cut


def test_the_cut_with_the_best_f1_is_chosen() -> None:
    theta = np.array([0.05, 0.1, 0.2, 0.3, 0.35, 0.6, 0.1, 0.25, 0.4, 0.05])
    y = np.array([0, 0, 0, 1, 1, 1, 0, 1, 1, 0])
    cut = f1_cut(theta, y, 0.5)
    assert cut.f1 == pytest.approx(1.0) and 0.2 < cut.threshold <= 0.25  # 0.21 to 0.25 part the classes
    assert cut.threshold == 0.25  # of the tied cuts, the nearest 0.5
    assert cut.f1_at_run_threshold == pytest.approx(2 * 1 / 5 / (1 + 1 / 5))  # only 0.6 called: recall 1/5
    assert CUTS[0] == 0.05 and CUTS[-1] == 0.95 and len(CUTS) == 91


@pytest.mark.parametrize(("theta", "y"), [([0.2, 0.4], [1]), ([], []), ([0.2, np.nan], [0, 1])])
def test_a_cut_it_cannot_choose_is_refused(theta, y) -> None:
    with pytest.raises(ValueError, match="finite, of one length, and not empty"):
        f1_cut(theta, y, 0.5)
