"""``checkworthy``: the command line (run the main job, calibrate your own scores, report).

Each command imports the layers it uses when it runs, so ``checkworthy --help`` and a refused
option answer at once instead of after loading Prefect, torch and the store.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from checkworthy.cli.checks import claim_ref, closed_unit, open_unit, output_dir, output_file, positive_int
from checkworthy.config import (
    EF_SEARCH,
    PARAMS_FILE,
    REPORTS_DIR,
    ROOT,
    labelled_sizes,
    load_params,
    quiet_offline_env,
)
from checkworthy.errors import DataError, OutputUnwritable, StoreBusy, StoreUnavailable

if TYPE_CHECKING:
    from checkworthy.runs.own_scores import CalibrateOutcome


def _engine():
    from checkworthy.store.engine import get_engine

    return get_engine()


def cmd_run(args: argparse.Namespace) -> int:
    """The main job: both datasets, every k, the table beside the paper, a Markdown report."""
    from checkworthy.flows.pipeline import ReportOptions, pipeline_flow
    from checkworthy.report.console import console_table, table_rows

    t0 = time.monotonic()
    load_params(Path(args.params))  # a params file the flow would refuse is refused here, in one line
    # the Prefect pipeline flow (ephemeral API unless PREFECT_API_URL is set); its last task writes
    # the report, so the flow run carries the report's artifacts
    result = pipeline_flow(params_path=str(Path(args.params).resolve()), limit=args.limit,
                           commit_data=args.commit_data, echo=True,
                           report=ReportOptions(name=args.name or time.strftime("run-%Y%m%d-%H%M%S"),
                                                folder=str(Path(args.reports_dir).resolve())))
    with _engine().connect() as conn:
        print()
        print(console_table(table_rows(conn, sorted(result["run_ids"]))))
    print(f"\nreport: {result['report'] or 'none (no calibration run)'}\n"
          f"wall time: {time.monotonic() - t0:.0f} s")
    return 0


def cmd_labels(args: argparse.Namespace) -> int:
    """``labels add FILE``: version and validate a label file, append its labels, recalibrate.

    ``labels versions [LINEAGE]``: the versions of each label-set lineage.
    """
    from checkworthy.store import lineages

    if args.labels_command == "versions":
        with _engine().connect() as conn:
            for name in [args.lineage] if args.lineage else sorted(lineages.heads(conn)):
                print(name)
                for i, v in enumerate(lineages.version_log(conn, name), 1):
                    print(f"  v{i}: label set {v['label_set_id']} ({v['n_items']} claims, "
                          f"{v['n_positive']} positive) {v['reason']}, {v['created_at']:%Y-%m-%d %H:%M}, "
                          f"data {v['dvc_hash'] or '-'}")
        return 0
    return _add_label_file(Path(args.file), args.event_only)


def _add_label_file(path: Path, event_only: bool) -> int:
    """The one way labels arrive: check, version (DVC), validate (GX), append, recalibrate; print
    what happened, the review-queue entries the labels closed included."""
    from checkworthy.data.label_files import in_label_folder, read_label_csv
    from checkworthy.flows.pipeline import label_update_flow
    from checkworthy.runs.label_updates import check_label_file, refuse_label_file
    from checkworthy.store.review_queue import answers_of_update
    from checkworthy.store.validations import failed_results

    try:
        rows = read_label_csv(path)  # a malformed file fails before anything starts
        with _engine().connect() as conn:  # ... and one naming unknown claims before it is copied
            check_label_file(conn, path, rows)
    except DataError as exc:  # a file of data/labels/ is set aside, as the watch flow does
        if not in_label_folder(path, ROOT):
            raise
        moved = refuse_label_file(_engine(), path, ROOT, str(exc))
        raise DataError(exc.file, exc.row, exc.field, f"{exc.problem}; moved to {moved}") from None
    out = label_update_flow(files=[str(path.resolve())], recalibrate_now=not event_only)
    for u in out["updates"]:
        print(f"{u['path']}: {u['status']}{' (already applied)' if u['reused'] else ''}, "
              f"{u['n_appended']} labels appended, data version {u['data_version_id']}")
        if u.get("moved_to"):
            print(f"  moved to {u['moved_to']}: data/labels/ keeps applied files only")
        for name, ls in u["new_heads"].items():
            print(f"  {name}: new label set version {ls}")
        with _engine().connect() as conn:
            answered = answers_of_update(conn, u["update_id"])
            if answered:
                print(f"  review queue: {len(answered)} claims answered, their entries closed")
            if u["status"] == "rejected":
                for r in failed_results(conn, u["validation_run_ids"]):
                    where = ", ".join(f"line {x['line']}" if x.get("line") else f"claim {x['claim_id']}"
                                      for x in r.unexpected_rows[:10])
                    # name the field when the check is on a column of the file (not a derived one)
                    field = f" (field {r.column_name!r})" if r.column_name in ("label", "text") else ""
                    print(f"  failed {r.check_name}{field}: {where or f'observed {r.observed}'}")
    recal = out.get("recalibration")
    if recal:
        for r in recal["runs"]:
            print(f"  run {r['run_id']}: {r['mode']}, {r['n_recomputed']} claims recomputed, "
                  f"{r['n_copied']} copied")
    return 0 if all(u["status"] == "applied" for u in out["updates"]) else 1


def cmd_review(args: argparse.Namespace) -> int:
    """``review export``: the top of the open review queue as Label Studio tasks or CSV.

    ``review import FILE``: a Label Studio export or a filled-in CSV, through ``labels add``.
    """
    from checkworthy.runs.review_queue import answers_as_label_file, export_rows, write_export

    if args.review_command == "import":
        with tempfile.TemporaryDirectory() as tmp:
            labels = Path(tmp) / f"review-{Path(args.file).stem}.csv"
            answers = answers_as_label_file(Path(args.file), labels)
            print(f"{args.file}: {len(answers)} answers")
            try:
                return _add_label_file(labels, args.event_only)
            except DataError as exc:  # name the person's file and task, not the label file made from it
                if exc.file != str(labels):
                    raise
                row = answers[exc.row - 2].row if exc.row and 2 <= exc.row < len(answers) + 2 else None
                raise DataError(args.file, row, None, exc.problem) from None
    suffix = ".json" if args.format == "label-studio" else ".csv"
    problem = output_file("--out", args.out, [])
    if problem is None and Path(args.out).suffix.lower() != suffix:
        problem = f"--out {args.out}: --format {args.format} writes a {suffix} file"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    with _engine().connect() as conn:
        try:
            rows = export_rows(conn, args.limit, args.target, args.order,
                               load_params(PARAMS_FILE)["seed"] if args.seed is None else args.seed)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    write_export(rows, Path(args.out), args.format)
    what = "most uncertain first" if args.order == "uncertain" else "drawn at random"
    print(f"{len(rows)} claims to label, {what} -> {args.out} ({args.format})")
    if args.format == "label-studio":
        print("Label Studio: import it into a project with the labelling configuration of docs/review.md")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Calibrate U's scores against L's labelled scores; write OUT; print metrics if U has labels."""
    from checkworthy.runs.own_scores import calibrate_files, read_scored_files
    from checkworthy.store.run_spec import RunMethods

    try:
        methods = RunMethods(args.k, args.alpha, args.threshold, args.interval, correction=args.correction,
                             review_risk=args.review_risk, max_risk=args.max_risk, delta=args.delta,
                             knn=args.knn, ef_search=args.ef_search)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    problem = output_file("--out", args.out, [args.labeled, args.unlabeled])
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    # validate both files, alone and together, before the database is even started
    read_scored_files(Path(args.labeled), Path(args.unlabeled), args.k)
    outcome = calibrate_files(_engine(), Path(args.labeled), Path(args.unlabeled), Path(args.out), methods)
    print_outcome(outcome, args, f"interval {args.interval}, correction {args.correction}")
    return 0


