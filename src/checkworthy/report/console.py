"""Plain text for the terminal: the headline figures of runs beside the paper's, the tables of
one method comparison, and what ``calibrate`` and ``predict`` print about their run."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection

from checkworthy.method.decision_cut import PriorDecision
from checkworthy.method.drift import another_kind
from checkworthy.method.prevalence import stored_share
from checkworthy.method.selective import ReviewRule
from checkworthy.report import paper_figures
from checkworthy.report.drift import drift_line
from checkworthy.report.formatting import METHODS, fmt
from checkworthy.runs.analyses import load_runs, temperature_label
from checkworthy.runs.comparisons import DECISION_FAMILIES, INTERVAL_FAMILIES, method_keys, targets_met
from checkworthy.runs.own_scores import CalibrateOutcome
from checkworthy.store.analyses import score_params
from checkworthy.store.metrics import load_metrics


def table_rows(conn: Connection, run_ids: Sequence[int]) -> list[dict]:
    """One row per run: weighted and class F1 of each method, the paper's figure, coverage."""
    rows = []
    for run in load_runs(conn, run_ids):
        m = load_metrics(conn, run["id"])
        paper = paper_figures.weighted_f1(run["dataset"], run["model_spec"], run["k"])
        sampled = score_params(conn, run)
        label = f"{run['model_spec']} / {run['score_kind']}" + (
            f" {temperature_label(sampled['temperature'])}" if "temperature" in sampled else "")
        row: dict[str, Any] = {"run": run, "dataset": run["dataset"], "paper": paper, "label": label}
        for method, _ in METHODS:
            row[method] = {
                "wf1": m.get((method, "weighted_f1", "all")),
                "f1_0": m.get((method, "f1", "0")),
                "f1_1": m.get((method, "f1", "1")),
                "ppr": m.get((method, "predicted_positive_rate", "all")),
                "accuracy": m.get((method, "accuracy", "all")),
            }
        row["coverage"] = {c: m.get(("nnppi", "coverage", c)) for c in ("0", "1", "all")}
        row["width"] = m.get(("nnppi", "mean_width", "all"))
        row["n"] = m.get(("nnppi", "n", "all"))
        row["gold_ppr"] = m.get(("baseline", "gold_positive_rate", "all"))
        row["mean_score"] = {c: m.get(("baseline", "mean_score", c)) for c in ("0", "1")}
        rows.append(row)
    return rows


def console_table(rows: Sequence[dict]) -> str:
    """The headline table for the terminal: weighted F1 (ours / paper) and class F1."""
    head = (f"{'dataset':<12} {'model / score':<40} {'k':>3}  "
            + "  ".join(f"{label + ' wF1 (paper)':>20}" for _, label in METHODS)
            + "   NN-PPI F1 c0/c1   cover95")
    lines = [head, "-" * len(head)]
    for r in rows:
        run = r["run"]
        cells = []
        for i, (method, _) in enumerate(METHODS):
            paper = r["paper"][i] if r["paper"] else None
            cells.append(f"{fmt(r[method]['wf1']):>11} ({fmt(paper)})")
        lines.append(
            f"{r['dataset']:<12} {r['label']:<40} {run['k']:>3}  "
            + "  ".join(f"{c:>20}" for c in cells)
            + f"   {fmt(r['nnppi']['f1_0'])}/{fmt(r['nnppi']['f1_1'])}   {fmt(r['coverage']['all'])}"
        )
    return "\n".join(lines)


def _cell(v: float | None, nd: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.{nd}f}"


def comparison_tables(rows: Sequence[Mapping[str, Any]], title: str = "") -> str:
    """Plain-text tables of one comparison: intervals and sets, then corrections, CV and calibrators."""
    idx = {(r["family"], r["method"], r["k"], r["metric"], r["class"]): r["value"] for r in rows}
    met = targets_met(rows)
    lines = [title] if title else []
    head = (f"{'family':<12} {'interval':<21} {'k':>3} {'cov':>6} {'cov0':>6} {'cov1':>6} {'width':>7} "
            f"{'w[0,1]':>7} {'size':>5}  target")
    lines += [head, "-" * len(head)]
    for f, m, k in method_keys(idx, INTERVAL_FAMILIES):
        vals = [idx.get((f, m, k, metric, c)) for metric, c in (
            ("coverage", "all"), ("coverage", "0"), ("coverage", "1"), ("mean_width", "all"),
            ("mean_width_01", "all"))]
        ok = met.get((f, m, k))
        lines.append(f"{f:<12} {m:<21} {'—' if k is None else k:>3} "
                     + " ".join(f"{_cell(v):>{6 if i < 3 else 7}}" for i, v in enumerate(vals))
                     + f" {_cell(idx.get((f, m, k, 'mean_set_size', 'all')), 2):>5}  "
                     + ("" if ok is None else "met" if ok else "missed"))
    head = (f"{'family':<12} {'method':<21} {'k':>3} {'wF1':>6} {'F1 0':>6} {'F1 1':>6} {'acc':>6} "
            f"{'brier':>6}")
    lines += ["", head, "-" * len(head)]
    for f, m, k in method_keys(idx, DECISION_FAMILIES):
        vals = [idx.get((f, m, k, metric, c)) for metric, c in (
            ("weighted_f1", "all"), ("f1", "0"), ("f1", "1"), ("accuracy", "all"), ("brier", "all"))]
        lines.append(f"{f:<12} {m:<21} {'—' if k is None else k:>3} "
                     + " ".join(f"{_cell(v):>6}" for v in vals))
    return "\n".join(lines)


