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

The flows only wire the tasks of :mod:`checkworthy.flows.tasks` around the decisions of
:mod:`checkworthy.runs.pipeline_steps`; each flow takes one :class:`~checkworthy.runs.flow_types.FlowContext`
(store, project, params file; the defaults where none is given) and returns a typed result
(:mod:`checkworthy.runs.flow_types`). ``label-update`` names the three apiece, as its callers
outside the flows (the command line, the Label Studio backend) give them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from prefect import flow, unmapped
from pydantic import BaseModel, ConfigDict

from checkworthy.config import GUIDELINES_FILE, PARAMS_FILE, REPORTS_DIR, ROOT, labelled_sizes
from checkworthy.flows.task_runners import dask_address, share_api_with_workers, task_runner
from checkworthy.flows.tasks import (
    TaskContext,
    adapt_task,
    apply_labels_task,
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
    say,
    score_chunk_task,
    score_in_force_task,
    score_task,
    stale_targets_task,
    text_chunks_task,
    validate_task,
    version_data_task,
)
from checkworthy.runs.flow_types import (
    AdaptResult,
    Calibrated,
    CheckedFiles,
    FlowContext,
    GuidelinesUpdate,
    LabelUpdateResult,
    LabelVerdict,
    LineageWork,
    NewClaimsResult,
    PipelineResult,
    PreparedDataset,
    RecalibrateResult,
    RescoreResult,
    ScoredKey,
    WatchResult,
)
from checkworthy.runs.main_job import later_of_its_spec
from checkworthy.runs.pipeline_steps import (
    calibration_jobs,
    changed_lineages,
    chunk_size,
    claim_ids,
    distinct_keys,
    in_target_order,
    incoming_files,
    model_names,
    new_claims_line,
    validation_bounds,
)


def _prepare(name: str, params: dict[str, Any], dv: int, ctx: FlowContext, limit: int | None,
             echo: bool) -> PreparedDataset:
    """Prepare one dataset of params and say what its calibration set and test target hold."""
    prepared = prepare_task(name, params["seed"], labelled_sizes(params).get(name), dv, ctx, limit, echo)
    say(prepared.summary(), echo)
    return prepared


def _validate(lineages: list[LineageWork], params: dict[str, Any], dv: int | None,
              ctx: FlowContext) -> dict[str, LabelVerdict]:
    """Each lineage head's verdict, by lineage."""
    return {lin.lineage: validate_task(lin.label_set_id, validation_bounds(params), dv, ctx)
            for lin in lineages}


def _score(ids: list[int], models: list[str], params: dict[str, Any], ctx: FlowContext,
           guidelines: str | None, echo: bool = False) -> list[ScoredKey]:
    """Embed and score the claims with the named ``models:`` entries; return their score keys. In
    this process each entry is scored in the forward passes of an earlier entry of its spec where
    it can be (:func:`later_of_its_spec`): the later ones then find their scores stored."""
    if dask_address(params):
        return fan_out(ids, params, ctx, guidelines, models)
    say(f"embedded {embed_task(ids, ctx)} new texts", echo)
    return [key for model in models
            for key in score_task(model, ids, params, ctx, guidelines, echo,
                                  later_of_its_spec(params, model))]


def _calibrate(lineages: list[LineageWork], verdicts: dict[str, LabelVerdict], keys: list[ScoredKey],
               params: dict[str, Any], dv: int | None, ctx: FlowContext) -> list[Calibrated]:
    """Calibrate every target of every lineage whose labels passed validation, under each score key
    and each k."""
    return [calibrate_task(job.spec, TaskContext(ctx, dv, job.validation_run_id))
            for job in calibration_jobs(lineages, verdicts, keys, params)]


def _calibrate_all(lineages: list[LineageWork], verdicts: dict[str, LabelVerdict], params: dict[str, Any],
                   dv: int | None, ctx: FlowContext, guidelines: str | None) -> list[Calibrated]:
    """Embed and score the lineages' claims with every configured model, then calibrate every target."""
    ids = claim_ids(lineages)
    if not ids:
        return []
    keys = _score(ids, model_names(params), params, ctx, guidelines)
    return _calibrate(lineages, verdicts, keys, params, dv, ctx)


@flow(name="score-and-embed", log_prints=True)
def score_and_embed_flow(claim_ids: list[int], models: list[str], params: dict[str, Any],
                         ctx: FlowContext | None = None, guidelines: str | None = None) -> list[ScoredKey]:
    """Embed the claims' texts and score them with each model, a task per fixed chunk of texts on
    the flow's task runner (``models``: names of ``models:`` entries): a chunk lost with its worker
    runs again, a stored one never does."""
    ctx = ctx or FlowContext()
    chunks = text_chunks_task(claim_ids, chunk_size(params), ctx)
    embedded = embed_chunk_task.map(chunks, unmapped(ctx))
    scored = [score_chunk_task.map(unmapped(model), chunks, unmapped(params), unmapped(ctx),
                                   unmapped(guidelines)) for model in models]
    print(f"embedded {sum(f.result() for f in embedded)} new texts in {len(chunks)} chunks")
    return distinct_keys(k for futures in scored for f in futures for k in f.result())


