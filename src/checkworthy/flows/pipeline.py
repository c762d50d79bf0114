"""Prefect flows of checkworthy. Tasks wrap ``checkworthy`` functions; flows only wire them.

Flows (each is also a deployment, see ``src/checkworthy/flows/deploy.py`` and ``prefect.yaml``):

- ``checkworthy-pipeline``  the main job (``checkworthy run``): version the data (DVC), prepare
  the datasets, validate every calibration label set (Great Expectations), embed, score with
  each configured model, calibrate (incrementally where a previous run exists), evaluate.
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
- ``watch-changes``         scheduled: notices label files and guideline edits made without the
  CLI and runs the two update flows.

Every task is idempotent (the store reuses what it holds), retries transient faults (database
connection, model runtime, DVC lock) and writes through an engine stamped with the Prefect
flow-run id, so each row it inserts records the flow run that wrote it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from checkworthy.config import GUIDELINES_FILE, PARAMS_FILE, REPORTS_DIR, ROOT, load_params, quiet_offline_env

quiet_offline_env()

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
from sqlalchemy import Engine, text  # noqa: E402
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError  # noqa: E402
from sqlalchemy.exc import TimeoutError as PoolTimeout  # noqa: E402

from checkworthy.data import validation
from checkworthy.errors import DataError  # noqa: E402
from checkworthy.runs import label_updates as labels
from checkworthy.runs import recalibration
from checkworthy.runs.calibration_run import RunContext, RunSpec  # noqa: E402
from checkworthy.store import provenance as events  # noqa: E402
from checkworthy.store import rows as store  # noqa: E402

ScorerFactory = Callable[..., tuple[Any, tuple[str, str, str]]]
#: extra model kinds (``kind:name`` specs) on top of checkworthy.scorers.registry
SCORER_FACTORIES: dict[str, ScorerFactory] = {}

# --------------------------------------------------------------------------- retries


def _exception(state: Any) -> BaseException | None:
    try:
        value = state.result(raise_on_failure=False)
    except BaseException as exc:  # noqa: BLE001 - the state may re-raise its own exception
        return exc
    return value if isinstance(value, BaseException) else None


def _db_transient(exc: BaseException | None) -> bool:
    if isinstance(exc, OperationalError | InterfaceError | PoolTimeout | ConnectionError | TimeoutError):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def retry_db(task: Any, task_run: Any, state: Any) -> bool:
    """Retry on a lost or refused database connection, never on bad data or a bug."""
    return _db_transient(_exception(state))


def retry_model(task: Any, task_run: Any, state: Any) -> bool:
    """Retry database faults and model-runtime faults (a crashed runtime, a timeout, OOM)."""
    exc = _exception(state)
    if isinstance(exc, DataError | ValueError | KeyError | TypeError):
        return False
    return _db_transient(exc) or isinstance(exc, RuntimeError | OSError | MemoryError)


def retry_dvc(task: Any, task_run: Any, state: Any) -> bool:
    """Retry database faults and DVC failures (another process holding the repo lock)."""
    exc = _exception(state)
    return _db_transient(exc) or isinstance(exc, subprocess.CalledProcessError)


DB = {"retries": 3, "retry_delay_seconds": [2, 10, 30], "retry_condition_fn": retry_db,
      "cache_policy": NO_CACHE}
MODEL = DB | {"retry_condition_fn": retry_model}
DVC = DB | {"retry_condition_fn": retry_dvc}

# --------------------------------------------------------------------------- helpers


def engine_for(db_url: str | None) -> Engine:
    """The store (``DATABASE_URL`` or embedded Postgres), stamping rows with this flow run's id."""
    from checkworthy.store.engine import get_engine

    return events.stamped(get_engine(db_url), events.current_flow_run_id())


def _ctx(dv: int | None, extra: dict[str, Any] | None = None) -> RunContext:
    from checkworthy.data.versioning import git_rev

    return RunContext(flow_run_id=events.current_flow_run_id(), code_rev=git_rev(), data_version_id=dv,
                      extra=extra or {})


def make_scorer(model: dict[str, Any], scoring: dict[str, Any] | None,
                guidelines: str | None = None) -> tuple[Any, tuple[str, str, str]]:
    """A configured model (``models:`` entry of params.yaml) as (scorer, prompt info)."""
    from checkworthy.scorers.registry import make_scorer as registry_scorer

    options = {**(scoring or {}), **{k: v for k, v in model.items() if k != "spec"}}
    if guidelines:
        options["guidelines"] = guidelines
    kind = model["spec"].partition(":")[0]
    factory = SCORER_FACTORIES.get(kind, registry_scorer)
    return factory(model["spec"], **options)


