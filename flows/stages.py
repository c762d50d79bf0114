"""DVC stages (dvc.yaml) as Prefect flows: ``python -m checkworthy.flows.stages <stage>``.

Stages: validate, embed, score, calibrate, evaluate.

Each stage runs the same tasks as ``checkworthy-pipeline`` for its step and writes a small JSON
summary under ``metrics/`` that DVC tracks, so ``dvc repro`` re-runs exactly the steps whose
inputs (data, code, params.yaml keys) changed and ``dvc metrics show`` reads the results. The
state itself lives in Postgres; each step reuses what is stored, so a stage re-run is cheap.
"""

from __future__ import annotations

import sys
from typing import Any

from prefect import flow

from checkworthy.config import DVC_REPORT, REPORTS_DIR, ROOT, labelled_sizes
from checkworthy.flows.tasks import (
    TaskContext,
    calibrate_task,
    compare_task,
    embed_task,
    evaluate_task,
    prepare_task,
    score_task,
    validate_task,
    version_data_task,
    write_json,
)
from checkworthy.runs.flow_types import (
    CalibrateStage,
    EmbedStage,
    Evaluation,
    FlowContext,
    LabelVerdict,
    PreparedDataset,
    ScoreStage,
)
from checkworthy.runs.main_job import later_of_its_spec
from checkworthy.runs.pipeline_steps import (
    blocked,
    calibration_jobs,
    model_names,
    read_keys,
    read_run_ids,
    read_verdicts,
    validation_bounds,
)

STAGES = ("validate", "embed", "score", "calibrate", "evaluate")
METRICS = ROOT / "metrics"
Outcome = dict[str, LabelVerdict] | EmbedStage | ScoreStage | CalibrateStage | Evaluation


def _evaluate(params: dict[str, Any], ctx: FlowContext) -> Evaluation:
    """Compare the methods (if params ask) and evaluate the calibrate stage's runs; write the report."""
    run_ids = read_run_ids(METRICS / "calibration.json")
    if params.get("compare"):
        compare_task(run_ids, ctx)
    return evaluate_task(run_ids, ctx, str(METRICS / "evaluation.json"), DVC_REPORT, str(REPORTS_DIR),
                         params.get("report"))


def _step(stage: str, prepared: list[PreparedDataset], params: dict[str, Any], dv: int,
          ctx: FlowContext) -> Outcome:
    """The validate, embed, score or calibrate step on the prepared datasets."""
    ids = sorted({i for p in prepared for i in p.calibration_ids + p.test_ids})
    if stage == "validate":
        return {p.lineage: validate_task(p.label_set_id, validation_bounds(params), dv, ctx)
                for p in prepared}
    if stage == "embed":
        return EmbedStage(len(ids), embed_task(ids, ctx))
    if stage == "score":
        return ScoreStage(len(ids), [k for m in model_names(params)
                                     for k in score_task(m, ids, params, ctx,
                                                         alongside=later_of_its_spec(params, m))])
    verdicts = read_verdicts(METRICS / "validation.json")
    keys = read_keys(METRICS / "scores.json")
    jobs = calibration_jobs([p.work() for p in prepared], verdicts, keys, params)
    return CalibrateStage([calibrate_task(j.spec, TaskContext(ctx, dv, j.validation_run_id)) for j in jobs],
                          blocked(verdicts))


FILES = {"validate": "validation.json", "embed": "embed.json", "score": "scores.json",
         "calibrate": "calibration.json"}


@flow(name="dvc-stage", log_prints=True)
def stage_flow(stage: str, ctx: FlowContext | None = None) -> Outcome:
    """One step of the main job, for ``dvc repro``."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r} (one of {', '.join(STAGES)})")
    ctx = ctx or FlowContext()
    params = ctx.params()
    dv = version_data_task(ctx, False, f"dvc-stage:{stage}", {"stage": stage})
    if stage == "evaluate":
        return _evaluate(params, ctx)
    sizes = labelled_sizes(params)
    prepared = [prepare_task(name, params["seed"], sizes.get(name), dv, ctx) for name in params["datasets"]]
    out = _step(stage, prepared, params, dv, ctx)
    write_json(METRICS / FILES[stage], out)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in STAGES:
        sys.exit(f"usage: python -m checkworthy.flows.stages {{{','.join(STAGES)}}}")
    stage_flow(sys.argv[1])