def fan_out(claim_ids: list[int], params: dict[str, Any], ctx: FlowContext | None = None,
            guidelines: str | None = None, models: list[str] | None = None) -> list[ScoredKey]:
    """:func:`score_and_embed_flow` for the named ``models:`` entries (default: every configured
    one), on the task runner params ask for."""
    if dask_address(params):
        share_api_with_workers()
    run = score_and_embed_flow.with_options(task_runner=task_runner(params))
    return run(claim_ids, model_names(params) if models is None else models, params, ctx, guidelines)


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
def pipeline_flow(ctx: FlowContext | None = None, commit_data: bool = True, limit: int | None = None,
                  echo: bool = False, report: ReportOptions | None = None) -> PipelineResult:
    """The main job: data version -> datasets -> validation -> embed -> score and calibrate the first
    ``models:`` entry (the paper's pass), its table shown -> score and calibrate the others ->
    compare -> evaluate; the last task writes the report (:class:`ReportOptions`) with the flow
    run's artifacts.

    ``commit_data`` snapshots data/ first (``dvc add`` + ``dvc push``; a no-op when unchanged), so
    the recorded hash is the data actually used. ``echo`` also prints progress to stdout
    (``checkworthy run``).
    """
    t0 = time.monotonic()
    ctx, report = ctx or FlowContext(), report or ReportOptions()
    params = ctx.params()
    dv = version_data_task(ctx, commit_data, "checkworthy-pipeline", {"params": params, "limit": limit})
    prepared = [_prepare(name, params, dv, ctx, limit, echo) for name in params["datasets"]]
    verdicts = {p.lineage: validate_task(p.label_set_id, validation_bounds(params, limit), dv, ctx)
                for p in prepared}
    lineages = [p.work() for p in prepared]
    # the first entry (the paper's pass) is scored and calibrated first and its table shown, before
    # the ablation and the other models are
    ids, (first, *others) = claim_ids(lineages), model_names(params)
    runs = _calibrate(lineages, verdicts, _score(ids, [first], params, ctx, None, echo), params, dv, ctx)
    first_table_task([r.run_id for r in runs], ctx, report.table_path(), echo)
    runs += _calibrate(lineages, verdicts, _score(ids, others, params, ctx, None, echo), params, dv, ctx)
    runs = in_target_order(runs, [p.target for p in prepared])
    run_ids = [r.run_id for r in runs]
    if params.get("compare"):
        say(f"compared the methods on {len(compare_task(run_ids, ctx))} runs", echo)
    ev = evaluate_task(run_ids, ctx, report.metrics_file, report.report_name(), report.folder,
                       params.get("report"))
    return PipelineResult(runs, run_ids, dv, verdicts, ev.report, ev.metrics, time.monotonic() - t0)


@flow(name="recalibrate", log_prints=True)
def recalibrate_flow(label_set_names: list[str] | None = None, ctx: FlowContext | None = None,
                     reason: str = "labels", metrics_file: str | None = None) -> RecalibrateResult:
    """Validate each lineage head and recalibrate its calibrations in force (incrementally)."""
    ctx = ctx or FlowContext()
    params = ctx.params()
    dv = version_data_task(ctx, False, "recalibrate", {"label_set_names": label_set_names, "reason": reason})
    out = RecalibrateResult()
    for lin in lineages_task(ctx, label_set_names):
        verdict = out.validations[lin.lineage] = validate_task(lin.label_set_id, validation_bounds(params),
                                                               dv, ctx)
        if not verdict.success:
            out.skipped.append(lin.lineage)
            continue
        embed_task(lin.calibration_ids, ctx, lin.lineage)  # newly labelled claims need a vector ...
        score_in_force_task(lin.lineage, lin.label_set_id, params, ctx)  # ... and scores
        out.runs += recalibrate_lineage_task(lin.lineage, lin.label_set_id, verdict.validation_run_id, dv,
                                             ctx)
    if out.runs:
        out.metrics = evaluate_task([r.run_id for r in out.runs], ctx, metrics_file).metrics
    for r in out.runs:
        print(r.line())
    return out