def say(message: str, stdout: bool = False) -> None:
    """Log a progress line; with ``stdout`` (the CLI) also print it where the user looks."""
    get_run_logger().info(message)
    if stdout:
        sys.stdout.write(message + "\n")
        sys.stdout.flush()


def _key_dict(key: store.ScoreKey) -> dict[str, Any]:
    return {"model_id": key.model_id, "prompt_version": key.prompt_version, "params_hash": key.params_hash,
            "score_kind": key.score_kind}


# --------------------------------------------------------------------------- tasks


@task(name="version-data", **DVC)
def version_data_task(repo: str, commit: bool, db_url: str | None, flow_name: str,
                      parameters: dict[str, Any] | None = None) -> int:
    """Record the data version (DVC hash + git revision) this flow run uses; snapshot it first if asked."""
    from checkworthy.data.versioning import ensure_data, git_rev

    path = Path(repo)
    if path.resolve() == ROOT.resolve():
        ensure_data()
    if commit:
        labels.version_data(path, push=True, remote=os.environ.get("CHECKWORTHY_DVC_REMOTE"))
    engine = engine_for(db_url)
    with engine.begin() as conn:
        dv = labels.record_data_version(conn, path)
        fr = events.current_flow_run_id()
        if fr:
            events.record_flow_run(conn, fr, flow_name, parameters, code_rev=git_rev())
            events.attach_data_version(conn, fr, dv, "produced" if commit else "used")
    return dv


@task(name="prepare-dataset", **DB)
def prepare_task(name: str, seed: int, n_per_class: int | None, dv: int, db_url: str | None,
                 limit: int | None = None, echo: bool = False) -> dict[str, Any]:
    """Load, split, store a dataset; register its test split as a target; return its lineage head."""
    from checkworthy.runs.main_job import prepare_dataset

    engine = engine_for(db_url)
    ds = prepare_dataset(engine, name, seed, n_per_class, dv, limit, keep_corrections=True)
    with engine.begin() as conn:
        lineage = conn.execute(text("SELECT name FROM label_sets WHERE id = :i"),
                               {"i": ds.label_set_id}).scalar_one()
        target = f"{name}:test"  # the name run_pipeline gives it, so both paths share runs
        labels.register_target(conn, target, lineage, ds.test_ids)
        head = labels.ensure_head(conn, ds.label_set_id, dv)
        cal = store.label_set_claims(conn, head)
    for report in ds.reports:
        say(report.summary(), echo)
    return {"name": name, "lineage": lineage, "label_set_id": head, "prepared_label_set_id": ds.label_set_id,
            "target": target, "calibration_ids": cal, "test_ids": ds.test_ids}


@task(name="validate-labels", **DB)
def validate_task(label_set_id: int, bounds: dict[str, Any], dv: int | None, db_url: str | None) -> dict:
    """Run the label-validation suite on a label set; the verdict (and failing rows) is stored."""
    verdict = validation.validate_label_set(engine_for(db_url), label_set_id, validation.Bounds(**bounds), dv)
    if not verdict.success:
        get_run_logger().warning(
            f"label set {label_set_id} failed validation ({', '.join(verdict.failures)}): its calibration "
            "is skipped, the previous one stays in force")
    return {"label_set_id": label_set_id, "validation_run_id": verdict.validation_run_id,
            "success": verdict.success, "failures": verdict.failures}


@task(name="embed", **MODEL)
def embed_task(claim_ids: list[int], db_url: str | None) -> int:
    """Embed every claim text that has no vector yet."""
    from checkworthy.runs.main_job import embed_claims

    return embed_claims(engine_for(db_url), claim_ids)


@task(name="score", **MODEL)
def score_task(model: dict[str, Any], claim_ids: list[int], scoring: dict[str, Any] | None,
               db_url: str | None, guidelines: str | None = None, echo: bool = False) -> list[dict[str, Any]]:
    """Score the claims lacking a score under this model and prompt; return the score keys."""
    from checkworthy.runs.main_job import score_claims

    scorer, prompt = make_scorer(model, scoring, guidelines)
    keys = score_claims(engine_for(db_url), scorer, claim_ids, prompt,
                        chunk_size=(scoring or {}).get("chunk_size", 96), echo=lambda m: say(m, echo),
                        flow_run_id=events.current_flow_run_id())
    return [{"spec": scorer.spec, **_key_dict(k)} for k in keys.values()]


