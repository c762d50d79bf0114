"""The debate-candidates bench's cascade bands, mean log-odds and quick figures, on tiny hand-made input."""

from __future__ import annotations

import numpy as np
import pytest

from bench.bench_debate_candidates import band_of, mean_log_odds, quick_figures
from checkworthy.data.records import Claim
from checkworthy.runs.held_out import Event


def test_a_band_is_two_probabilities_in_order() -> None:
    assert band_of("0.09-0.21") == (0.09, 0.21)
    for bad in ("0.3-0.2", "0.2-1.5", "-0.1-0.2"):
        with pytest.raises(ValueError):
            band_of(bad)


def test_the_mean_of_log_odds_is_the_ensembles_rule() -> None:
    p = mean_log_odds(np.array([0.9, 0.5, 0.2]), np.array([0.1, 0.5, 0.2]))
    assert p.tolist() == pytest.approx([0.5, 0.5, 0.2])


def _claims(dataset: str, split: str, labels: list[int]) -> list[Claim]:
    return [Claim(dataset, f"{split}-{i}", f"{dataset} {split} claim {i}", y, split) for i, y in enumerate(labels)]


def test_quick_figures_read_l_first_then_each_event() -> None:
    labelled = {"claimbuster": _claims("claimbuster", "calibration", [0, 1] * 10)}
    event = Event("ClaimBuster 2016-09-26", "claimbuster", "claimbuster:2016",
                  _claims("claimbuster", "2016", [0, 0, 1, 1]))
    texts = [c.text for c in labelled["claimbuster"] + event.claims]
    index = {t: i for i, t in enumerate(texts)}
    # L ranks perfectly but for one pair; the event's claims are ranked perfectly
    scores = np.array([0.2, 0.8] * 9 + [0.7, 0.3] + [0.1, 0.3, 0.6, 0.9])
    q = quick_figures(scores, index, labelled, [event], seed=0)
    assert q["auc_l"]["claimbuster"] == pytest.approx(0.99)
    assert 0.8 < q["cv_f1_l"]["claimbuster"] <= 1.0
    assert q["f1_events"] == {"ClaimBuster 2016-09-26": 1.0}