@flow(name="adapt", log_prints=True)
def adapt_flow(lineages: list[str] | None = None, ctx: FlowContext | None = None,
               version_artefacts: bool = True) -> AdaptResult:
    """Adapt each lineage (default: every versioned one) whose labels have grown enough; promote or
    not; recalibrate a lineage whose champion changed."""
    ctx = ctx or FlowContext()
    params = ctx.params()
    dv = version_data_task(ctx, False, "adapt", {"lineages": lineages})
    out = AdaptResult()
    for name in lineages or lineage_names_task(ctx):
        done = adapt_task(name, params, ctx, version_artefacts)
        out.lineages.append(done)
        if done.promoted:
            out.runs += recalibrate_champion_task(name, params, dv, ctx)
    return out


@flow(name="label-update", log_prints=True)
def label_update_flow(files: list[str] | None = None, repo: str = str(ROOT), db_url: str | None = None,
                      params_path: str = str(PARAMS_FILE), recalibrate_now: bool = False,
                      emit: bool = True) -> LabelUpdateResult:
    """Version and apply label files; the event it emits triggers recalibration (or do it now). Its
    callers outside the flows (the command line, the Label Studio backend) name the store, the
    project and the params file apiece."""
    ctx = FlowContext(db_url=db_url, repo=repo, params_path=params_path)
    params = ctx.params()
    if files is None:
        files = pending_labels_task(ctx)
    checked = check_labels_task(files, ctx) if files else CheckedFiles([], [])
    if not checked.good:
        return LabelUpdateResult([], checked.refused)
    placed = place_task(checked.good, ctx.repo, "labels")
    dv = version_data_task(ctx, False, "label-update", {"files": checked.good})
    updates = [apply_labels_task(p, ctx, validation_bounds(params), emit) for p in placed]
    for u in updates:
        print(u.line())
    changed = changed_lineages(updates)
    recal = recalibrate_flow(changed, ctx, "labels") if recalibrate_now and changed else None
    return LabelUpdateResult(updates, checked.refused, dv, changed, recal)


@flow(name="rescore", log_prints=True)
def rescore_flow(guidelines: str = str(GUIDELINES_FILE), ctx: FlowContext | None = None,
                 metrics_file: str | None = None, label_set_names: list[str] | None = None) -> RescoreResult:
    """Score every lineage's claims under the (new) guidelines and calibrate them with that prompt."""
    ctx = ctx or FlowContext()
    params = ctx.params()
    dv = version_data_task(ctx, False, "rescore", {"guidelines": guidelines})
    lineages = lineages_task(ctx, label_set_names, measured_only=True)
    verdicts = _validate(lineages, params, dv, ctx)
    runs = _calibrate_all(lineages, verdicts, params, dv, ctx, guidelines)
    run_ids = [r.run_id for r in runs]
    metrics = evaluate_task(run_ids, ctx, metrics_file).metrics if run_ids else {}
    return RescoreResult(runs, metrics, verdicts)


@flow(name="guidelines-update", log_prints=True)
def guidelines_update_flow(guidelines: str = str(GUIDELINES_FILE), ctx: FlowContext | None = None,
                           rescore_now: bool = False, emit: bool = True) -> GuidelinesUpdate:
    """Version an edited guidelines file; its event triggers ``rescore`` (or rescore now)."""
    ctx = ctx or FlowContext()
    change = guidelines_task(guidelines, ctx, emit)
    print(change.line())
    due = rescore_now and change.new and not change.baseline
    return GuidelinesUpdate(change, rescore_flow(guidelines, ctx) if due else None)


@flow(name="score-new-claims", log_prints=True)
def score_new_claims_flow(ctx: FlowContext | None = None,
                          label_set_names: list[str] | None = None) -> NewClaimsResult:
    """Ingest newly arrived claims, embed and score what is new, bring the calibrations up to date."""
    ctx = ctx or FlowContext()
    params = ctx.params()
    incoming = incoming_files(ctx.repo)
    dv = version_data_task(ctx, bool(incoming), "score-new-claims", {"incoming": incoming})
    added = ingest_task(incoming, ctx, label_set_names) if incoming else {}
    if not stale_targets_task(ctx, label_set_names):
        print("nothing new: every target is calibrated over all its claims")
        return NewClaimsResult(added, [])
    lineages = lineages_task(ctx, label_set_names, measured_only=True)
    runs = _calibrate_all(lineages, _validate(lineages, params, dv, ctx), params, dv, ctx, None)
    print(new_claims_line(added, runs))
    return NewClaimsResult(added, runs)


@flow(name="watch-changes", log_prints=True)
def watch_flow(ctx: FlowContext | None = None, guidelines: str = str(GUIDELINES_FILE)) -> WatchResult:
    """Notice label files dropped in data/labels/ and guideline edits; version them and emit events.
    First close the calibration runs a dead process left running."""
    ctx = ctx or FlowContext()
    abandoned = close_abandoned_task(ctx)
    labels_out = label_update_flow(None, **ctx.model_dump())
    guide_out = guidelines_update_flow(guidelines, ctx)
    return WatchResult(labels_out, guide_out, abandoned)