@task(name="calibrate", **DB)
def calibrate_task(target: str, claim_ids: list[int], label_set_id: int, key: dict[str, Any], k: int,
                   alpha: float, threshold: float, interval: str, dv: int | None,
                   validation_run_id: int | None, db_url: str | None,
                   correction: str = "paper") -> dict[str, Any]:
    """One calibration, brought up to date: reused, incremental from the previous run, or full."""
    extra = {"correction": correction} if "correction" in RunSpec.__dataclass_fields__ else {}
    spec = RunSpec(target=target, claim_ids=tuple(sorted(claim_ids)), label_set_id=label_set_id,
                   key=store.ScoreKey(key["model_id"], key["prompt_version"], key["params_hash"],
                                      key["score_kind"]),
                   k=k, alpha=alpha, threshold=threshold, interval_method=interval, **extra)
    out = recalibration.recalibrate(engine_for(db_url), spec, _ctx(dv), validation_run_id=validation_run_id)
    return {"run_id": out.run_id, "mode": out.mode, "target": target, "k": k, "spec": key.get("spec"),
            "score_kind": key["score_kind"], "n_recomputed": out.n_recomputed, "n_copied": out.n_copied}


@task(name="recalibrate-lineage", **DB)
def recalibrate_lineage_task(name: str, label_set_id: int, validation_run_id: int, dv: int | None,
                             db_url: str | None) -> list[dict[str, Any]]:
    """Recalibrate every calibration in force for a lineage on its new head, incrementally."""
    outs = recalibration.recalibrate_lineage(engine_for(db_url), name, label_set_id, _ctx(dv),
                                           validation_run_id=validation_run_id)
    return [{"run_id": o.run_id, "mode": o.mode, "parent_run_id": o.parent_run_id,
             "n_recomputed": o.n_recomputed, "n_copied": o.n_copied, "changes": o.changes} for o in outs]


@task(name="unscored-labelled-claims", **DB)
def unscored_task(lineage: str, label_set_id: int, models: list[dict[str, Any]],
                  db_url: str | None) -> list[dict[str, Any]]:
    """The configured models under which some claims of the label set have no score yet."""
    with engine_for(db_url).connect() as conn:
        missing = recalibration.unscored_in_force(conn, lineage, label_set_id)
    return [{"model": m, "claim_ids": missing[m["spec"]]} for m in models if m["spec"] in missing]


@task(name="compare-methods", **DB)
def compare_task(run_ids: list[int], db_url: str | None) -> list[int]:
    """Every interval, correction and calibrator on each run's inputs (stored once per run), for the
    report's "Methods compared" section. A run too small to cross-validate is skipped, and said."""
    from checkworthy.report import comparison

    engine, done = engine_for(db_url), []
    for rid in run_ids:
        try:
            with engine.begin() as conn:
                done.append(comparison.ensure_comparison(conn, rid, flow_run_id=events.current_flow_run_id()))
        except ValueError as exc:
            get_run_logger().warning(f"run {rid}: no method comparison ({exc})")
    return done


