"""DVC stages (dvc.yaml) as Prefect flows: ``python -m checkworthy.flows.stages <stage>``.

Stages: validate, embed, score, calibrate, evaluate.

Each stage runs the same tasks as ``checkworthy-pipeline`` for its step and writes a small JSON
summary under ``metrics/`` that DVC tracks, so ``dvc repro`` re-runs exactly the steps whose
inputs (data, code, params.yaml keys) changed and ``dvc metrics show`` reads the results. The
state itself lives in Postgres; each step reuses what is stored, so a stage re-run is cheap.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from prefect import flow

from checkworthy.config import (
    DVC_REPORT,
    PARAMS_FILE,
    REPORTS_DIR,
    ROOT,
    labelled_sizes,
    load_params,
    model_name,
)
from checkworthy.flows.tasks import (
    TaskContext,
    bounds_of,
    calibrate_task,
    compare_task,
    embed_task,
    evaluate_task,
    prepare_task,
    run_spec,
    score_task,
    validate_task,
    version_data_task,
    write_json,
)
from checkworthy.runs.main_job import later_of_its_spec

STAGES = ("validate", "embed", "score", "calibrate", "evaluate")
METRICS = ROOT / "metrics"


def _read(name: str) -> Any:
    return json.loads((METRICS / name).read_text(encoding="utf-8"))


@flow(name="dvc-stage", log_prints=True)
def stage_flow(stage: str, params_path: str = str(PARAMS_FILE), db_url: str | None = None) -> dict[str, Any]:
    """One step of the main job, for ``dvc repro``."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r} (one of {', '.join(STAGES)})")
    params = load_params(Path(params_path))
    dv = version_data_task(str(ROOT), False, db_url, f"dvc-stage:{stage}", {"stage": stage})
    if stage == "evaluate":
        run_ids = [r["run_id"] for r in _read("calibration.json")["runs"]]
        if params.get("compare"):
            compare_task(run_ids, db_url)
        return evaluate_task(run_ids, db_url, str(METRICS / "evaluation.json"), DVC_REPORT, str(REPORTS_DIR),
                             params.get("report"))
    sizes = labelled_sizes(params)
    prepared = [prepare_task(name, params["seed"], sizes.get(name), dv, db_url)
                for name in params["datasets"]]
    ids = sorted({i for p in prepared for i in p["calibration_ids"] + p["test_ids"]})
    out: dict[str, Any]
    if stage == "validate":
        bounds = bounds_of(params)
        out = {p["lineage"]: validate_task(p["label_set_id"], bounds, dv, db_url) for p in prepared}
        write_json(METRICS / "validation.json", out)
    elif stage == "embed":
        out = {"n_claims": len(ids), "n_embedded_now": embed_task(ids, db_url)}
        write_json(METRICS / "embed.json", out)
    elif stage == "score":
        names = [model_name(m) for m in params["models"]]
        keys = [k for m in names
                for k in score_task(m, ids, params, db_url, alongside=later_of_its_spec(params, m))]
        out = {"n_claims": len(ids), "keys": keys}
        write_json(METRICS / "scores.json", out)
    else:  # calibrate
        verdicts, keys = _read("validation.json"), _read("scores.json")["keys"]
        runs = [calibrate_task(run_spec(p["target"], p["test_ids"], p["label_set_id"], key, k, params),
                               TaskContext(db_url, dv, verdicts[p["lineage"]]["validation_run_id"]))
                for p in prepared if verdicts[p["lineage"]]["success"] for key in keys for k in params["k"]]
        out = {"runs": runs, "blocked": sorted(n for n, v in verdicts.items() if not v["success"])}
        write_json(METRICS / "calibration.json", out)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in STAGES:
        sys.exit(f"usage: python -m checkworthy.flows.stages {{{','.join(STAGES)}}}")
    stage_flow(sys.argv[1])
