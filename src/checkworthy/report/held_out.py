"""The held-out report (``checkworthy evaluate``): every predictor side by side on unseen events.

It leads with one table: per predictor and method, the mean across events of positive-class F1
(the shared task's metric) with its min-max, weighted F1, ROC AUC, mean average precision over the
ClaimBuster debates, each class's interval coverage, and how well theta reads as a probability
(expected calibration error, Brier score; a reliability diagram per predictor). Then each event on
its own, each event's share of check-worthy claims as the recommended run estimated it
(label-shift PPI) against the truth, what the ``auto`` correction chose on each labelled set and
why, and the figure predictors are chosen by (raw ROC AUC on the labelled sets).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from checkworthy.method.predictor_choice import AUTO_CANDIDATES
from checkworthy.report import plots
from checkworthy.report.formatting import fmt
from checkworthy.runs.held_out import Event, Measured

METHOD_ORDER = ("raw score at 0.5", "recommended", "recommended, batch prior", "paper NN-PPI")
FIGURE = "reliability.png"


def _groups(measured: Sequence[Measured]) -> dict[tuple[str, str], list[Measured]]:
    out: dict[tuple[str, str], list[Measured]] = defaultdict(list)
    for m in measured:
        out[(m.predictor, m.method)].append(m)
    order = {name: i for i, name in enumerate(METHOD_ORDER)}
    return dict(sorted(out.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], 99))))


def _mean(ms: Sequence[Measured], key: str) -> float:
    vals = [m.figures.get(key, float("nan")) for m in ms]
    return float(np.nanmean(vals)) if not all(np.isnan(vals)) else float("nan")


def _max(ms: Sequence[Measured], key: str) -> float:
    vals = [m.figures[key] for m in ms if key in m.figures]
    return float(max(vals)) if vals else float("nan")


def summary(measured: Sequence[Measured]) -> list[dict[str, Any]]:
    """One row per predictor x method: means across events, with the spread of positive-class F1."""
    rows = []
    for (predictor, method), ms in _groups(measured).items():
        f1 = [m.figures["f1_1"] for m in ms]
        debates = [m for m in ms if m.event.startswith("ClaimBuster")]
        rows.append({"predictor": predictor, "method": method, "n_events": len(ms),
                     "f1_1": float(np.mean(f1)), "f1_1_min": float(np.min(f1)), "f1_1_max": float(np.max(f1)),
                     "weighted_f1": _mean(ms, "weighted_f1"), "roc_auc": _mean(ms, "roc_auc"),
                     "map_debates": _mean(debates, "average_precision") if debates else float("nan"),
                     "coverage_0": _mean(ms, "coverage_0"), "coverage_1": _mean(ms, "coverage_1"),
                     "ece": _mean(ms, "ece"), "brier": _mean(ms, "brier"),
                     "automated_share": _mean(ms, "automated_share"),
                     "realised_risk": _mean(ms, "realised_risk"),
                     "realised_risk_max": _max(ms, "realised_risk"),
                     "share_covered": _mean(ms, "share_covered")})
    return rows


def to_markdown(measured: Sequence[Measured], chosen_by: Mapping[str, Mapping[str, float]],
                events: Sequence[Event], recommended: str) -> str:
    """The report's Markdown."""
    lines = ["# Held-out evaluation", "",
             f"Recommended path: {recommended}. Events: "
             + "; ".join(f"{e.name} ({len(e.claims)} claims, {np.mean([c.label for c in e.claims]):.0%} "
                         "check-worthy)" for e in events) + ".",
             "No predictor trained on these claims and no default was chosen with them.", "",
             "## Across events (mean; positive-class F1 with its min-max)", "",
             "| predictor | method | F1 c1 (min-max) | weighted F1 | ROC AUC | MAP, debates "
             "| coverage c0 / c1 | ECE | Brier | automated (error among them, max) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary(measured):
        cov = "–" if np.isnan(r["coverage_0"]) else f"{fmt(r['coverage_0'])} / {fmt(r['coverage_1'])}"
        lines.append(f"| {r['predictor']} | {r['method']} | {fmt(r['f1_1'])} ({fmt(r['f1_1_min'])}-"
                     f"{fmt(r['f1_1_max'])}) | {fmt(r['weighted_f1'])} | {fmt(r['roc_auc'])} | "
                     f"{fmt(r['map_debates'])} | {cov} | {fmt(r['ece'])} | {fmt(r['brier'])} | "
                     f"{_review_cell(r)} |")
    lines += ["", "ECE: expected calibration error of theta (ten equal-width bins), Brier: its mean squared "
              "error; theta is a probability under L's balanced prior, so on events a quarter check-worthy "
              "both include that shift. Automated: the share of claims decided without a person by the "
              "run's decide-or-review rule (Learn-then-Test on L; params.yaml predict: review_risk, "
              "max_risk, delta), with the realised risk among them, mean and worst event.", "",
              f"![reliability of the recommended theta]({FIGURE})"]
    lines += ["", "## Each event (positive-class F1 / weighted F1 / ROC AUC)", ""]
    names = [e.name for e in events]
    lines += ["| predictor | method | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for (predictor, method), ms in _groups(measured).items():
        by = {m.event: m.figures for m in ms}
        cells = [f"{fmt(by[n]['f1_1'])} / {fmt(by[n]['weighted_f1'])} / {fmt(by[n]['roc_auc'])}" if n in by
                 else "–" for n in names]
        lines.append(f"| {predictor} | {method} | " + " | ".join(cells) + " |")
    lines += ["", "## Share check-worthy in each event: label-shift PPI estimate [95% interval] / true",
              "(recommended method; the naive share is the share decided check-worthy)", "",
              "| predictor | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for (predictor, method), ms in _groups(measured).items():
        if method == "recommended":
            by = {m.event: m.figures for m in ms}
            lines.append(f"| {predictor} | " + " | ".join(_share_cell(by.get(n)) for n in names) + " |")
    lines += _auto_table(measured, events)
    datasets = sorted({d for v in chosen_by.values() for d in v})
    lines += ["", "## How the predictor is chosen: raw-score ROC AUC on the labelled sets", "",
              "| predictor | " + " | ".join(datasets) + " |", "|---|" + "---|" * len(datasets)]
    for predictor, by in sorted(chosen_by.items(), key=lambda kv: -np.mean(list(kv[1].values()))):
        lines.append(f"| {predictor} | " + " | ".join(fmt(by.get(d)) for d in datasets) + " |")
    lines += ["", "Runs: " + ", ".join(sorted({str(m.run_id) for m in measured}, key=int))
              + " (`checkworthy explain --run ID` traces any decision)."]
    return "\n".join(lines) + "\n"


def _auto_table(measured: Sequence[Measured], events: Sequence[Event]) -> list[str]:
    """Per predictor and labelled set, each candidate's cross-validated positive-class F1 on L and
    what ``auto`` chose (the same for every event of a dataset: the choice sees L only)."""
    dataset = {e.name: e.dataset for e in events}
    seen: dict[tuple[str, str], Mapping[str, Any]] = {}
    for m in measured:
        if m.method == "recommended" and m.auto_choice:
            seen.setdefault((m.predictor, dataset[m.event]), m.auto_choice)
    if not seen:
        return []
    found = {n for c in seen.values() for n in c["cv_f1_positive"]}
    names = [n for n in AUTO_CANDIDATES if n in found] + sorted(found - set(AUTO_CANDIDATES))
    lines = ["", "## How the correction is chosen: cross-validated positive-class F1 on the labelled set",
             "(`auto`: each candidate fitted on four folds of L decides the fifth; the best wins)", "",
             "| predictor | labelled set | " + " | ".join(names) + " | chosen |",
             "|---|---|" + "---|" * (len(names) + 1)]
    for (predictor, ds), choice in sorted(seen.items()):
        figures = choice["cv_f1_positive"]
        lines.append(f"| {predictor} | {ds} | " + " | ".join(fmt(figures.get(n)) for n in names)
                     + f" | {choice['chosen']} |")
    return lines


def _review_cell(r: Mapping[str, float]) -> str:
    if np.isnan(r["automated_share"]):
        return "–"
    return f"{fmt(r['automated_share'])} ({fmt(r['realised_risk'])}, {fmt(r['realised_risk_max'])})"


def _share_cell(f: Mapping[str, float] | None) -> str:
    if f and "share_not_estimable" in f:
        return f"not estimable; naive {fmt(f['share_naive'])}"
    if not f or "share_estimate" not in f:
        return "–"
    interval = f" [{fmt(f['share_low'])}, {fmt(f['share_high'])}]" if "share_low" in f else " (no interval)"
    return (f"{fmt(f['share_estimate'])}{interval} / {fmt(f['share_positive'])}; "
            f"naive {fmt(f['share_naive'])}")


def write(folder: Path, measured: Sequence[Measured], chosen_by: Mapping[str, Mapping[str, float]],
          events: Sequence[Event], recommended: str) -> Path:
    """``held-out.md`` and ``held-out.json`` (every figure) under ``folder``; return the Markdown."""
    folder.mkdir(parents=True, exist_ok=True)
    md = folder / "held-out.md"
    panels: dict[str, dict[str, Any]] = defaultdict(dict)
    for m in measured:
        if m.method == "recommended":
            panels[m.predictor][m.event] = m.reliability
    (folder / FIGURE).write_bytes(plots.reliability_diagram(
        "Reliability of the recommended theta on each held-out event (dashed: calibrated)", panels))
    md.write_text(to_markdown(measured, chosen_by, events, recommended), encoding="utf-8")
    body = {"summary": summary(measured), "chosen_by_labelled_auc": chosen_by,
            "events": {e.name: {"n": len(e.claims), "n_dropped_in_labelled": e.n_dropped_in_labelled}
                       for e in events},
            "measured": [{"predictor": m.predictor, "method": m.method, "event": m.event, "run_id": m.run_id,
                          **m.figures, **({"auto_choice": m.auto_choice} if m.auto_choice else {}),
                          "reliability": [list(b) for b in m.reliability]}
                         for m in measured]}
    (folder / "held-out.json").write_text(json.dumps(_finite(body), indent=1, sort_keys=True) + "\n")
    return md


def _finite(value: Any) -> Any:
    """NaN as null, so the file is strict JSON."""
    if isinstance(value, float):
        return None if np.isnan(value) else value
    if isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
