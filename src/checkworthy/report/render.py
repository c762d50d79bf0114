"""Render a report of stored runs: every table and figure from stored rows only.

:func:`build` reads the runs, their ``evaluation_metrics``, the analyses a report pinned
(:mod:`checkworthy.report.analyses`) and the method comparisons it pinned, and lays out the
document: first the headline (:mod:`checkworthy.report.headline`: the recommended method against
the paper's NN-PPI and the baselines, one table and one figure), then, folded, the contents, every
run (:mod:`checkworthy.report.sections`), each group's tables, ablations and diagnostics
(:mod:`~checkworthy.report.ablations`, :mod:`~checkworthy.report.diagnostics`) and the methods
compared (:mod:`~checkworthy.report.methods_compared`), sorted deterministically, with no
timestamps but stored ones. The same rows (and params.yaml's ``predict:``) give the same Markdown,
the same HTML and the same PNG bytes, so a stored report re-renders byte for byte.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from checkworthy.report import paper_figures
from checkworthy.report.ablations import k_sweep_section, size_section, temperature_section
from checkworthy.report.analyses import load_analyses
from checkworthy.report.decide_or_review import decide_or_review
from checkworthy.report.diagnostics import failure_section, reliability_section
from checkworthy.report.document import Contents, Document, Fold, Heading, code, esc, to_html, to_markdown
from checkworthy.report.drift import drift_section
from checkworthy.report.formatting import METHODS, missing
from checkworthy.report.headline import Headline, headline, recommended
from checkworthy.report.methods_compared import methods_compared
from checkworthy.report.run_groups import Group, group_runs
from checkworthy.report.sections import data_beside_paper, run_tables, summary
from checkworthy.runs.analyses import load_runs
from checkworthy.runs.predict import Recommended
from checkworthy.store.analyses import lineage_position, score_params
from checkworthy.store.comparisons import comparison_heads, comparison_rows
from checkworthy.store.metrics import load_metrics

HEADLINE = "Recommended method against the paper's NN-PPI and the baselines"


@dataclass
class Built:
    """A rendered report: the document, its figures (drawn on demand), machine-readable files and
    the headline (for the Prefect artifacts)."""

    doc: Document
    figures: dict[str, Callable[[], bytes]]
    metrics: dict[str, Any]
    plot_files: dict[str, str]
    headline: Headline

    @property
    def markdown(self) -> str:
        return to_markdown(self.doc)

    def html(self) -> str:
        return to_html(self.doc, {path: draw() for path, draw in sorted(self.figures.items())})


def build(conn: Connection, run_ids: Sequence[int], title: str = "checkworthy report",
          analysis_ids: Sequence[int] | None = None, comparison_ids: Sequence[int] | None = None,
          rec: Recommended | None = None) -> Built:
    """The report of the given runs, from stored rows only.

    ``analysis_ids``: the analyses to render (None: the earliest stored of each kind).
    ``comparison_ids``: the stored method comparisons to render in a "Methods compared"
    section and to take the recommended method's figures from; None or empty renders no such
    section. ``rec``: the recommended method (default: params.yaml's ``predict:``).
    """
    runs = load_runs(conn, run_ids)
    metrics = {r["id"]: load_metrics(conn, r["id"]) for r in runs}
    analyses = load_analyses(conn, runs, analysis_ids)
    params = {r["id"]: score_params(conn, r) for r in runs}
    for r in runs:
        r["lineage"] = _lineage(conn, r["label_set_id"])
    groups = group_runs(runs, params, metrics)
    heads = comparison_heads(conn, comparison_ids) if comparison_ids else {}
    rows = comparison_rows(conn, comparison_ids) if comparison_ids else []
    by_run: dict[int, dict[tuple, Any]] = defaultdict(dict)
    for x in rows:
        by_run[x["run_id"]][(x["family"], x["method"], x["k"], x["metric"], x["class"])] = x["value"]
    doc = Document(title, [Heading(2, HEADLINE)])
    figures: dict[str, Callable[[], bytes]] = {}
    out_metrics: dict[str, Any] = {}
    top = headline(doc, groups, metrics, by_run, rec or recommended(), figures, out_metrics)
    built = Built(doc, figures, out_metrics, {}, top)
    doc.add(Contents())
    doc.add(_folded(f"Every run: weighted F1 beside the paper ({len(runs)} runs)",
                    lambda d: summary(d, groups, metrics)))
    doc.add(_folded("Data beside the paper's splits", lambda d: data_beside_paper(d, groups, metrics)))
    doc.add(_folded("Decide or review: automated share against the bound, per dataset and method",
                    lambda d: decide_or_review(conn, d, groups, figures)))
    doc.add(_folded("Drift: how far each run's claims lie from its labelled set",
                    lambda d: drift_section(d, groups, figures)))
    for g in groups:
        doc.add(_folded(f"{esc(g.title)}: tables, ablations and diagnostics of its runs",
                        lambda d, g=g: _group_section(built, d, g, metrics, analyses, params)))
    if comparison_ids:
        doc.add(_folded("Methods compared: every interval, correction and calibrator on each run",
                        lambda d: methods_compared(d, groups, heads, rows, built.figures, built.plot_files)))
    return built


def _folded(summary: str, fill: Callable[[Document], None]) -> Fold:
    """The blocks ``fill`` adds, folded under ``summary``."""
    part = Document("")
    fill(part)
    return Fold(summary, part.blocks)


def _lineage(conn: Connection, label_set_id: int) -> str:
    """Where the label set sits in its lineage, if recorded (a suffix of the inputs table's cell)."""
    row = lineage_position(conn, label_set_id)
    if row is None:
        return ""
    return f"; version {row.n} of lineage {code(row.name)} ({esc(row.reason)})"


def _group_section(built: Built, doc: Document, g: Group, metrics: Mapping[int, Mapping], analyses: Mapping,
                   params: Mapping[int, dict]) -> None:
    """A group's tables, ablations and diagnostics, and its entry (and its twins') in metrics.json."""
    figures, plot_files = built.figures, built.plot_files
    run_tables(doc, g, metrics, analyses, params)
    k_sweep_section(doc, g, metrics, analyses, figures, plot_files)
    size_section(doc, g, analyses, figures, plot_files)
    temperature_section(doc, g, analyses)
    reliability_section(doc, g, analyses, figures)
    failure_section(doc, g, analyses)
    for x in (g, *g.twins):
        built.metrics[x.slug] = _metrics_json(x, metrics)


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

