"""Prefect flows of checkworthy. Tasks wrap ``checkworthy`` functions; flows only wire them.

Flows (each is also a deployment, see ``flows/deploy.py`` and ``prefect.yaml``):

- ``checkworthy-pipeline``  the main job (``checkworthy run``): version the data (DVC), prepare
  the datasets, validate every calibration label set (Great Expectations), embed, score with
  each configured model and calibrate (incrementally where a previous run exists), the paper's
  pass first with its table shown, evaluate.
- ``label-update``          apply new label files (``data/labels/*.csv`` or ``checkworthy labels
  add FILE``): DVC version, validation gate, append-only labels, new label-set versions, then
  the Prefect event ``checkworthy.labels.updated``.
- ``recalibrate``           triggered by that event: validate each lineage head, recalibrate
  every calibration in force incrementally, evaluate. A failing suite keeps the old calibration.
- ``guidelines-update`` / ``rescore``  a guideline edit becomes a DVC + Postgres version and the
  event ``checkworthy.guidelines.updated``; ``rescore`` scores the claims under the new prompt
  and recalibrates them.
- ``score-new-claims``      scheduled: ingest ``data/incoming/*.csv``, embed and score what is new,
  bring the calibrations up to date (only the new claims are computed).
- ``adapt``                 on label updates (and daily): each lineage whose labels have grown by
  ``adapt.every_n_labels`` trains its cross-fitted model again (``checkworthy adapt``), which is
  compared with the champion and promoted or not; a promotion recalibrates the lineage's targets
  with the new champion's scores.
- ``watch-changes``         scheduled: closes the calibration runs a dead process left running,
  notices label files and guideline edits made without the CLI and runs the two update flows.
- ``score-and-embed``       the main job's embedding and scoring fanned out in fixed chunks of
  texts, one task per chunk, on the task runner params.yaml's ``scale_out`` names (a local or a
  remote Dask cluster; :mod:`checkworthy.flows.task_runners`).

The flows only wire the tasks of :mod:`checkworthy.flows.tasks`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from prefect import flow, unmapped
from pydantic import BaseModel, ConfigDict

from checkworthy.config import (
    GUIDELINES_FILE,
    PARAMS_FILE,
    REPORTS_DIR,
    ROOT,
    labelled_sizes,
    load_params,
    model_name,
)
from checkworthy.flows.task_runners import dask_address, share_api_with_workers, task_runner
from checkworthy.flows.tasks import (
    TaskContext,
    adapt_task,
    apply_labels_task,
    bounds_of,
    calibrate_task,
    check_labels_task,
    close_abandoned_task,
    compare_task,
    embed_chunk_task,
    embed_task,
    evaluate_task,
    first_table_task,
    guidelines_task,
    ingest_task,
    lineage_names_task,
    lineages_task,
    pending_labels_task,
    place_task,
    prepare_task,
    recalibrate_champion_task,
    recalibrate_lineage_task,
    run_spec,
    say,
    score_chunk_task,
    score_in_force_task,
    score_task,
    stale_targets_task,
    text_chunks_task,
    validate_task,
    version_data_task,
)
from checkworthy.runs.main_job import later_of_its_spec


def _claim_ids(lineages: list[dict[str, Any]]) -> list[int]:
    """Every claim the lineages calibrate with or calibrate: their labelled sets and targets."""
    return sorted({i for lin in lineages for i in lin["calibration_ids"]}
                  | {i for lin in lineages for t in lin["targets"].values() for i in t})


def _score(ids: list[int], models: list[str], params: dict[str, Any], db_url: str | None,
           guidelines: str | None, echo: bool = False) -> list[dict[str, Any]]:
    """Embed and score the claims with the named ``models:`` entries; return their score keys. In
    this process each entry is scored in the forward passes of an earlier entry of its spec where
    it can be (:func:`later_of_its_spec`): the later ones then find their scores stored."""
    if dask_address(params):
        return fan_out(ids, params, db_url, guidelines, models)
    say(f"embedded {embed_task(ids, db_url)} new texts", echo)
    return [key for model in models
            for key in score_task(model, ids, params, db_url, guidelines, echo,
                                  later_of_its_spec(params, model))]


def _calibrate(lineages: list[dict[str, Any]], verdicts: dict[str, dict], keys: list[dict[str, Any]],
               params: dict[str, Any], dv: int | None, db_url: str | None) -> list[dict[str, Any]]:
    """Calibrate every target of every lineage whose labels passed validation, under each score key
    and each k."""
    runs = []
    for lin in lineages:
        verdict = verdicts[lin["lineage"]]
        if not verdict["success"]:
            continue
        for target, claim_ids in sorted(lin["targets"].items()):
            for key in keys:
                for k in params["k"]:
                    spec = run_spec(target, claim_ids, lin["label_set_id"], key, k, params)
                    runs.append(calibrate_task(spec, TaskContext(db_url, dv, verdict["validation_run_id"])))
    return runs


def _calibrate_all(lineages: list[dict[str, Any]], verdicts: dict[str, dict], params: dict[str, Any],
                   dv: int | None, db_url: str | None, guidelines: str | None) -> list[dict[str, Any]]:
    """Embed and score the lineages' claims with every configured model, then calibrate every target."""
    ids = _claim_ids(lineages)
    if not ids:
        return []
    keys = _score(ids, [model_name(m) for m in params["models"]], params, db_url, guidelines)
    return _calibrate(lineages, verdicts, keys, params, dv, db_url)


