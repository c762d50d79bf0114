"""Plain-text tables for the terminal: the headline figures of runs beside the paper's, and the
tables of one method comparison."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection

from checkworthy.report import paper_figures
from checkworthy.report.formatting import METHODS, fmt
from checkworthy.runs.analyses import load_runs, temperature_label
from checkworthy.runs.comparisons import DECISION_FAMILIES, INTERVAL_FAMILIES, method_keys, targets_met
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
