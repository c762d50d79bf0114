"""The report's "Methods compared" section: every interval, correction and calibrator on each run's
inputs, from the stored method comparisons (:mod:`checkworthy.runs.comparisons`) the report pinned."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from checkworthy.report import plots
from checkworthy.report.document import Document, Heading, Image, Para, Table, code, esc
from checkworthy.report.formatting import csv_text, fmt, missing
from checkworthy.report.run_groups import Group
from checkworthy.runs import comparisons

#: coverage targets for the conformal methods at nominal 95% (overall, each class)
COVERAGE_TARGETS = (0.94, 0.92)
#: (metric, class) columns of the decisions table
DECISION_COLUMNS = (("weighted_f1", "all"), ("f1", "0"), ("f1", "1"), ("accuracy", "all"),
                    ("predicted_positive_rate", "all"), ("brier", "all"), ("ece", "all"), ("roc_auc", "all"),
                    ("cv_weighted_f1", "all"), ("threshold", "all"))
FAMILY_TITLES = {"interval": "around NN-PPI", "interval-cv": "around the CV choice",
                 "interval-head": "around the head's CV choice", "sets": "conformal set",
                 "correction": "correction", "cv": "CV choice", "calibrator": "calibrator",
                 "cv-prior": "CV choice, pool prior", "calibrator-prior": "calibrator, pool prior",
                 "head": "embedding head", "head-cv": "embedding head, CV choice",
                 "auto": "auto choice on L", "interval-auto": "around the auto choice"}


def methods_compared(doc: Document, groups: Sequence[Group], heads: Mapping[int, Mapping[str, Any]],
                     rows: Sequence[Mapping[str, Any]], figures: dict, plot_files: dict) -> None:
    """The section for the stored comparisons with these heads and rows (by group of runs)."""
    by_run: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_run[r["run_id"]].append(r)
    info = {h["run_id"]: dict(h["params"].get("info", {})) for h in heads.values()}
    doc.add(Heading(2, "Methods compared"))
    lo, cls_lo = COVERAGE_TARGETS
    doc.add(Para(
        "Each run's inputs (label set, score key, target claims, k) recomputed with every interval method "
        "(around the paper's NN-PPI and around the correction chosen by cross-validation), conformal "
        "prediction sets (crepes), every point correction and the standard score calibrators (Platt, "
        "isotonic; temperature for token-probability scores), all fitted on the label set only; the "
        "cross-validated choice uses leave-one-out weighted F1 on the label set, never the targets. "
        f"Coverage targets for the conformal methods at nominal 95%: overall >= {lo:.0%}, each class "
        f">= {cls_lo:.0%}."))
    for g in groups:
        runs = [r for r in g.runs if r["id"] in by_run]
        if runs:
            _group_comparison(doc, g, runs, by_run, info, figures, plot_files)


def _group_comparison(doc: Document, g: Group, runs: Sequence[Mapping[str, Any]],
                      by_run: Mapping[int, Sequence[Mapping[str, Any]]],
                      info: Mapping[int, Mapping[str, Any]], figures: dict, plot_files: dict) -> None:
    """One group's choices, interval table, coverage-against-width figure and decisions table."""
    doc.add(Heading(3, f"{esc(g.title)}: methods compared"))
    _choices(doc, runs, info)
    lo, cls_lo = COVERAGE_TARGETS
    trows, points, csv_rows, dec_rows = [], [], [], []
    for r in runs:
        idx = {(x["family"], x["method"], x["k"], x["metric"], x["class"]): x["value"]
               for x in by_run[r["id"]]}
        met = comparisons.targets_met(by_run[r["id"]], overall=lo, per_class=cls_lo)
        for f, m, k in comparisons.method_keys(idx, comparisons.INTERVAL_FAMILIES):
            cov = [idx.get((f, m, k, "coverage", c)) for c in ("all", "0", "1")]
            width, width01, size = (idx.get((f, m, k, x, "all"))
                                    for x in ("mean_width", "mean_width_01", "mean_set_size"))
            ok = met.get((f, m, k))
            trows.append([str(r["k"]), FAMILY_TITLES[f], code(m), "—" if k is None else str(k),
                          *[fmt(x) for x in cov], fmt(width), fmt(width01), fmt(size, 2),
                          "—" if ok is None else "met" if ok else "missed"])
            x = width01 if f != "sets" else (None if missing(size) else size - 1)
            if not missing(x) and not missing(cov[0]):
                points.append((f, m, k, float(x), float(cov[0])))
            csv_rows.append([r["k"], f, m, k, *cov, width01, size])
        for f, m, k in comparisons.method_keys(idx, comparisons.DECISION_FAMILIES):
            vals = [idx.get((f, m, k, metric, c)) for metric, c in DECISION_COLUMNS]
            dec_rows.append([str(r["k"]), FAMILY_TITLES[f], code(m), "—" if k is None else str(k),
                             *[fmt(x) for x in vals]])
    nominal = 1 - runs[0]["alpha"]
    doc.add(Table(["run k", "interval", "method", "k", "coverage", "class 0", "class 1", "mean width",
                   "width in [0, 1]", "set size", "targets"], trows,
                  caption=f"Coverage of the gold label at nominal {nominal:.0%} on the run's "
                          "target claims. 'targets' applies to conformal methods only. Width within "
                          "[0, 1] keeps infinite conformal bounds finite; set size is the number of "
                          "labels an interval contains."))
    path = f"figures/{g.slug}--coverage_vs_width.png"
    pts = sorted(points, key=lambda p: (p[0], p[1], p[2] or 0, p[3], p[4]))
    figures[path] = lambda pts=pts, title=g.title, nominal=nominal: plots.coverage_vs_width(
        f"{title}: coverage vs width", pts, nominal, COVERAGE_TARGETS)
    plot_files[f"plots/coverage_vs_width/{g.slug}.csv"] = csv_text(
        ["run_k", "family", "method", "k", "coverage", "coverage_0", "coverage_1", "mean_width_01",
         "mean_set_size"], csv_rows)
    doc.add(Image(path, f"Coverage against mean width of every interval, {g.title}"))
    doc.add(Table(["run k", "family", "method", "k", "weighted F1", "F1 (0)", "F1 (1)", "accuracy",
                   "predicted positive rate", "Brier", "ROC AUC", "L CV weighted F1", "threshold"], dec_rows,
                  caption="Decisions at the run's threshold on its target claims. 'raw' is the Baseline, "
                          "'knn' the KNN baseline, 'paper' NN-PPI; calibrators see the score alone."))


def _choices(doc: Document, runs: Sequence[Mapping[str, Any]], info: Mapping[int, Mapping[str, Any]]) -> None:
    """What cross-validation on L chose for each run, and the embedding head's choice."""
    choices = []
    for r in runs:
        cv = info.get(r["id"], {}).get("cv_choice")
        if cv:
            choices.append(f"k={r['k']} (run {r['id']}): {code(cv['label'])} at k={cv['k']}, "
                           f"L leave-one-out weighted F1 {fmt(cv['cv_weighted_f1'])}")
    if choices:
        doc.add(Para("Cross-validated choice — " + "; ".join(choices) + "."))
    head = next((info[r["id"]]["head"] for r in runs if info.get(r["id"], {}).get("head")), None)
    if head:  # fitted on L alone, so the same for every k of the group
        cv = head["cv_choice"]
        doc.add(Para(f"Embedding head (C = {head['C']:g}, chosen by 5-fold log loss on L): the "
                     f"cross-validated correction on its probability is {code(cv['label'])} at "
                     f"k={cv['k']}, L leave-one-out weighted F1 {fmt(cv['cv_weighted_f1'])} "
                     "(neighbours' scores cross-fitted pairwise)."))