@flow(name="score-and-embed", log_prints=True)
def score_and_embed_flow(claim_ids: list[int], models: list[str], params: dict[str, Any],
                         db_url: str | None = None, guidelines: str | None = None) -> list[dict[str, Any]]:
    """Embed the claims' texts and score them with each model, a task per fixed chunk of texts on
    the flow's task runner (``models``: names of ``models:`` entries): a chunk lost with its worker
    runs again, a stored one never does."""
    size = int((params.get("scale_out") or {}).get("chunk_size", 96))
    chunks = text_chunks_task(claim_ids, size, db_url)
    embedded = embed_chunk_task.map(chunks, unmapped(db_url))
    scored = [score_chunk_task.map(unmapped(model), chunks, unmapped(params), unmapped(db_url),
                                   unmapped(guidelines)) for model in models]
    print(f"embedded {sum(f.result() for f in embedded)} new texts in {len(chunks)} chunks")
    keys = {json.dumps(k, sort_keys=True): k for futures in scored for f in futures for k in f.result()}
    return list(keys.values())


def fan_out(claim_ids: list[int], params: dict[str, Any], db_url: str | None = None,
            guidelines: str | None = None, models: list[str] | None = None) -> list[dict[str, Any]]:
    """:func:`score_and_embed_flow` for the named ``models:`` entries (default: every configured
    one), on the task runner params ask for."""
    if dask_address(params):
        share_api_with_workers()
    run = score_and_embed_flow.with_options(task_runner=task_runner(params))
    names = [model_name(m) for m in params["models"]] if models is None else models
    return run(claim_ids, names, params, db_url, guidelines)


class ReportOptions(BaseModel):
    """What the main job writes besides its runs: the report, named ``name`` exactly or ``prefix``
    and the time (scheduled deployments) or not written, in ``folder`` (default reports/), and
    the metrics file (``metrics_file``, for DVC)."""

    model_config = ConfigDict(frozen=True)

    name: str | None = None
    prefix: str | None = None
    folder: str | None = None
    metrics_file: str | None = None

    def report_name(self) -> str | None:
        """The report's name for a run starting now."""
        if self.prefix and not self.name:
            return f"{self.prefix}-{time.strftime('%Y%m%d-%H%M%S')}"
        return self.name

    def table_path(self) -> str | None:
        """Where the first table is written (``<name>.first-table.txt`` beside the report's folder,
        which the report replaces whole), when the report is named exactly; none for a scheduled
        report (named when it is written) or none at all."""
        if not self.name:
            return None
        return str(Path(self.folder or REPORTS_DIR) / f"{self.name}.first-table.txt")


