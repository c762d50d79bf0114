"""Render a report of stored runs: every table and figure from stored rows only.

:func:`build` reads the runs, their ``evaluation_metrics``, the analyses a report pinned
(:mod:`checkworthy.report.evaluation`) and the method comparisons it pinned, and lays out the
document (:mod:`checkworthy.report.sections`, :mod:`~checkworthy.report.ablations`,
:mod:`~checkworthy.report.diagnostics`, :mod:`~checkworthy.report.methods_compared`), sorted
deterministically, with no timestamps but stored ones. The same rows give the same Markdown, the
same HTML and the same PNG bytes, so a stored report always re-renders byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from checkworthy.report import paper_figures
from checkworthy.report.ablations import k_sweep_section, size_section, temperature_section
from checkworthy.report.diagnostics import failure_section, reliability_section
from checkworthy.report.document import Document, code, esc, to_html, to_markdown
from checkworthy.report.evaluation import load_analyses
from checkworthy.report.formatting import METHODS, missing
from checkworthy.report.methods_compared import methods_compared
from checkworthy.report.run_groups import Group, group_runs, load_runs
from checkworthy.report.sections import data_beside_paper, run_tables, summary
from checkworthy.store.analyses import lineage_position, score_params
from checkworthy.store.comparisons import comparison_heads, comparison_rows
from checkworthy.store.metrics import load_metrics


@dataclass
class Built:
    """A rendered report: the document, its figures (drawn on demand) and machine-readable files."""

    doc: Document
    figures: dict[str, Callable[[], bytes]]
    metrics: dict[str, Any]
    plot_files: dict[str, str]

    @property
    def markdown(self) -> str:
        return to_markdown(self.doc)

    def html(self) -> str:
        return to_html(self.doc, {path: draw() for path, draw in sorted(self.figures.items())})


def build(conn: Connection, run_ids: Sequence[int], title: str = "checkworthy report",
          analysis_ids: Sequence[int] | None = None, comparison_ids: Sequence[int] | None = None) -> Built:
    """The report of the given runs, from stored rows only.

    ``analysis_ids``: the analyses to render (None: the earliest stored of each kind).
    ``comparison_ids``: the stored method comparisons to render in a "Methods compared"
    section; None or empty renders no such section, so reports stored before comparisons
    existed re-render byte for byte.
    """
    runs = load_runs(conn, run_ids)
    metrics = {r["id"]: load_metrics(conn, r["id"]) for r in runs}
    analyses = load_analyses(conn, runs, analysis_ids)
    params = {r["id"]: score_params(conn, r) for r in runs}
    for r in runs:
        r["lineage"] = _lineage(conn, r["label_set_id"])
    groups = group_runs(runs)
    built = Built(Document(title), {}, {}, {})
    summary(built.doc, groups, metrics)
    data_beside_paper(built.doc, groups, metrics)
    for g in groups:
        _group_section(built, g, metrics, analyses, params)
    if comparison_ids:
        methods_compared(built.doc, groups, comparison_heads(conn, comparison_ids),
                         comparison_rows(conn, comparison_ids), built.figures, built.plot_files)
    return built


def _lineage(conn: Connection, label_set_id: int) -> str:
    """Where the label set sits in its lineage, if recorded (a suffix of the inputs table's cell)."""
    row = lineage_position(conn, label_set_id)
    if row is None:
        return ""
    return f"; version {row.n} of lineage {code(row.name)} ({esc(row.reason)})"


def _group_section(built: Built, g: Group, metrics: Mapping[int, Mapping], analyses: Mapping,
                   params: Mapping[int, dict]) -> None:
    """A group's tables, ablations and diagnostics, and its entry in metrics.json."""
    doc, figures, plot_files = built.doc, built.figures, built.plot_files
    run_tables(doc, g, metrics, analyses, params)
    k_sweep_section(doc, g, metrics, analyses, figures, plot_files)
    size_section(doc, g, analyses, figures, plot_files)
    temperature_section(doc, g, analyses)
    reliability_section(doc, g, analyses, figures)
    failure_section(doc, g, analyses)
    built.metrics[g.slug] = _metrics_json(g, metrics)


def _metrics_json(g: Group, metrics: Mapping[int, Mapping]) -> dict[str, Any]:
    """Every stored metric of the group's runs, nested for ``dvc metrics show``, with paper deltas."""
    out: dict[str, Any] = {}
    for r in g.runs:
        by_method: dict[str, dict[str, float | None]] = {}
        for (meth, met, cls), v in sorted(metrics[r["id"]].items()):
            name = met if cls == "all" else f"{met}_{cls}"
            by_method.setdefault(meth, {})[name] = None if missing(v) else v
        paper = paper_figures.weighted_f1(r["dataset"], r["model_spec"], r["k"])
        if paper:
            for i, (meth, _) in enumerate(METHODS):
                ours = by_method.get(meth, {}).get("weighted_f1")
                by_method.setdefault(meth, {})["paper_weighted_f1"] = paper[i]
                by_method[meth]["delta_weighted_f1"] = None if ours is None else ours - paper[i]
        out[f"k{r['k']}"] = by_method | {"run_id": r["id"]}
    return out