def print_outcome(outcome: CalibrateOutcome, args: argparse.Namespace, method: str) -> None:
    """What calibrate and predict print: the run, the batch's share of check-worthy claims, notes,
    and the metrics when U has labels (positive-class F1, the shared task's metric, first)."""
    print(f"calibrated {outcome.n_rows} claims (run {outcome.run_id}, {method}) -> {args.out}")
    if outcome.auto_choice:
        figures = ", ".join(f"{name} {f:.3f}" for name, f in outcome.auto_choice["cv_f1_positive"].items())
        print(f"auto chose {outcome.auto_choice['chosen']} (cross-validated positive-class F1 on the "
              f"labelled file: {figures})")
    from checkworthy.report.drift import drift_line

    line = drift_line(outcome.drift)
    if line:
        print(line)
    p = outcome.prevalence
    if p and p.get("not_estimable") == "drift":
        print(f"share check-worthy in this batch: not estimable: {outcome.drift['share']:.0%} of the batch "
              "lies beyond the labelled set (drift), so its claims of each class need not look like the "
              "labelled ones")
    elif p and p.get("estimate") is not None:
        interval = (f"{p['level']:.0%} interval {p['low']:.3f}-{p['high']:.3f}, label-shift PPI"
                    if p.get("low") is not None
                    else "no interval: one decision throughout the batch or a class of L")
        print(f"share check-worthy in this batch: {p['estimate']:.3f} ({interval}); naive (share called "
              f"check-worthy) {p['naive']:.3f}; in the labelled file {p['labelled']:.3f}")
    if outcome.review:
        print(review_line(outcome))
    if outcome.prior and "batch" in outcome.prior:
        print(f"decisions for the batch's prior: theta >= {outcome.prior['threshold_on_theta']:.3f}")
    if outcome.in_labeled:
        print(f"note: {len(outcome.in_labeled)} claims of {args.unlabeled} have the text of a claim of "
              f"{args.labeled} (first: row {outcome.in_labeled[0]}); the nearest neighbour of each is its "
              "labelled copy, at distance 0, so its decision leans on that label", file=sys.stderr)
    if outcome.metrics:
        print(f"{'method':<10} {'F1 c1':>7} {'weighted F1':>12} {'F1 c0':>7} {'accuracy':>9} {'ROC AUC':>8}")
        for name, m in outcome.metrics.items():
            print(f"{name:<10} {m['f1_1']:>7.3f} {m['weighted_f1']:>12.3f} {m['f1_0']:>7.3f} "
                  f"{m['accuracy']:>9.3f} {m.get('roc_auc', float('nan')):>8.3f}")
        cov = outcome.metrics["nnppi"]
        print(f"interval coverage: class 0 {cov['coverage_0']:.3f}, class 1 "
              f"{cov['coverage_1']:.3f}, overall {cov['coverage_all']:.3f}; true share check-worthy "
              f"{cov['share_positive']:.3f}")


