"""The tasks of checkworthy's flows: each wraps one step of the package, is idempotent (the store
reuses what it holds), retries transient faults (:mod:`checkworthy.flows.retries`) and writes
through an engine stamped with its flow run's id, so each row records the flow run that wrote it.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, is_dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from sqlalchemy import Engine

from checkworthy.config import REPORTS_DIR, ROOT
from checkworthy.data import validation, versioning
from checkworthy.data.label_files import in_label_folder, set_aside
from checkworthy.data.outputs import atomic_text
from checkworthy.errors import DataError
from checkworthy.flows import events
from checkworthy.flows.retries import DB, DVC, MODEL
from checkworthy.report.artifact import publish_drift
from checkworthy.report.console import console_table, table_rows
from checkworthy.report.drift import drift_line
from checkworthy.report.files import save_report
from checkworthy.runs import adapt, recalibration
from checkworthy.runs import label_updates as labels
from checkworthy.runs.analyses import AnalysisOptions, ensure_analyses
from checkworthy.runs.comparisons import ensure_comparison
from checkworthy.runs.flow_types import (
    Adapted,
    AppliedLabels,
    Calibrated,
    CheckedFiles,
    Evaluation,
    FlowContext,
    GuidelinesVersion,
    LabelVerdict,
    LineageWork,
    PreparedDataset,
    Recalibrated,
    RefusedFile,
    ScoredKey,
)
from checkworthy.runs.label_gate import validate_label_set
from checkworthy.runs.main_job import (
    embed_claims,
    embed_texts,
    prepare_dataset,
    score_claims,
    sharing_passes,
    text_chunks,
    worker_scorer,
)
from checkworthy.runs.scoring import score_missing
from checkworthy.runs.served_run import matching_scorer
from checkworthy.scorers.registry import configured_scorer, model_options, prompt_info
from checkworthy.store import lineages as lineage_store
from checkworthy.store import provenance
from checkworthy.store import rows as store
from checkworthy.store.calibration_runs import close_abandoned_runs, load_run, targets_needing_work
from checkworthy.store.data_versions import record_data_version
from checkworthy.store.engine import get_engine
from checkworthy.store.metrics import metrics_summary
from checkworthy.store.run_spec import RunContext, RunRecord, RunSpec


def engine_for(ctx: FlowContext) -> Engine:
    """The flow's store, stamping rows with this flow run's id."""
    return provenance.stamped(get_engine(ctx.db_url), events.current_flow_run_id())


def run_context(dv: int | None) -> RunContext:
    """What a calibration run records about where it ran: flow run, code revision, data version."""
    return RunContext(flow_run_id=events.current_flow_run_id(), code_rev=versioning.git_rev(),
                      data_version_id=dv)


def say(message: str, stdout: bool = False) -> None:
    """Log a progress line; with ``stdout`` (the CLI) also print it where the user looks."""
    get_run_logger().info(message)
    if stdout:
        sys.stdout.write(message + "\n")
        sys.stdout.flush()


@task(name="version-data", **DVC)
def version_data_task(ctx: FlowContext, commit: bool, flow_name: str,
                      parameters: dict[str, Any] | None = None) -> int:
    """Record the data version (DVC hash + git revision) this flow run uses; snapshot it first if asked."""
    path = Path(ctx.repo)
    if path.resolve() == ROOT.resolve():
        versioning.ensure_data()
    if commit:
        versioning.version_data(path, push=True, remote=os.environ.get("CHECKWORTHY_DVC_REMOTE"))
    engine = engine_for(ctx)
    with engine.begin() as conn:
        dv = record_data_version(conn, versioning.data_version(path))
        fr = events.current_flow_run_id()
        if fr:
            provenance.record_flow_run(conn, fr, flow_name, parameters, code_rev=versioning.git_rev())
            provenance.attach_data_version(conn, fr, dv, "produced" if commit else "used")
    return dv


@task(name="prepare-dataset", **DB)
def prepare_task(name: str, seed: int, n_per_class: int | None, dv: int, ctx: FlowContext,
                 limit: int | None = None, echo: bool = False) -> PreparedDataset:
    """Load, split, store a dataset; register its test split as a target; return its lineage head."""
    engine = engine_for(ctx)
    ds = prepare_dataset(engine, name, seed, n_per_class, dv, limit)
    with engine.begin() as conn:
        lineage = lineage_store.label_set_name(conn, ds.label_set_id)
        target = f"{name}:test"
        lineage_store.register_target(conn, target, lineage, ds.test_ids)
        head = lineage_store.ensure_head(conn, ds.label_set_id, dv)
        cal = store.label_set_claims(conn, head)
    for report in ds.reports:
        say(report.summary(), echo)
    return PreparedDataset(name, lineage, head, ds.label_set_id, target, cal, ds.test_ids)


@task(name="validate-labels", **DB)
def validate_task(label_set_id: int, bounds: validation.Bounds, dv: int | None,
                  ctx: FlowContext) -> LabelVerdict:
    """Run the label-validation suite on a label set; the verdict (and failing rows) is stored."""
    verdict = validate_label_set(engine_for(ctx), label_set_id, bounds, dv)
    if not verdict.success:
        get_run_logger().warning(
            f"label set {label_set_id} failed validation ({', '.join(verdict.failures)}): its calibration "
            "is skipped, the previous one stays in force")
    return LabelVerdict(label_set_id, verdict.validation_run_id, verdict.success, verdict.failures)


@task(name="embed", **MODEL)
def embed_task(claim_ids: list[int], ctx: FlowContext, lineage: str | None = None) -> int:
    """Embed every claim text that has no vector yet (in ``lineage``'s embedding space, if named)."""
    return embed_claims(engine_for(ctx), claim_ids, lineage)


@task(name="score", task_run_name="score {model}", **MODEL)
def score_task(model: str, claim_ids: list[int], params: dict[str, Any], ctx: FlowContext,
               guidelines: str | None = None, echo: bool = False,
               alongside: list[str] | None = None) -> list[ScoredKey]:
    """Score the claims lacking a score under this model (the name of a ``models:`` entry of
    params) and prompt; return the score keys. The entries ``alongside`` that differ from it only
    in sampling are scored in the same forward passes (their keys are not returned: their own
    score task finds their scores stored)."""
    extra = {"guidelines": guidelines} if guidelines else {}
    scorer, prompt = configured_scorer(params, model, **extra)
    others = sharing_passes(scorer, [configured_scorer(params, m, **extra)[0] for m in alongside or ()])
    keys = score_claims(engine_for(ctx), [scorer, *others], claim_ids, prompt,
                        chunk_size=model_options(params, model).get("chunk_size", 96),
                        echo=lambda m: say(m, echo),
                        flow_run_id=events.current_flow_run_id())
    return [ScoredKey.of(scorer.spec, k) for k in keys.values()]


@task(name="text-chunks", **DB)
def text_chunks_task(claim_ids: list[int], chunk_size: int, ctx: FlowContext) -> list[list[str]]:
    """The claims' distinct texts (by hash) in fixed chunks: the same chunks whatever the number of
    workers, so every text is scored in the same batch and gets the same score."""
    with engine_for(ctx).connect() as conn:
        return text_chunks(conn, claim_ids, chunk_size)


@task(name="embed-chunk", **MODEL)
def embed_chunk_task(hashes: list[str], ctx: FlowContext) -> int:
    """Embed a chunk's texts that have no vector yet (one transaction: a lost chunk stores none)."""
    return embed_texts(engine_for(ctx), hashes)


@task(name="score-chunk", **MODEL)
def score_chunk_task(model: str, hashes: list[str], params: dict[str, Any], ctx: FlowContext,
                     guidelines: str | None = None) -> list[ScoredKey]:
    """Score a chunk's texts that have no score under this model (a ``models:`` entry's name; one
    transaction: a chunk lost with its worker stores nothing and is scored again; a stored one
    is never scored again)."""
    scorer, prompt = worker_scorer(params, model, guidelines)
    keys = score_missing(engine_for(ctx), scorer, hashes, prompt, chunk_size=max(len(hashes), 1),
                         flow_run_id=events.current_flow_run_id())[2]
    return [ScoredKey.of(scorer.spec, k) for k in keys.values()]


def announce_drift(ctx: FlowContext, run_ids: list[int]) -> None:
    """For each run whose claims drifted from its labelled set: log its drift line, emit its drift
    event and leave the line as an artifact of the flow run."""
    with engine_for(ctx).connect() as conn:
        runs = [load_run(conn, r) for r in run_ids]
    for r in runs:
        drift = RunRecord.of(r).drift
        line = drift_line(drift, f"run {r['id']} ({r['target']})")
        if line and drift is not None:
            get_run_logger().warning(line)
            events.emit_drift(r["id"], r["target"], drift, line)
            publish_drift(r["id"], line)


@dataclass(frozen=True)
class TaskContext:
    """Where a calibration task runs: its flow's context, the data version of its flow run and the
    validation run that cleared its label set."""

    flow: FlowContext
    data_version_id: int | None
    validation_run_id: int | None


@task(name="calibrate", **DB)
def calibrate_task(spec: RunSpec, ctx: TaskContext) -> Calibrated:
    """One calibration, brought up to date: reused, incremental from the previous run, or full."""
    engine = engine_for(ctx.flow)
    out = recalibration.recalibrate(engine, spec, run_context(ctx.data_version_id),
                                    validation_run_id=ctx.validation_run_id)
    if out.mode != "reused":
        announce_drift(ctx.flow, [out.run_id])
    with engine.connect() as conn:
        model = store.model_spec(conn, spec.key.model_id)
    return Calibrated(out.run_id, out.mode, spec.target, spec.methods.k, model, spec.key.score_kind,
                      out.n_recomputed, out.n_copied)


@task(name="recalibrate-lineage", **DB)
def recalibrate_lineage_task(name: str, label_set_id: int, validation_run_id: int, dv: int | None,
                             ctx: FlowContext) -> list[Recalibrated]:
    """Recalibrate every calibration in force for a lineage on its new head, incrementally."""
    outs = recalibration.recalibrate_lineage(engine_for(ctx), name, label_set_id, run_context(dv),
                                           validation_run_id=validation_run_id)
    announce_drift(ctx, [o.run_id for o in outs if o.mode != "reused"])
    return [Recalibrated(o.run_id, o.mode, o.parent_run_id, o.n_recomputed, o.n_copied, o.changes)
            for o in outs]


@task(name="score-labelled-claims", **MODEL)
def score_in_force_task(lineage: str, label_set_id: int, params: dict[str, Any], ctx: FlowContext) -> int:
    """Score the label set's claims that some score key in force lacks, each with the scorer
    params.yaml configures to give that key's scores; say which claims none does."""
    n, left = recalibration.score_unscored_in_force(
        engine_for(ctx), lineage, label_set_id, partial(matching_scorer, params))
    for u in left:
        get_run_logger().warning(f"{lineage}: {len(u.claim_ids)} newly labelled claims have no {u.model} "
                                 f"score and act as no one's neighbours until scored: {u.reason}")
    return n


@task(name="first-table", **DB)
def first_table_task(run_ids: list[int], ctx: FlowContext, path: str | None = None,
                     echo: bool = False) -> str:
    """The table of the first runs (the first ``models:`` entry: the paper's pass) beside the
    paper's figures, shown as soon as they are calibrated, while the other passes still run, and
    written to ``path``; the whole table and the report follow at the end."""
    with engine_for(ctx).connect() as conn:
        table = console_table(table_rows(conn, run_ids))
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with atomic_text(Path(path)) as fh:
            fh.write(table + "\n")
    say(f"first table (the other models follow{f'; written to {path}' if path else ''}):\n{table}\n", echo)
    return table


@task(name="compare-methods", **DB)
def compare_task(run_ids: list[int], ctx: FlowContext) -> list[int]:
    """Every interval, correction and calibrator on each run's inputs (stored once per run), for the
    report's "Methods compared" section. A run too small to cross-validate is skipped, and said."""
    engine, done = engine_for(ctx), []
    for rid in run_ids:
        try:
            with engine.begin() as conn:
                done.append(ensure_comparison(conn, rid, flow_run_id=events.current_flow_run_id()))
        except ValueError as exc:
            get_run_logger().warning(f"run {rid}: no method comparison ({exc})")
    return done


@task(name="evaluate", **DB)
def evaluate_task(run_ids: list[int], ctx: FlowContext, metrics_file: str | None = None,
                  report_name: str | None = None, reports_dir: str | None = None,
                  report_options: dict[str, Any] | None = None) -> Evaluation:
    """Collect each run's metrics (for DVC); with ``report_name``, render, write and store the report
    and leave its link, headline and headline rows as artifacts of this flow run."""
    engine = engine_for(ctx)
    with engine.begin() as conn:
        summary = metrics_summary(conn, run_ids)
        path = None
        if report_name and run_ids:
            flow_run = events.current_flow_run_id()
            options = AnalysisOptions.from_params(report_options)
            analysis_ids = ensure_analyses(conn, run_ids, options, flow_run)
            path = str(save_report(conn, report_name, run_ids, Path(reports_dir or REPORTS_DIR), analysis_ids,
                                   flow_run))
    if metrics_file:
        write_json(Path(metrics_file), summary)
    return Evaluation(summary, path)


def _jsonable(value: Any) -> Any:
    """A dataclass as its fields, anything else JSON cannot hold as its text."""
    return asdict(value) if is_dataclass(value) and not isinstance(value, type) else str(value)


def write_json(path: Path, value: Any) -> None:
    """Write ``value`` as JSON (sorted keys, for diffs) atomically: DVC never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, sort_keys=True, default=_jsonable) + "\n", encoding="utf-8")
    tmp.replace(path)


@task(name="apply-label-file", **DVC)
def apply_labels_task(path: str, ctx: FlowContext, bounds: validation.Bounds,
                      emit: bool = True) -> AppliedLabels:
    """Validate and apply one label file (DVC-versioned already); record and emit the change. A
    file of data/labels/ the suite rejects is moved to data/labels/rejected/ (``moved_to``)."""
    engine, repo = engine_for(ctx), Path(ctx.repo)
    with engine.begin() as conn:
        dv = record_data_version(conn, versioning.data_version(repo))
    out = labels.apply_label_file(engine, Path(path), bounds, dv)
    moved = None
    if out.status == "rejected" and in_label_folder(Path(path), repo):  # like a file refused earlier
        moved = str(set_aside(Path(path), repo))
    result = AppliedLabels(**asdict(out) | {"data_version_id": dv}, path=path, moved_to=moved)
    if out.status == "applied" and out.new_heads:
        with engine.begin() as conn:
            payload = {"label_set_names": sorted(out.new_heads), "update_id": out.update_id,
                       "new_heads": out.new_heads, "n_rows": out.n_rows, "n_appended": out.n_appended,
                       "data_version_id": dv}
            change = provenance.record_change(conn, "labels", str(out.update_id), payload, dv)
        result = replace(result, event_id=events.emit(change) if emit else None)
    elif out.status == "rejected":
        get_run_logger().warning(f"{path}: rejected by validation (runs {out.validation_run_ids}); "
                                 "nothing was applied, the calibration in force stays"
                                 + (f"; moved to {moved}" if moved else ""))
    return result


@task(name="pending-label-files", **DB)
def pending_labels_task(ctx: FlowContext) -> list[str]:
    """Label files dropped in data/labels/ that no label update has considered yet."""
    with engine_for(ctx).connect() as conn:
        return [str(p) for p in labels.pending_label_files(conn, Path(ctx.repo))]


@task(name="check-label-files", **DB)
def check_labels_task(files: list[str], ctx: FlowContext) -> CheckedFiles:
    """Check each label file against the store before it is versioned. A refused file found in
    data/labels/ is recorded with its reason and moved to data/labels/rejected/, so it never
    blocks a later file (as is one the validation suite rejects, :func:`apply_labels_task`); a
    file given from elsewhere is left as it is."""
    engine, repo = engine_for(ctx), Path(ctx.repo)
    good: list[str] = []
    refused: list[RefusedFile] = []
    for f in files:
        try:
            with engine.connect() as conn:
                labels.check_label_file(conn, Path(f))
            good.append(f)
        except DataError as exc:
            moved = None
            if in_label_folder(Path(f), repo):
                moved = str(labels.refuse_label_file(engine, Path(f), repo, str(exc)))
            get_run_logger().warning(f"refused {exc}" + (f"; moved to {moved}" if moved else ""))
            refused.append(RefusedFile(f, str(exc), moved))
    return CheckedFiles(good, refused)


@task(name="place-files", **DVC)
def place_task(files: list[str], repo: str, sub: str) -> list[str]:
    """Copy files under data/<sub>/ and snapshot data/ as a new DVC version (push to the remote)."""
    placed = [str(versioning.place_in_data(Path(f), Path(repo), sub)) for f in files]
    versioning.version_data(Path(repo), push=True, remote=os.environ.get("CHECKWORTHY_DVC_REMOTE"))
    return placed


@task(name="guidelines-version", **DVC)
def guidelines_task(guidelines: str, ctx: FlowContext, emit: bool = True) -> GuidelinesVersion:
    """Version an edited guidelines file (DVC snapshot + prompt version in Postgres); emit the change."""
    version, body, template = prompt_info(guidelines)
    engine, repo = engine_for(ctx), Path(ctx.repo)
    with engine.begin() as conn:
        store.ensure_prompt_version(conn, version, body, template)
        seen, known = provenance.change_history(conn, "guidelines", version)
    if known:
        return GuidelinesVersion(version, False)
    snapshot = repo / "data" / "guidelines" / f"checkworthiness-{version}.yaml"
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    if not snapshot.exists():
        snapshot.write_text(body, encoding="utf-8")
    versioning.version_data(repo, push=True, remote=os.environ.get("CHECKWORTHY_DVC_REMOTE"))
    with engine.begin() as conn:
        dv = record_data_version(conn, versioning.data_version(repo))
        change = provenance.record_change(conn, "guidelines", version,
                                      {"version": version, "path": str(Path(guidelines).resolve()),
                                       "snapshot": str(snapshot), "baseline": seen == 0}, dv)
    # the first version ever seen is the baseline the main job scores under: nothing to redo
    event_id = events.emit(change) if emit and seen and change.new else None
    return GuidelinesVersion(version, change.new, seen == 0, event_id, dv)


@task(name="ingest-claims", **DB)
def ingest_task(files: list[str], ctx: FlowContext,
                lineages: list[str] | None = None) -> dict[str, list[int]]:
    """Store newly arrived claims (``id,dataset,text``) as targets of their dataset's lineages."""
    engine = engine_for(ctx)
    out: dict[str, list[int]] = {}
    for f in files:
        for target, ids in labels.ingest_claims(engine, Path(f), lineages).items():
            out.setdefault(target, []).extend(ids)
    return out


@task(name="close-abandoned-runs", **DB)
def close_abandoned_task(ctx: FlowContext) -> list[int]:
    """Mark 'abandoned' the calibration runs a dead process left running (their key's lock is free),
    so that none stays 'running' for ever when no calibration starts; return their ids."""
    with engine_for(ctx).connect() as conn:
        closed = close_abandoned_runs(conn, "the watch-changes flow")
    if closed:
        get_run_logger().warning(f"runs {closed} lost their process before finishing: marked abandoned")
    return closed


@task(name="stale-targets", **DB)
def stale_targets_task(ctx: FlowContext, lineages: list[str] | None = None) -> list[str]:
    """The targets whose newest calibration does not cover all their claims yet."""
    with engine_for(ctx).connect() as conn:
        return targets_needing_work(conn, lineages)


@task(name="lineages", **DB)
def lineages_task(ctx: FlowContext, names: list[str] | None = None,
                  measured_only: bool = False) -> list[LineageWork]:
    """Each lineage's head, its claims and the targets it calibrates; ``measured_only``: only the
    lineages with a held-out target (the main job's, which the grid of ``models:`` and ``k``
    calibrates; a team's lineage keeps the calibrations it chose)."""
    with engine_for(ctx).connect() as conn:
        heads = lineage_store.heads(conn)
        measured = lineage_store.measured_lineages(conn) if measured_only else set(heads)
        return [LineageWork(n, h, store.label_set_claims(conn, h), lineage_store.target_claim_ids(conn, n))
                for n, h in sorted(heads.items()) if (names is None or n in names) and n in measured]


@task(name="adapt-lineage")
def adapt_task(lineage: str, params: dict[str, Any], ctx: FlowContext, version_artefacts: bool) -> Adapted:
    """Train a lineage's model again if its labels have grown enough, compare it with the champion
    and promote it or not (:mod:`checkworthy.runs.adapt`), versioning what it made with DVC if
    asked; no retries: a failed training is rerun by the next trigger."""
    s = adapt.AdaptSettings.from_params(params)
    eng = engine_for(ctx)
    lab, why = adapt.adapt_due(eng, lineage, s)
    if lab is None:
        say(f"{lineage}: not adapted ({why})")
        return Adapted(lineage, False, why)
    out = adapt.adapt(eng, lab, params, s, int(params.get("seed", 0)), echo=say, dvc=adapt.DvcVersioning(
        Path(ctx.repo), f"checkworthy adapt --lineage {lineage} (adapt flow)") if version_artefacts else None)
    say(f"{lineage}: version {out.version_id} {out.spec}: {out.reason}")
    return Adapted(lineage, True, why, out.version_id, out.spec, out.promoted, out.figures)


@task(name="recalibrate-with-champion", **DB)
def recalibrate_champion_task(lineage: str, params: dict[str, Any], dv: int | None,
                              ctx: FlowContext) -> list[int]:
    """Calibrate the lineage's targets again with its champion's scores."""
    return adapt.recalibrate_with_champion(engine_for(ctx), lineage, params, run_context(dv))


@task(name="lineage-names", **DB)
def lineage_names_task(ctx: FlowContext) -> list[str]:
    """Every versioned lineage."""
    with engine_for(ctx).connect() as conn:
        return sorted(lineage_store.heads(conn))
