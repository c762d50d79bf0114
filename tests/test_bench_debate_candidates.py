"""The debate-candidates bench's cascade bands, mean log-odds and quick figures, on tiny hand-made input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.bench_debate_candidates import band_of, from_json, mean_log_odds, quick_figures, summarise
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


def test_an_evaluate_output_is_read_back_and_summarised(tmp_path, capsys) -> None:
    rows = [{"predictor": "p", "method": "recommended", "event": e, "run_id": i, "f1_1": f, "roc_auc": 0.9,
             "auto_choice": {"chosen": "platt", "cv_f1_positive": {"platt": cv}}, "reliability": []}
            for i, (e, f, cv) in enumerate([("ClaimBuster 2016-09-26", 0.7, 0.8), ("CLEF 2024 dev", 0.9, 0.85)])]
    path = tmp_path / "held-out.json"
    path.write_text(json.dumps({"measured": rows, "chosen_by_labelled_auc": {"p": {"claimbuster": 0.9,
                                                                                   "clef2024": 0.93}}}))
    measured, chosen_by = from_json(path)
    assert [(m.event, m.figures) for m in measured] == [("ClaimBuster 2016-09-26", {"f1_1": 0.7, "roc_auc": 0.9}),
                                                        ("CLEF 2024 dev", {"f1_1": 0.9, "roc_auc": 0.9})]
    summarise(measured, chosen_by)
    assert "| p | 0.9000 / 0.9300 | 0.800 / 0.850 | 0.800 (0.700-0.900) | 0.700 / 0.900 |" in capsys.readouterr().out