def review_line(outcome: CalibrateOutcome) -> str:
    """How many claims go to a person and why, and the Learn-then-Test promise with the claims it
    is made for: in a batch that drifted from the labelled file, only those within the labelled
    set's radius, and none when the batch is of another kind."""
    from checkworthy.method.drift import another_kind
    from checkworthy.method.selective import RISK_WORDS

    r, d = outcome.review or {}, outcome.drift or {}
    margin = "none decided automatically" if r["margin"] is None else f"margin {r['margin']:.2f}"
    promise = (f"share of {RISK_WORDS[r['risk']]} <= {r['max_risk']:g} with probability >= "
               f"{1 - r['delta']:.0%}")
    head = f"review: {outcome.n_review} of {outcome.n_rows} claims to a person"
    within = d.get("n", 0) - d.get("n_beyond", 0)
    if not d.get("alert"):
        return f"{head} ({margin}; {promise} over the labelled file, Learn-then-Test)"
    if another_kind(d):
        return (f"{head} ({outcome.n_drift} for drift: {d['n_beyond']} far from every labelled claim, "
                f"{within} within the labelled set's radius); no Learn-then-Test promise for this batch, "
                f"of another kind than the labelled file (the rule chosen on it, {promise}, holds for "
                "claims like its own)")
    return (f"{head} ({outcome.n_drift} for drift, far from every labelled claim; the rest by {margin}); "
            f"{promise} over the labelled file, Learn-then-Test: promised only for the {within} claims "
            f"within the labelled set's radius ({within / d['n']:.0%} of the batch)")