@flow(name="checkworthy-pipeline", log_prints=True)
def pipeline_flow(params_path: str = str(PARAMS_FILE), db_url: str | None = None, repo: str = str(ROOT),
                  commit_data: bool = True, limit: int | None = None, echo: bool = False,
                  report: ReportOptions | None = None) -> dict[str, Any]:
    """The main job: data version -> datasets -> validation -> embed -> score and calibrate the first
    ``models:`` entry (the paper's pass), its table shown -> score and calibrate the others ->
    compare -> evaluate; the last task writes the report (:class:`ReportOptions`) with the flow
    run's artifacts.

    ``commit_data`` snapshots data/ first (``dvc add`` + ``dvc push``; a no-op when unchanged), so
    the recorded hash is the data actually used. ``echo`` also prints progress to stdout
    (``checkworthy run``).
    """
    t0 = time.monotonic()
    report = report or ReportOptions()
    params = load_params(Path(params_path))
    dv = version_data_task(repo, commit_data, db_url, "checkworthy-pipeline",
                           {"params": params, "limit": limit})
    prepared = []
    for name in params["datasets"]:
        p = prepare_task(name, params["seed"], labelled_sizes(params).get(name), dv, db_url, limit, echo)
        say(f"{name}: calibration set {len(p['calibration_ids'])} claims ({p['lineage']}, label set "
            f"{p['label_set_id']}), test {len(p['test_ids'])}", echo)
        prepared.append(p)
    bounds = bounds_of(params)
    if limit:  # a smoke run's calibration set is at most ``limit`` claims by construction
        bounds["min_rows"] = min(bounds["min_rows"], limit)
    verdicts = {p["lineage"]: validate_task(p["label_set_id"], bounds, dv, db_url) for p in prepared}
    lineages = [{"lineage": p["lineage"], "label_set_id": p["label_set_id"],
                 "calibration_ids": p["calibration_ids"], "targets": {p["target"]: p["test_ids"]}}
                for p in prepared]
    # the first entry (the paper's pass) is scored and calibrated first and its table shown, before
    # the ablation and the other models are
    ids, (first, *others) = _claim_ids(lineages), [model_name(m) for m in params["models"]]
    keys = _score(ids, [first], params, db_url, None, echo)
    runs = _calibrate(lineages, verdicts, keys, params, dv, db_url)
    first_table_task([r["run_id"] for r in runs], db_url, report.table_path(), echo)
    keys = _score(ids, others, params, db_url, None, echo)
    runs += _calibrate(lineages, verdicts, keys, params, dv, db_url)
    targets = [p["target"] for p in prepared]
    runs.sort(key=lambda r: targets.index(r["target"]))  # each target's runs in models: order
    run_ids = [r["run_id"] for r in runs]
    if params.get("compare"):
        say(f"compared the methods on {len(compare_task(run_ids, db_url))} runs", echo)
    ev = evaluate_task(run_ids, db_url, report.metrics_file, report.report_name(), report.folder,
                       params.get("report"))
    return {"runs": runs, "run_ids": run_ids, "data_version_id": dv, "validations": list(verdicts.values()),
            "report": ev["report"], "metrics": ev["metrics"], "seconds": time.monotonic() - t0}


@flow(name="recalibrate", log_prints=True)
def recalibrate_flow(label_set_names: list[str] | None = None, db_url: str | None = None,
                     repo: str = str(ROOT), params_path: str = str(PARAMS_FILE),
                     reason: str = "labels", metrics_file: str | None = None) -> dict[str, Any]:
    """Validate each lineage head and recalibrate its calibrations in force (incrementally)."""
    params = load_params(Path(params_path))
    dv = version_data_task(repo, False, db_url, "recalibrate", {"label_set_names": label_set_names,
                                                                "reason": reason})
    out: dict[str, Any] = {"validations": [], "runs": [], "skipped": []}
    for lin in lineages_task(db_url, label_set_names):
        verdict = validate_task(lin["label_set_id"], bounds_of(params), dv, db_url)
        out["validations"].append(verdict | {"lineage": lin["lineage"]})
        if not verdict["success"]:
            out["skipped"].append(lin["lineage"])
            continue
        embed_task(lin["calibration_ids"], db_url)  # newly labelled claims need a vector ...
        score_in_force_task(lin["lineage"], lin["label_set_id"], params, db_url)  # ... and scores
        out["runs"] += recalibrate_lineage_task(lin["lineage"], lin["label_set_id"],
                                                verdict["validation_run_id"], dv, db_url)
    run_ids = [r["run_id"] for r in out["runs"]]
    if run_ids:
        out["metrics"] = evaluate_task(run_ids, db_url, metrics_file)["metrics"]
    for r in out["runs"]:
        print(f"run {r['run_id']}: {r['mode']}, {r['n_recomputed']} recomputed, {r['n_copied']} copied")
    return out


@flow(name="adapt", log_prints=True)
def adapt_flow(lineages: list[str] | None = None, params_path: str = str(PARAMS_FILE),
               db_url: str | None = None, repo: str = str(ROOT), version_artefacts: bool = True
               ) -> dict[str, Any]:
    """Adapt each lineage (default: every versioned one) whose labels have grown enough; promote or
    not; recalibrate a lineage whose champion changed."""
    params = load_params(Path(params_path))
    dv = version_data_task(repo, False, db_url, "adapt", {"lineages": lineages})
    out: dict[str, Any] = {"lineages": [], "runs": []}
    for name in lineages or lineage_names_task(db_url):
        done = adapt_task(name, params, repo if version_artefacts else None, db_url)
        out["lineages"].append(done)
        if done.get("promoted"):
            out["runs"] += recalibrate_champion_task(name, params, dv, db_url)
    return out