def print_outcome(outcome: CalibrateOutcome, method: str, out: str, labelled: str, unlabelled: str) -> None:
    """What calibrate and predict print: the run, the batch's share of check-worthy claims, notes,
    and the metrics when U has labels (positive-class F1, the shared task's metric, first)."""
    print(f"calibrated {outcome.n_rows} claims (run {outcome.run_id}, {method}) -> {out}")
    if outcome.auto_choice:
        figures = ", ".join(f"{name} {f:.3f}" for name, f in outcome.auto_choice["cv_f1_positive"].items())
        print(f"auto chose {outcome.auto_choice['chosen']} (cross-validated positive-class F1 on the "
              f"labelled file: {figures})")
    line = drift_line(outcome.drift)
    if line:
        print(line)
    p = stored_share(outcome.prevalence)
    d = outcome.drift
    if p and p.not_estimable == "drift" and d is not None:  # withdrawn for drift: the run has a figure
        why = (f"{d.share:.0%} of the batch lies beyond the labelled set (drift)" if d.alert else
               f"{d.n_new_language} of its {d.n} claims are in languages the labelled set "
               "has none of")
        print(f"share check-worthy in this batch: not estimable: {why}, so its claims of each class need "
              "not look like the labelled ones")
    elif p and p.not_estimable:
        print(f"share check-worthy in this batch: not estimable: {p.why}; naive (share called check-worthy) "
              f"{p.naive:.3f}; in the labelled file {p.labelled:.3f}")
    elif p and p.estimate is not None:
        interval = (f"{p.level:.0%} interval {p.low:.3f}-{p.high:.3f}, label-shift PPI"
                    if p.low is not None and p.high is not None
                    else "no interval: one decision throughout the batch or a class of L")
        print(f"share check-worthy in this batch: {p.estimate:.3f} ({interval}); naive (share called "
              f"check-worthy) {p.naive:.3f}; in the labelled file {p.labelled:.3f}")
    if outcome.review:
        print(review_line(outcome))
    if outcome.prior:
        print(prior_line(outcome.prior))
    if outcome.in_labelled:
        print(f"note: {len(outcome.in_labelled)} claims of {unlabelled} have the text of a claim of "
              f"{labelled} (first: row {outcome.in_labelled[0]}); the nearest neighbour of each is its "
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
    if outcome.by_language:
        print("nnppi by language: " + "; ".join(
            f"{lang} ({int(m['n'])} claims) F1 c1 {m['f1_1']:.3f}, weighted F1 {m['weighted_f1']:.3f}, "
            f"accuracy {m['accuracy']:.3f}" for lang, m in outcome.by_language.items()))


def prior_line(prior: PriorDecision) -> str:
    """What the run decided at when not at its own threshold, in words: what ``auto`` decided as
    and why, then the batch prior's threshold or the F1 cut."""
    lines = [f"prior auto, decided as {prior.decided_as}: {prior.why}"] if prior.mode == "auto" else []
    if prior.batch is not None and prior.threshold_on_theta is not None:
        lines.append(f"decisions for the batch's prior: theta >= {prior.threshold_on_theta:.3f}")
    elif (prior.threshold_on_theta is not None and prior.f1_labelled is not None
          and prior.f1_labelled_at_run_threshold is not None):
        share = prior.weighted_to_batch_share
        weighted = ("" if share is None else ", its classes weighted to this batch's estimated share of "
                    f"check-worthy claims {share:.3f}")
        lines.append("decisions at the cut with the best positive-class F1 on the labelled file"
                     f"{weighted}: theta >= {prior.threshold_on_theta:.2f} (its leave-one-out F1 there "
                     f"{prior.f1_labelled:.3f}, optimistic: chosen on it; "
                     f"{prior.f1_labelled_at_run_threshold:.3f} at the run's threshold)")
    return "\n".join(lines)


def review_line(outcome: CalibrateOutcome) -> str:
    """How many claims go to a person and why, and the Learn-then-Test promise with the claims it
    is made for and the labelled claims it was certified on: in a batch that drifted from the
    labelled file, only those within the labelled set's radius, and none when the batch is of
    another kind; none automated when too few labelled claims are like the batch."""
    r, d = outcome.review or {}, outcome.drift
    rule = ReviewRule.from_dict(r)
    margin = rule.none_why() if r["margin"] is None else f"margin {r['margin']:.2f}"
    promise = f"share of {rule.promise()}"
    head = f"review: {outcome.n_review} of {outcome.n_rows} claims to a person"
    if d is None or not d.alert:
        if d is None or not d.languages:
            return f"{head} ({margin}; {promise})"
        return (f"{head} ({outcome.n_drift} for drift, in languages the labelled file has none of; the rest "
                f"by {margin}); {promise}: promised only for the {d.n - d.n_new_language} claims in the "
                "labelled file's languages")
    within = d.n - d.n_beyond
    if another_kind(d):
        return (f"{head} ({outcome.n_drift} for drift: {d.n_beyond} far from every labelled claim, "
                f"{within} within the labelled set's radius); no Learn-then-Test promise for this batch, "
                "of another kind than the labelled file")
    return (f"{head} ({outcome.n_drift} for drift, far from every labelled claim; the rest by {margin}); "
            f"{promise}: promised only for the {within} claims within the labelled set's radius "
            f"({within / d.n:.0%} of the batch)")
