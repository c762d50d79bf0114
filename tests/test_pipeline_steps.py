"""The flows' decisions as plain functions (:mod:`checkworthy.runs.pipeline_steps`): which calibrations a
flow runs and in which order, the bounds of a smoke run, and the DVC stages' JSON read back as written."""

from __future__ import annotations

from checkworthy.flows.tasks import write_json
from checkworthy.runs.flow_types import (
    Calibrated,
    CalibrateStage,
    LabelVerdict,
    LineageWork,
    ScoredKey,
    ScoreStage,
)
from checkworthy.runs.pipeline_steps import (
    blocked,
    calibration_jobs,
    claim_ids,
    distinct_keys,
    in_target_order,
    read_keys,
    read_run_ids,
    read_verdicts,
    validation_bounds,
)

PARAMS = {"alpha": 0.1, "threshold": 0.5, "k": [3, 5], "interval": "conformal"}
KEYS = [ScoredKey("file:a", 1, "p1", "h", "verbalised"), ScoredKey("file:b", 2, "p1", "h", "verbalised")]


def test_only_the_lineages_that_passed_are_calibrated_target_by_key_by_k():
    good = LineageWork("good", 10, [1, 2], {"z:test": [5, 4], "a:test": [6]})
    bad = LineageWork("bad", 11, [3], {"b:test": [7]})
    verdicts = {"good": LabelVerdict(10, 100, True, []), "bad": LabelVerdict(11, 101, False, ["min_rows"])}
    jobs = calibration_jobs([good, bad], verdicts, KEYS, PARAMS)
    assert [(j.spec.target, j.spec.key.model_id, j.spec.methods.k) for j in jobs] == [
        (t, m, k) for t in ("a:test", "z:test") for m in (1, 2) for k in (3, 5)]
    assert {j.validation_run_id for j in jobs} == {100} and {j.spec.label_set_id for j in jobs} == {10}
    assert jobs[-1].spec.claim_ids == (4, 5) and jobs[0].spec.methods.interval_method == "conformal"
    assert jobs[0].spec.methods.alpha == 0.1
    assert blocked(verdicts) == ["bad"]
    assert claim_ids([good, bad]) == [1, 2, 3, 4, 5, 6, 7]


def test_a_smoke_run_lowers_the_minimum_rows_to_its_limit_only():
    assert validation_bounds({}).min_rows == 100  # params.yaml's default
    assert validation_bounds({}, 4).min_rows == 4
    assert validation_bounds({"validation": {"min_rows": 10}}, 40).min_rows == 10


def test_runs_by_target_keep_their_order_and_keys_come_once():
    def run(i: int, target: str) -> Calibrated:
        return Calibrated(i, "full", target, 3, "file:a", "verbalised", 1, 0)

    runs = [run(1, "b"), run(2, "a"), run(3, "b"), run(4, "a")]
    assert [r.run_id for r in in_target_order(runs, ["a", "b"])] == [2, 4, 1, 3]
    assert distinct_keys([KEYS[1], KEYS[0], KEYS[1]]) == [KEYS[1], KEYS[0]]


def test_a_stage_reads_back_what_an_earlier_stage_wrote(tmp_path):
    verdicts = {"good": LabelVerdict(10, 100, True, [])}
    write_json(tmp_path / "validation.json", verdicts)
    write_json(tmp_path / "scores.json", ScoreStage(3, KEYS))
    write_json(tmp_path / "calibration.json",
               CalibrateStage([Calibrated(9, "full", "a", 3, "file:a", "verbalised", 3, 0)], []))
    assert (tmp_path / "validation.json").read_text() == (
        '{\n  "good": {\n    "failures": [],\n    "label_set_id": 10,\n    "success": true,\n'
        '    "validation_run_id": 100\n  }\n}\n')
    assert read_verdicts(tmp_path / "validation.json") == verdicts
    assert read_keys(tmp_path / "scores.json") == KEYS
    assert read_run_ids(tmp_path / "calibration.json") == [9]