@flow(name="label-update", log_prints=True)
def label_update_flow(files: list[str] | None = None, repo: str = str(ROOT), db_url: str | None = None,
                      params_path: str = str(PARAMS_FILE), recalibrate_now: bool = False,
                      emit: bool = True) -> dict[str, Any]:
    """Version and apply label files; the event it emits triggers recalibration (or do it now)."""
    params = load_params(Path(params_path))
    if files is None:
        files = pending_labels_task(repo, db_url)
    checked = check_labels_task(files, repo, db_url) if files else {"good": [], "refused": []}
    files = checked["good"]
    if not files:
        return {"updates": [], "refused": checked["refused"], "recalibration": None}
    placed = place_task(files, repo, "labels")
    dv = version_data_task(repo, False, db_url, "label-update", {"files": files})
    updates = [apply_labels_task(p, repo, bounds_of(params), db_url, emit) for p in placed]
    for u in updates:
        print(f"{u['path']}: {u['status']}, {u['n_appended']} labels appended, new heads {u['new_heads']}")
    changed = sorted({n for u in updates for n in u["new_heads"]})
    recal = None
    if recalibrate_now and changed:
        recal = recalibrate_flow(changed, db_url, repo, params_path, "labels")
    return {"updates": updates, "refused": checked["refused"], "data_version_id": dv, "changed": changed,
            "recalibration": recal}


@flow(name="rescore", log_prints=True)
def rescore_flow(guidelines: str = str(GUIDELINES_FILE), db_url: str | None = None, repo: str = str(ROOT),
                 params_path: str = str(PARAMS_FILE), metrics_file: str | None = None,
                 label_set_names: list[str] | None = None) -> dict[str, Any]:
    """Score every lineage's claims under the (new) guidelines and calibrate them with that prompt."""
    params = load_params(Path(params_path))
    dv = version_data_task(repo, False, db_url, "rescore", {"guidelines": guidelines})
    lineages = lineages_task(db_url, label_set_names, measured_only=True)
    verdicts = {lin["lineage"]: validate_task(lin["label_set_id"], bounds_of(params), dv, db_url)
                for lin in lineages}
    runs = _calibrate_all(lineages, verdicts, params, dv, db_url, guidelines)
    run_ids = [r["run_id"] for r in runs]
    metrics = evaluate_task(run_ids, db_url, metrics_file)["metrics"] if run_ids else {}
    return {"runs": runs, "metrics": metrics, "validations": list(verdicts.values())}


@flow(name="guidelines-update", log_prints=True)
def guidelines_update_flow(guidelines: str = str(GUIDELINES_FILE), repo: str = str(ROOT),
                           db_url: str | None = None, params_path: str = str(PARAMS_FILE),
                           rescore_now: bool = False, emit: bool = True) -> dict[str, Any]:
    """Version an edited guidelines file; its event triggers ``rescore`` (or rescore now)."""
    out = guidelines_task(guidelines, repo, db_url, emit)
    print(f"guidelines {out['version']}: {'new version' if out['new'] else 'already known'}")
    if rescore_now and out["new"] and not out.get("baseline"):
        out["rescore"] = rescore_flow(guidelines, db_url, repo, params_path)
    return out


@flow(name="score-new-claims", log_prints=True)
def score_new_claims_flow(db_url: str | None = None, repo: str = str(ROOT),
                          params_path: str = str(PARAMS_FILE),
                          label_set_names: list[str] | None = None) -> dict[str, Any]:
    """Ingest newly arrived claims, embed and score what is new, bring the calibrations up to date."""
    params = load_params(Path(params_path))
    incoming = sorted(str(p) for p in (Path(repo) / "data" / "incoming").glob("*.csv"))
    dv = version_data_task(repo, bool(incoming), db_url, "score-new-claims", {"incoming": incoming})
    added = ingest_task(incoming, db_url, label_set_names) if incoming else {}
    if not stale_targets_task(db_url, label_set_names):
        print("nothing new: every target is calibrated over all its claims")
        return {"ingested": added, "runs": []}
    lineages = lineages_task(db_url, label_set_names, measured_only=True)
    verdicts = {lin["lineage"]: validate_task(lin["label_set_id"], bounds_of(params), dv, db_url)
                for lin in lineages}
    runs = _calibrate_all(lineages, verdicts, params, dv, db_url, None)
    new_work = [r for r in runs if r["mode"] != "reused"]
    print(f"{sum(len(v) for v in added.values())} claims arrived; {len(new_work)} calibrations updated")
    return {"ingested": added, "runs": runs}


@flow(name="watch-changes", log_prints=True)
def watch_flow(repo: str = str(ROOT), db_url: str | None = None, guidelines: str = str(GUIDELINES_FILE),
               params_path: str = str(PARAMS_FILE)) -> dict[str, Any]:
    """Notice label files dropped in data/labels/ and guideline edits; version them and emit events.
    First close the calibration runs a dead process left running."""
    abandoned = close_abandoned_task(db_url)
    labels_out = label_update_flow(None, repo, db_url, params_path)
    guide_out = guidelines_update_flow(guidelines, repo, db_url, params_path)
    return {"labels": labels_out, "guidelines": guide_out, "abandoned": abandoned}