@task(name="evaluate", **DB)
def evaluate_task(run_ids: list[int], db_url: str | None, metrics_file: str | None = None,
                  report_name: str | None = None, reports_dir: str | None = None,
                  report_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Collect each run's metrics (for DVC), optionally render and store the Markdown report."""
    from checkworthy.report import build as report
    from checkworthy.runs.evaluation import load_metrics

    engine = engine_for(db_url)
    summary: dict[str, Any] = {}
    with engine.begin() as conn:
        runs = conn.execute(
            text("""SELECT r.id, r.target, r.k, r.score_kind, r.mode, m.spec FROM calibration_runs r
                    JOIN models m ON m.id = r.model_id WHERE r.id = ANY(:i) ORDER BY r.id"""),
            {"i": list(run_ids)}).all()
        for r in runs:
            m = load_metrics(conn, r.id)
            entry = {f"{method}_weighted_f1": m.get((method, "weighted_f1", "all"))
                     for method in ("baseline", "knn", "nnppi")}
            entry["nnppi_coverage"] = m.get(("nnppi", "coverage", "all"))
            entry["run_id"] = r.id
            summary.setdefault(r.target, {}).setdefault(f"{r.spec}|{r.score_kind}", {})[f"k={r.k}"] = entry
        path = None
        if report_name and run_ids:
            path = str(report.save_report(
                conn, report_name, run_ids, Path(reports_dir or REPORTS_DIR), events.current_flow_run_id(),
                options=report.AnalysisOptions.from_params(report_options)))
    if metrics_file:
        _write_json(Path(metrics_file), summary)
    return {"metrics": summary, "report": path}


def _write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


@task(name="apply-label-file", **DVC)
def apply_labels_task(path: str, repo: str, bounds: dict[str, Any], db_url: str | None,
                      emit: bool = True) -> dict[str, Any]:
    """Validate and apply one label file (DVC-versioned already); record and emit the change."""
    engine = engine_for(db_url)
    with engine.begin() as conn:
        dv = labels.record_data_version(conn, Path(repo))
    out = labels.apply_label_file(engine, Path(path), validation.Bounds(**bounds), dv)
    result = {"path": path, "update_id": out.update_id, "status": out.status, "reused": out.reused,
              "n_rows": out.n_rows, "n_appended": out.n_appended, "new_heads": out.new_heads,
              "validation_run_ids": out.validation_run_ids, "data_version_id": dv}
    if out.status == "applied" and out.new_heads:
        with engine.begin() as conn:
            payload = {"label_set_names": sorted(out.new_heads), "update_id": out.update_id,
                       "new_heads": out.new_heads, "data_version_id": dv}
            change = events.record_change(conn, "labels", str(out.update_id), payload, dv)
        result["event_id"] = events.emit(change) if emit else None
    elif out.status == "rejected":
        get_run_logger().warning(f"{path}: rejected by validation (runs {out.validation_run_ids}); "
                                 "nothing was applied, the calibration in force stays")
    return result


@task(name="place-files", **DVC)
def place_task(files: list[str], repo: str, sub: str) -> list[str]:
    """Copy files under data/<sub>/ and snapshot data/ as a new DVC version (push to the remote)."""
    placed = [str(labels.place_in_data(Path(f), Path(repo), sub)) for f in files]
    labels.version_data(Path(repo), push=True, remote=os.environ.get("CHECKWORTHY_DVC_REMOTE"))
    return placed


@task(name="guidelines-version", **DVC)
def guidelines_task(guidelines: str, repo: str, db_url: str | None, emit: bool = True) -> dict[str, Any]:
    """Version an edited guidelines file (DVC snapshot + prompt version in Postgres); emit the change."""
    from checkworthy.scorers.registry import prompt_info

    version, body, template = prompt_info(guidelines)
    engine = engine_for(db_url)
    with engine.begin() as conn:
        store.ensure_prompt_version(conn, version, body, template)
        seen = conn.execute(text("SELECT count(*) FROM change_events WHERE kind = 'guidelines'")).scalar_one()
        known = conn.execute(text("SELECT 1 FROM change_events WHERE kind = 'guidelines' AND key = :k"),
                             {"k": version}).scalar()
    if known:
        return {"version": version, "new": False}
    snapshot = Path(repo) / "data" / "guidelines" / f"checkworthiness-{version}.yaml"
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    if not snapshot.exists():
        snapshot.write_text(body, encoding="utf-8")
    labels.version_data(Path(repo), push=True, remote=os.environ.get("CHECKWORTHY_DVC_REMOTE"))
    with engine.begin() as conn:
        dv = labels.record_data_version(conn, Path(repo))
        change = events.record_change(conn, "guidelines", version,
                                      {"version": version, "path": str(Path(guidelines).resolve()),
                                       "snapshot": str(snapshot), "baseline": seen == 0}, dv)
    # the first version ever seen is the baseline the main job scores under: nothing to redo
    event_id = events.emit(change) if emit and seen and change.new else None
    return {"version": version, "new": change.new, "baseline": seen == 0, "event_id": event_id,
            "data_version_id": dv}


@task(name="ingest-claims", **DB)
def ingest_task(files: list[str], db_url: str | None,
                lineages: list[str] | None = None) -> dict[str, list[int]]:
    """Store newly arrived claims (``id,dataset,text``) as targets of their dataset's lineages."""
    engine = engine_for(db_url)
    out: dict[str, list[int]] = {}
    for f in files:
        for target, ids in labels.ingest_claims(engine, Path(f), lineages).items():
            out.setdefault(target, []).extend(ids)
    return out


@task(name="lineages", **DB)
def lineages_task(db_url: str | None, names: list[str] | None = None) -> list[dict[str, Any]]:
    """Each lineage's head, its claims and the targets it calibrates."""
    engine = engine_for(db_url)
    with engine.connect() as conn:
        heads = labels.heads(conn)
        return [{"lineage": n, "label_set_id": h, "calibration_ids": store.label_set_claims(conn, h),
                 "targets": labels.target_claim_ids(conn, n)}
                for n, h in sorted(heads.items()) if names is None or n in names]


# --------------------------------------------------------------------------- flows


def _bounds(params: dict[str, Any]) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(validation.Bounds.from_params(params))


def _calibrate_all(lineages: list[dict[str, Any]], verdicts: dict[str, dict], params: dict[str, Any],
                   dv: int | None, db_url: str | None, guidelines: str | None,
                   echo: bool = False) -> list[dict[str, Any]]:
    """Embed and score the lineages' claims with every configured model, then calibrate every target."""
    ids = sorted({i for lin in lineages for i in lin["calibration_ids"]}
                 | {i for lin in lineages for t in lin["targets"].values() for i in t})
    if not ids:
        return []
    say(f"embedded {embed_task(ids, db_url)} new texts", echo)
    keys = [key for model in params["models"]
            for key in score_task(model, ids, params.get("scoring"), db_url, guidelines, echo)]
    runs = []
    for lin in lineages:
        verdict = verdicts[lin["lineage"]]
        if not verdict["success"]:
            continue
        for target, claim_ids in sorted(lin["targets"].items()):
            for key in keys:
                for k in params["k"]:
                    runs.append(calibrate_task(
                        target, claim_ids, lin["label_set_id"], key, k, params["alpha"], params["threshold"],
                        params.get("interval", "z"), dv, verdict["validation_run_id"], db_url,
                        params.get("correction", "paper")))
    return runs


@flow(name="checkworthy-pipeline", log_prints=True)
def pipeline_flow(params_path: str = str(PARAMS_FILE), db_url: str | None = None, repo: str = str(ROOT),
                  commit_data: bool = True, report_name: str | None = None, reports_dir: str | None = None,
                  metrics_file: str | None = None, limit: int | None = None,
                  report_prefix: str | None = None, echo: bool = False) -> dict[str, Any]:
    """The main job: data version -> datasets -> validation -> embed -> score -> calibrate -> evaluate.

    ``commit_data`` snapshots data/ first (``dvc add`` + ``dvc push``; a no-op when unchanged), so
    the recorded hash is the data actually used. ``report_prefix`` names a report per run
    (scheduled deployments); ``report_name`` names one exactly. ``echo`` also prints progress to
    stdout (``checkworthy run``).
    """
    t0 = time.monotonic()
    if report_prefix and not report_name:
        report_name = f"{report_prefix}-{time.strftime('%Y%m%d-%H%M%S')}"
    params = load_params(Path(params_path))
    dv = version_data_task(repo, commit_data, db_url, "checkworthy-pipeline",
                           {"params": params, "limit": limit})
    prepared = []
    for name in params["datasets"]:
        n_per_class = (params.get("sampling", {}).get(name) or {}).get("n_per_class")
        p = prepare_task(name, params["seed"], n_per_class, dv, db_url, limit, echo)
        say(f"{name}: calibration set {len(p['calibration_ids'])} claims ({p['lineage']}, label set "
            f"{p['label_set_id']}), test {len(p['test_ids'])}", echo)
        prepared.append(p)
    bounds = _bounds(params)
    if limit:  # a smoke run's calibration set is at most ``limit`` claims by construction
        bounds["min_rows"] = min(bounds["min_rows"], limit)
    verdicts = {p["lineage"]: validate_task(p["label_set_id"], bounds, dv, db_url) for p in prepared}
    lineages = [{"lineage": p["lineage"], "label_set_id": p["label_set_id"],
                 "calibration_ids": p["calibration_ids"], "targets": {p["target"]: p["test_ids"]}}
                for p in prepared]
    runs = _calibrate_all(lineages, verdicts, params, dv, db_url, None, echo)
    run_ids = [r["run_id"] for r in runs]
    if params.get("compare"):
        say(f"compared the methods on {len(compare_task(run_ids, db_url))} runs", echo)
    ev = evaluate_task(run_ids, db_url, metrics_file, report_name, reports_dir, params.get("report"))
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
        verdict = validate_task(lin["label_set_id"], _bounds(params), dv, db_url)
        out["validations"].append(verdict | {"lineage": lin["lineage"]})
        if not verdict["success"]:
            out["skipped"].append(lin["lineage"])
            continue
        embed_task(lin["calibration_ids"], db_url)  # newly labelled claims need a vector ...
        for model in unscored_task(lin["lineage"], lin["label_set_id"], params["models"], db_url):
            score_task(model["model"], model["claim_ids"], params.get("scoring"), db_url)  # ... and scores
        out["runs"] += recalibrate_lineage_task(lin["lineage"], lin["label_set_id"],
                                                verdict["validation_run_id"], dv, db_url)
    run_ids = [r["run_id"] for r in out["runs"]]
    if run_ids:
        out["metrics"] = evaluate_task(run_ids, db_url, metrics_file)["metrics"]
    for r in out["runs"]:
        print(f"run {r['run_id']}: {r['mode']}, {r['n_recomputed']} recomputed, {r['n_copied']} copied")
    return out


@flow(name="label-update", log_prints=True)
def label_update_flow(files: list[str] | None = None, repo: str = str(ROOT), db_url: str | None = None,
                      params_path: str = str(PARAMS_FILE), recalibrate_now: bool = False,
                      emit: bool = True) -> dict[str, Any]:
    """Version and apply label files; the event it emits triggers recalibration (or do it now)."""
    params = load_params(Path(params_path))
    engine = engine_for(db_url)
    if files is None:
        with engine.connect() as conn:
            files = [str(p) for p in labels.pending_label_files(conn, Path(repo))]
    if not files:
        return {"updates": [], "recalibration": None}
    placed = place_task(files, repo, "labels")
    dv = version_data_task(repo, False, db_url, "label-update", {"files": files})
    updates = [apply_labels_task(p, repo, _bounds(params), db_url, emit) for p in placed]
    for u in updates:
        print(f"{u['path']}: {u['status']}, {u['n_appended']} labels appended, new heads {u['new_heads']}")
    changed = sorted({n for u in updates for n in u["new_heads"]})
    recal = None
    if recalibrate_now and changed:
        recal = recalibrate_flow(changed, db_url, repo, params_path, "labels")
    return {"updates": updates, "data_version_id": dv, "changed": changed, "recalibration": recal}


@flow(name="rescore", log_prints=True)
def rescore_flow(guidelines: str = str(GUIDELINES_FILE), db_url: str | None = None, repo: str = str(ROOT),
                 params_path: str = str(PARAMS_FILE), metrics_file: str | None = None,
                 label_set_names: list[str] | None = None) -> dict[str, Any]:
    """Score every lineage's claims under the (new) guidelines and calibrate them with that prompt."""
    params = load_params(Path(params_path))
    dv = version_data_task(repo, False, db_url, "rescore", {"guidelines": guidelines})
    lineages = lineages_task(db_url, label_set_names)
    verdicts = {lin["lineage"]: validate_task(lin["label_set_id"], _bounds(params), dv, db_url)
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
    with engine_for(db_url).connect() as conn:
        stale = recalibration.targets_needing_work(conn, label_set_names)
    if not stale:
        print("nothing new: every target is calibrated over all its claims")
        return {"ingested": added, "runs": []}
    lineages = lineages_task(db_url, label_set_names)
    verdicts = {lin["lineage"]: validate_task(lin["label_set_id"], _bounds(params), dv, db_url)
                for lin in lineages}
    runs = _calibrate_all(lineages, verdicts, params, dv, db_url, None)
    new_work = [r for r in runs if r["mode"] != "reused"]
    print(f"{sum(len(v) for v in added.values())} claims arrived; {len(new_work)} calibrations updated")
    return {"ingested": added, "runs": runs}


@flow(name="watch-changes", log_prints=True)
def watch_flow(repo: str = str(ROOT), db_url: str | None = None, guidelines: str = str(GUIDELINES_FILE),
               params_path: str = str(PARAMS_FILE)) -> dict[str, Any]:
    """Notice label files dropped in data/labels/ and guideline edits; version them and emit events."""
    labels_out = label_update_flow(None, repo, db_url, params_path)
    guide_out = guidelines_update_flow(guidelines, repo, db_url, params_path)
    return {"labels": labels_out, "guidelines": guide_out}