def cmd_predict(args: argparse.Namespace) -> int:
    """Score L and U with the recommended model, calibrate U against L, write OUT."""
    from checkworthy.runs.predict import Recommended, check_score_kind, predict_files, read_files
    from checkworthy.scorers.registry import configured_scorer

    problem = output_file("--out", args.out, [args.labeled, args.unlabeled])
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.params and not Path(args.params).is_file():
        print(f"error: --params: no such file {args.params}", file=sys.stderr)
        return 2
    params = load_params(Path(args.params)) if args.params else {}
    options = ("model", "score_kind", "k", "alpha", "threshold", "interval", "correction", "prior",
               "review_risk", "max_risk", "delta", "knn", "ef_search")
    given = {name: getattr(args, name) for name in options}
    rec = Recommended.from_params(params, **given)
    try:
        rec.methods  # noqa: B018 - refuses an unknown method or a bound outside (0, 1)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    labeled, unlabeled = Path(args.labeled), Path(args.unlabeled)
    lab, unl = read_files(labeled, unlabeled, rec.k)  # before the model or the store starts
    if args.model is None and args.score_kind is None:  # the lineage's champion, if it has one
        from checkworthy.runs.adapt import with_champion
        from checkworthy.runs.own_scores import labelled_lineage

        params, rec = with_champion(_engine(), params, rec, labelled_lineage(labeled))
    try:
        scorer, prompt = configured_scorer(params, rec.model)
        check_score_kind(rec, scorer)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: --model {rec.model}: {exc}", file=sys.stderr)
        return 2
    outcome = predict_files(_engine(), (labeled, unlabeled), (lab, unl), Path(args.out), rec, scorer, prompt)
    print_outcome(outcome, args, f"{rec.model} {rec.score_kind}, correction {rec.correction}, "
                                 f"interval {rec.interval}, k = {rec.k}, prior {rec.prior}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Every predictor on every held-out event through predict's path; write held-out.md."""
    from checkworthy.report.held_out import summary, write
    from checkworthy.runs.held_out import DEFAULT_PREDICTORS, evaluate_held_out
    from checkworthy.runs.predict import Recommended

    predictors = DEFAULT_PREDICTORS
    if args.models:
        predictors = tuple(tuple(m.strip().rsplit("=", 1)) for m in args.models.split(",") if m.strip())
        bad = [p for p in predictors if len(p) != 2 or not all(p)]
        if bad:
            print(f"error: --models: expected SPEC=SCORE_KIND[,...], got {args.models!r}", file=sys.stderr)
            return 2
    out = Path(args.out)
    problem = output_dir("--out", args.out)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    params = load_params()
    try:
        measured, chosen_by, events = evaluate_held_out(_engine(), predictors, params=params,
                                                        limit=args.limit, echo=print)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rec = Recommended.from_params(params)
    described = (f"{rec.model} {rec.score_kind}, correction {rec.correction}, interval {rec.interval}, "
                 f"k = {rec.k}, prior {rec.prior}")
    path = write(out, measured, chosen_by, events, described)
    print(f"\n{'predictor':<36} {'method':<26} {'F1 c1':>6} {'min':>6} {'max':>6} {'wF1':>6} {'AUC':>6}")
    for r in summary(measured):
        print(f"{r['predictor']:<36} {r['method']:<26} {r['f1_1']:>6.3f} {r['f1_1_min']:>6.3f} "
              f"{r['f1_1_max']:>6.3f} {r['weighted_f1']:>6.3f} {r['roc_auc']:>6.3f}")
    print(f"report: {path}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Every interval, correction and calibrator on stored runs' inputs: compute, store, print.

    A comparison already stored for a run (same options) is reused. ``--report NAME`` then
    saves a report of the runs whose "Methods compared" section shows these comparisons.
    """
    from checkworthy.report import comparison
    from checkworthy.report.console import comparison_tables
    from checkworthy.store.comparisons import comparison_heads, comparison_rows

    try:
        ids = sorted({int(x) for x in args.run.split(",") if x.strip()})
    except ValueError:
        print(f"error: expected --run <id>[,<id>...], got {args.run!r}", file=sys.stderr)
        return 2
    engine = _engine()
    cids = []
    for rid in ids:
        try:
            with engine.begin() as conn:
                cids.append(comparison.ensure_comparison(conn, rid))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    with engine.connect() as conn:
        heads = comparison_heads(conn, cids)
        for cid in cids:
            info = heads[cid]["params"].get("info", {})
            cv = info.get("cv_choice", {})
            print(comparison_tables(
                comparison_rows(conn, [cid]),
                f"run {heads[cid]['run_id']} (comparison {cid}, {info.get('n_targets')} targets, "
                f"|L| {info.get('n_labelled')}): CV chose {cv.get('label')} at k={cv.get('k')}"))
            print()
    if args.report:
        from checkworthy.report.files import save_report

        with engine.begin() as conn:
            path = save_report(conn, args.report, ids, Path(args.reports_dir))
        print(f"report: {path}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Re-render a stored report (by name or id) from the store; ``run:<ids>`` reports given runs.

    The Markdown (or, with ``--html``, the self-contained HTML page) goes to stdout, byte for
    byte what the stored report holds; ``--out DIR`` writes the whole report directory instead
    (report.md, report.html, figures/, plots/, metrics.json) under ``DIR/<name>/``.
    """
    from checkworthy.report.files import rerender, save_report, write_report_dir
    from checkworthy.store.calibration_runs import run_statuses
    from checkworthy.store.reports import stored_report

    # where the report directory goes: --out, or reports/ for a first report of given runs
    where = args.out or (str(REPORTS_DIR) if args.run.startswith("run:") else None)
    problem = output_dir("--out" if args.out else "reports folder", where) if where else None
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    engine = _engine()
    with engine.begin() as conn:
        if args.run.startswith("run:"):
            try:
                ids = sorted({int(x) for x in args.run[4:].split(",") if x.strip()})
            except ValueError:
                print(f"error: expected run:<id>[,<id>...], got {args.run!r}", file=sys.stderr)
                return 2
            statuses = run_statuses(conn, ids)
            unfinished = [i for i in ids if statuses.get(i) != "complete"]
            if unfinished:  # failed, abandoned or unknown runs have no results to report
                i = unfinished[0]
                print(f"error: {args.run}: run {i} "
                      f"{f'is {statuses[i]}' if i in statuses else 'does not exist'}; a report takes "
                      "complete runs only", file=sys.stderr)
                return 2
            name = "runs-" + "-".join(map(str, ids))
            row = stored_report(conn, name)
            if row is None and ids:  # first report of these runs: analyse and store it
                save_report(conn, name, ids, Path(args.out or REPORTS_DIR))
                row = stored_report(conn, name)
        else:
            row = stored_report(conn, args.run)
        if row is None:
            print(f"no stored report named {args.run!r}", file=sys.stderr)
            return 2
        built = rerender(conn, row)
        if args.out:
            path = write_report_dir(built, Path(args.out) / row["name"])
            print(f"report: {path}")
        else:
            sys.stdout.write(built.html() if args.html else built.markdown)
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    """Why a claim got its decision: the lineage from the audit views (see docs/audit.md)."""
    from checkworthy.report.explanation import format_decision
    from checkworthy.store.audit import explain, find_claims

    engine = _engine()
    with engine.connect() as conn:
        ids = find_claims(conn, args.claim, args.dataset)
        if not ids:
            print(f"no claim {args.claim!r}" + (f" in dataset {args.dataset!r}" if args.dataset else ""),
                  file=sys.stderr)
            return 2
        decisions = explain(conn, ids, args.run)
    if not decisions:
        print(f"claim {args.claim!r} has no calibrated decision"
              + (f" in run {args.run}" if args.run else ""), file=sys.stderr)
        return 1
    print("\n\n".join(format_decision(d) for d in decisions))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """The HTTP API over a lineage's newest calibration run (see docs/api.md)."""
    from checkworthy.cli.serve import run_serve

    return run_serve(args, _engine, args.params)


def cmd_keys(args: argparse.Namespace) -> int:
    """Create, revoke and list the API's keys."""
    from checkworthy.cli.serve import run_keys

    return run_keys(args, _engine)


def cmd_score(args: argparse.Namespace) -> int:
    """Score a CSV of claims with any model spec; store the scores like the main job does."""
    from checkworthy.cli.score import run_score
    from checkworthy.scorers.http_retry import BackendError

    try:
        return run_score(args, _engine)
    except (ValueError, FileNotFoundError, BackendError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def cmd_train_classifier(args: argparse.Namespace) -> int:
    """Train the leakage-free classifier artefact and print its test F1."""
    from checkworthy.cli.score import run_train

    try:
        return run_train(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def cmd_adapt(args: argparse.Namespace) -> int:
    """Fine-tune the recommended small model on a lineage's labels (cross-fitted), register it,
    promote it when it beats the champion."""
    from checkworthy.cli.models import run_adapt

    return run_adapt(args, _engine)


def cmd_models(args: argparse.Namespace) -> int:
    """The model registry: list the versions, promote or retire one."""
    from checkworthy.cli.models import run_models

    return run_models(args, _engine)


def cmd_demonstrations(args: argparse.Namespace) -> int:
    """Pick the few-shot prompt's labelled sentences from the leakage-free training texts."""
    import yaml

    from checkworthy.runs.fewshot_demonstrations import write_demonstrations
    from checkworthy.scorers.fewshot_prompt import DEFAULT_DEMONSTRATIONS, load_demonstrations

    out = args.out or str(DEFAULT_DEMONSTRATIONS)
    problem = output_file("--out", out, [])
    if problem is None and Path(out).suffix not in (".yaml", ".yml"):
        problem = f"--out {out}: name a .yaml file"
    if problem is None and Path(out).is_file():
        try:  # replace a demonstrations file, never anything else
            load_demonstrations(Path(out))
        except (ValueError, yaml.YAMLError, AttributeError, TypeError, KeyError):
            problem = f"--out {out}: exists and is not a demonstrations file; name a new file"
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    params = load_params()
    seed = params["seed"] if args.seed is None else args.seed
    n_per_class = labelled_sizes(params)
    made_by = f"checkworthy demonstrations --n {args.n} --seed {seed}"
    try:
        data = write_demonstrations(args.n, seed, n_per_class, Path(out), made_by=made_by)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(data['shots'])} demonstrations -> {out} (none from {', '.join(data['excluded'])})")
    return 0


class OneLineErrors(argparse.ArgumentParser):
    """argparse that reports a bad option in one line (not its usage block), like every other
    error of the command line; ``--help`` still prints the usage."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"error: {self.prog}: {message} (--help lists the options)\n")


def add_review_options(p: argparse.ArgumentParser, defaults: tuple[str | None, float | None, float | None]
                       ) -> None:
    """Decide or review: the OUT column ``review`` (1 = a person should decide the claim)."""
    risk, max_risk, delta = defaults
    p.add_argument("--review-risk", default=risk,
                   help="what the automatic decisions bound: error (wrong decisions among them) or miss "
                        "(check-worthy claims among the automatic dismissals); default error")
    p.add_argument("--max-risk", type=float, default=max_risk, help="the bound R, in (0, 1); default 0.1")
    p.add_argument("--delta", type=float, default=delta,
                   help="the chance over the labelled file that the bound fails, in (0, 1); default 0.1")


def add_knn_options(p: argparse.ArgumentParser, defaults: tuple[str | None, int | None]) -> None:
    """How neighbours are found: the exact top-k or pgvector's HNSW index (recall recorded)."""
    p.add_argument("--knn", choices=("exact", "hnsw"), default=defaults[0],
                   help="exact (a top-k over every labelled claim, the default) or hnsw (pgvector's HNSW "
                        "index: approximate, for large labelled sets; the run records its recall@k)")
    p.add_argument("--ef-search", type=positive_int, default=defaults[1],
                   help=f"HNSW candidates per search, 1-1000 (default {EF_SEARCH}, params.yaml ef_search): "
                        "more is slower, closer to exact")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineErrors(prog="checkworthy", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="the main job: score, embed, calibrate, report")
    r.add_argument("--params", default=str(PARAMS_FILE), help="params file (default: $CHECKWORTHY_PARAMS, "
                   "else params.yaml of the project)")
    r.add_argument("--name", help="report name (default: run-<timestamp>)")
    r.add_argument("--reports-dir", default=str(REPORTS_DIR))
    r.add_argument("--limit", type=positive_int, help=argparse.SUPPRESS)
    r.add_argument("--commit-data", action="store_true",
                   help="snapshot data/ with dvc add + dvc push first (default: record data.dvc as is)")
    r.set_defaults(func=cmd_run)

    lab = sub.add_parser("labels", help="label updates: add a label file, list label-set versions")
    lab_sub = lab.add_subparsers(dest="labels_command", required=True)
    la = lab_sub.add_parser("add", help="add or correct labels from a CSV id,dataset,label[,source][,text]")
    la.add_argument("file")
    la.add_argument("--event-only", action="store_true",
                    help="only emit checkworthy.labels.updated (a served deployment recalibrates)")
    la.set_defaults(func=cmd_labels)
    lv = lab_sub.add_parser("versions", help="the versions of each label-set lineage")
    lv.add_argument("lineage", nargs="?")
    lv.set_defaults(func=cmd_labels)

    rv = sub.add_parser("review", help="the review queue: export the claims a person should decide, "
                                       "import their answers")
    rv_sub = rv.add_subparsers(dest="review_command", required=True)
    rx = rv_sub.add_parser("export", help="the top of the open queue as Label Studio tasks or a CSV to fill")
    rx.add_argument("--format", choices=("csv", "label-studio"), default="label-studio")
    rx.add_argument("--limit", type=positive_int, default=100, help="how many claims (default 100)")
    rx.add_argument("--order", choices=("uncertain", "random"), default="uncertain",
                    help="uncertain: the open queue, most uncertain first (what a person must decide); "
                         "random: a uniform sample of the unlabelled claims (labels to calibrate with)")
    rx.add_argument("--seed", type=int, help="the random order's seed (default: params.yaml seed)")
    rx.add_argument("--target", help="only claims of this calibration target (e.g. clef2024:incoming)")
    rx.add_argument("--out", required=True, help="the file to write (.json for label-studio, .csv for csv)")
    rx.set_defaults(func=cmd_review)
    ri = rv_sub.add_parser("import", help="a Label Studio export (.json) or a filled-in CSV (.csv): "
                                          "labels added as by 'labels add', queue entries closed")
    ri.add_argument("file")
    ri.add_argument("--event-only", action="store_true",
                    help="only emit checkworthy.labels.updated (a served deployment recalibrates)")
    ri.set_defaults(func=cmd_review)

    c = sub.add_parser("calibrate", help="calibrate your own scores with NN-PPI")
    c.add_argument("--labeled", required=True, help="CSV with id,text,score,label")
    c.add_argument("--unlabeled", required=True, help="CSV with id,text,score[,label]")
    c.add_argument("--k", type=positive_int, required=True, help="neighbours per claim (at least 1)")
    c.add_argument("--alpha", type=open_unit, default=0.05, help="1 - interval level, in (0, 1)")
    c.add_argument("--threshold", type=closed_unit, default=0.5, help="decision threshold, in [0, 1]")
    c.add_argument("--out", required=True)
    c.add_argument("--interval", default="z",
                   help="interval method: z (the paper's), t, t-pred, conformal, conformal-local, mondrian, "
                        "mondrian-local, conformal-split, mondrian-split")
    c.add_argument("--correction", default="paper",
                   help="point correction: paper (NN-PPI), raw, knn, clipped, weighted, adaptive-k, ppi++, "
                        "shrink, global, or cv (chosen by cross-validation on the labelled file); a score "
                        "calibrator fitted on the labelled file: platt, platt-score, isotonic, temperature, "
                        "venn-abers; "
                        "or the embedding head (logistic regression on MiniLM vector + score): head, "
                        "head+nnppi (corrected by NN-PPI), head-cv (correction chosen by cross-validation); "
                        "or auto: platt, head-cv or cv, whichever has the best cross-validated "
                        "positive-class F1 on the labelled file")
    add_review_options(c, ("error", 0.1, 0.1))
    add_knn_options(c, ("exact", EF_SEARCH))
    c.set_defaults(func=cmd_calibrate)

    pr = sub.add_parser("predict", help="the recommended path: score your labelled and unlabelled claims "
                                        "with the recommended model and calibrate (params.yaml predict:)")
    pr.add_argument("--labeled", required=True, help="CSV with id,text,label")
    pr.add_argument("--unlabeled", required=True, help="CSV with id,text[,label]")
    pr.add_argument("--out", required=True)
    pr.add_argument("--params", default=str(PARAMS_FILE), help="params file with the predict: section")
    pr.add_argument("--model", help="model spec (default: params.yaml predict.model)")
    pr.add_argument("--score-kind", help="the model's score kind to calibrate (default: predict.score_kind)")
    pr.add_argument("--k", type=positive_int, help="neighbours per claim (default: predict.k)")
    pr.add_argument("--alpha", type=open_unit, help="1 - interval level, in (0, 1)")
    pr.add_argument("--threshold", type=closed_unit, help="decision threshold, in [0, 1]")
    pr.add_argument("--interval", help="interval method (default: predict.interval)")
    pr.add_argument("--correction", help="correction (default: predict.correction)")
    pr.add_argument("--prior", choices=("labelled", "batch"),
                    help="decide for the labelled file's share of check-worthy claims (labelled) or for the "
                         "batch's, estimated under label shift (batch); default: predict.prior")
    add_review_options(pr, (None, None, None))
    add_knn_options(pr, (None, None))
    pr.set_defaults(func=cmd_predict)

    ev = sub.add_parser("evaluate", help="every predictor on every held-out event (ClaimBuster 2016 debates, "
                                         "CLEF 2024 dev and dev-test) through predict's path")
    ev.add_argument("--models", help="SPEC=SCORE_KIND[,...] (default: the LoRA ensemble, the MiniLM and "
                                     "Gemma LoRA, SetFit and logistic classifiers, and Gemma's token "
                                     "probability and few-shot P(Yes))")
    ev.add_argument("--out", default=str(REPORTS_DIR / "held-out"), help="folder for held-out.md and .json")
    ev.add_argument("--limit", type=positive_int, help=argparse.SUPPRESS)
    ev.set_defaults(func=cmd_evaluate)

    cmp_ = sub.add_parser("compare", help="every interval, correction and calibrator on stored runs")
    cmp_.add_argument("--run", required=True, help="calibration run id(s), comma-separated")
    cmp_.add_argument("--report", help="also save a report of these runs under this name")
    cmp_.add_argument("--reports-dir", default=str(REPORTS_DIR))
    cmp_.set_defaults(func=cmd_compare)

    rep = sub.add_parser("report", help="re-render a stored report")
    rep.add_argument("run", help="report name or id, or run:<calibration run id>[,<id>...]")
    rep.add_argument("--html", action="store_true", help="print the self-contained HTML page instead")
    rep.add_argument("--out", help="write the report directory (md, html, figures, plots, metrics.json) "
                                   "under OUT/<name>/ instead of printing")
    rep.set_defaults(func=cmd_report)

    ex = sub.add_parser("explain", help="why a claim got its decision (audit lineage)")
    ex.add_argument("claim", type=claim_ref,
                    help="the claim's source id (as in the input file), or id:<claim id>")
    ex.add_argument("--dataset", help="only claims of this dataset (source ids may repeat across datasets)")
    ex.add_argument("--run", type=positive_int,
                    help="only this calibration run (default: every run, newest first)")
    ex.set_defaults(func=cmd_explain)

    from checkworthy.cli.score import add_score_arguments, add_train_arguments
    from checkworthy.cli.serve import add_keys_arguments, add_serve_arguments

    sv = sub.add_parser("serve", help="the HTTP API: calibrated decisions for submitted texts (docs/api.md)")
    add_serve_arguments(sv)
    sv.add_argument("--params", default=str(PARAMS_FILE), help="params file (models, predict: defaults)")
    sv.set_defaults(func=cmd_serve)

    ky = sub.add_parser("keys", help="the API's keys: create, revoke, list")
    add_keys_arguments(ky)
    ky.set_defaults(func=cmd_keys)

    sc = sub.add_parser("score", help="score a CSV (id,text) with any model spec")
    add_score_arguments(sc)
    sc.set_defaults(func=cmd_score)

    tc = sub.add_parser("train-classifier", help="train the leakage-free MiniLM classifier")
    add_train_arguments(tc)
    tc.set_defaults(func=cmd_train_classifier)

    from checkworthy.cli.models import add_adapt_arguments, add_models_arguments

    ad = sub.add_parser("adapt", help="fine-tune the recommended small model on a lineage's labels "
                                      "(cross-fitted), register it, promote it if it beats the champion")
    add_adapt_arguments(ad)
    ad.set_defaults(func=cmd_adapt)

    md = sub.add_parser("models", help="the model registry: list, promote, retire")
    add_models_arguments(md)
    md.set_defaults(func=cmd_models)

    dm = sub.add_parser("demonstrations", help="pick the few-shot prompt's labelled sentences (leakage-free)")
    dm.add_argument("--n", type=positive_int, default=64, help="how many (half of each class; default 64)")
    dm.add_argument("--seed", type=int, help="default: params.yaml seed")
    dm.add_argument("--out", help="default: the package's guidelines/demonstrations.yaml")
    dm.set_defaults(func=cmd_demonstrations)
    return p


def main(argv: list[str] | None = None) -> int:
    quiet_offline_env()
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse has printed the usage and the option at fault
        return int(exc.code or 0)
    try:
        return args.func(args)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (StoreBusy, StoreUnavailable, OutputUnwritable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
