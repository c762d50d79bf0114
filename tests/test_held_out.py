"""``checkworthy evaluate``: predictors on held-out events through predict's path, on the real store."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from checkworthy.cli.main import main
from checkworthy.config import ROOT, load_params
from checkworthy.method.predictor_choice import AUTO_CANDIDATES
from checkworthy.report import held_out as report
from checkworthy.runs import held_out
from checkworthy.scorers.classifier import ARTEFACT_ROOT
from checkworthy.settings import Settings
from checkworthy.store.audit import table_counts

LR = ("classifier:minilm-lr", "p_positive")
EVENTS = ["ClaimBuster 2016-09-26", "ClaimBuster 2016-10-09", "ClaimBuster 2016-10-19", "CLEF 2024 dev",
          "CLEF 2024 dev-test"]


@pytest.fixture(scope="module")
def measured(engine, tmp_path_factory):
    work = tmp_path_factory.mktemp("held-out")
    return (*held_out.evaluate_held_out(engine, [LR], limit=20, work_dir=work), work)


def test_events_are_unseen_and_each_debate_stands_alone():
    labelled, events = held_out.held_out_events(2026, {"claimbuster": None, "clef2024": 1203})
    assert [e.name for e in events] == EVENTS
    assert {e.group for e in events} == {"claimbuster:2016", "clef2024:dev", "clef2024:dev-test"}
    assert sum(len(e.claims) for e in events[:3]) == 2745 and len(events[4].claims) == 318
    for e in events:
        known = {c.text for c in labelled[e.dataset]}
        assert not known & {c.text for c in e.claims}


def test_every_method_on_every_event(measured):
    rows, chosen_by, events, _ = measured
    methods = {"raw score at 0.5", "recommended", "recommended, batch prior", "paper NN-PPI"}
    assert {(m.method, m.event) for m in rows} == {(a, b) for a in methods for b in EVENTS}
    for m in rows:
        f = m.figures
        assert f["n"] == 20 and 0 <= f["f1_1"] <= 1 and 0 <= f["weighted_f1"] <= 1
        assert ("coverage_1" in f) == (m.method != "raw score at 0.5")
        # every calibration run carries its decide-or-review rule; the event measures it
        assert ("automated_share" in f) == (m.method != "raw score at 0.5")
        if "automated_share" in f:
            assert 0 <= f["automated_share"] <= 1 and 0 <= f["realised_risk"] <= 1 and f["max_risk"] == 0.1
        if "share_estimate" in f:  # the run's label-shift estimate of the event's share, against the truth
            assert 0 <= f["share_estimate"] <= 1 and 0 <= f["share_naive"] <= 1
            assert "share_low" not in f or f["share_covered"] == (f["share_low"] <= f["share_positive"]
                                                                  <= f["share_high"])
    assert any("share_estimate" in m.figures for m in rows if m.method == "recommended")
    for m in rows:  # the recommended correction is auto: its choice on L comes with each run
        assert (m.auto_choice is not None) == m.method.startswith("recommended")
        if m.auto_choice:
            assert m.auto_choice["chosen"] in AUTO_CANDIDATES
            assert set(m.auto_choice["cv_f1_positive"]) == set(AUTO_CANDIDATES)
    label = "classifier:minilm-lr p_positive"
    assert set(chosen_by[label]) == {"claimbuster", "clef2024"} and min(chosen_by[label].values()) > 0.7
    summary = report.summary(rows)
    assert len(summary) == 4
    for r in summary:
        assert r["f1_1_min"] <= r["f1_1"] <= r["f1_1_max"] and not np.isnan(r["map_debates"])


def test_a_second_evaluation_reuses_every_score_and_run(engine, measured):
    rows, _, _, work = measured
    before = table_counts(engine)
    again, _, _ = held_out.evaluate_held_out(engine, [LR], limit=20, work_dir=work)
    assert table_counts(engine) == before
    assert [(m.run_id, m.figures) for m in again] == [(m.run_id, m.figures) for m in rows]


def test_only_the_named_methods_are_run_and_their_runs_are_the_same(engine, measured):
    rows, _, _, work = measured
    before = table_counts(engine)
    quick, _, _ = held_out.evaluate_held_out(engine, [LR], limit=20, work_dir=work, only=("recommended",))
    assert table_counts(engine) == before
    assert {m.method for m in quick} == {"raw score at 0.5", "recommended"}
    kept = [(m.method, m.event, m.run_id, m.figures) for m in rows if m.method in ("raw score at 0.5", "recommended")]
    assert [(m.method, m.event, m.run_id, m.figures) for m in quick] == kept


def test_the_report_leads_with_the_spread_across_events(measured, tmp_path):
    rows, chosen_by, events, _ = measured
    md = report.write(tmp_path, rows, chosen_by, events, "the recommended path").read_text()
    assert (md.index("## Across events") < md.index("## Each event") < md.index("## Share check-worthy")
            < md.index("## How the correction is chosen") < md.index("## How the predictor"))
    assert "| predictor | labelled set | " + " | ".join(AUTO_CANDIDATES) + " | chosen |" in md
    assert "| ECE | Brier | automated (error among them, max) |" in md and "![reliability of the recommended theta](reliability.png)" in md
    assert (tmp_path / "reliability.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "F1 c1 (min-max)" in md and all(e in md for e in EVENTS)
    body = json.loads((tmp_path / "held-out.json").read_text())  # strict JSON: no NaN
    assert all(0 <= r["ece"] <= 1 for r in body["measured"])
    assert all(r["reliability"] for r in body["measured"] if r["method"] != "raw score at 0.5")
    assert len(body["measured"]) == len(rows) and body["events"]["CLEF 2024 dev-test"]["n"] == 20


def test_a_predictor_trained_on_an_event_is_refused(engine, tmp_path):
    """A classifier whose training did not exclude CLEF dev must not be measured on it."""
    version = (ARTEFACT_ROOT / "minilm-lr" / "LATEST").read_text().strip()
    shutil.copytree(ARTEFACT_ROOT / "minilm-lr", tmp_path / "leaky")
    manifest = tmp_path / "leaky" / version / "manifest.json"
    m = json.loads(manifest.read_text())
    del m["training_data"]["excluded"]["clef2024:dev"]
    manifest.write_text(json.dumps(m))
    settings = Settings.parse(load_params() | {"models": [{"spec": "classifier:leaky", "root": str(tmp_path)}]})
    with pytest.raises(ValueError, match="trained on CLEF 2024 dev: retrain"):
        held_out.evaluate_held_out(engine, [("classifier:leaky", "p_positive")], settings=settings,
                                   limit=5,
                                   work_dir=tmp_path / "work")


@pytest.mark.parametrize("argv, needle", [
    (["--models", "classifier:minilm-lr"], "--models: expected SPEC=SCORE_KIND"),
    (["--out", str(ROOT / "README.md")], "is a file; name a folder"),
    (["--out", "no/such/folder/x"], "no such directory"),
])
def test_bad_options_are_refused_in_one_line(argv, needle, capsys):
    assert main(["evaluate", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
