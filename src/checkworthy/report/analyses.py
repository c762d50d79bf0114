"""The report's analyses read back for rendering: each stored analysis of a report's runs with its
figures and failure examples (computed and stored by :mod:`checkworthy.runs.analyses`, whose SQL is
:mod:`checkworthy.store.analyses`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from checkworthy.runs.analyses import GROUP_ANALYSES, RUN_ANALYSES
from checkworthy.store.analyses import (
    analysis_heads,
    analysis_metric_rows,
    earliest_analysis_heads,
    failure_example_rows,
)


@dataclass(frozen=True)
class Where:
    """Which figure of an analysis, besides method, metric and class: the temperature or failure mode
    (``variant``), k, |L|, seed, bin and statistic (``value`` or an aggregate over seeds: ``mean``,
    ``sd``, ...), as in ``analysis_metrics``."""

    variant: str = ""
    k: int | None = None
    n_labelled: int | None = None
    seed: int | None = None
    bin: int | None = None
    statistic: str = "value"


@dataclass
class StoredAnalysis:
    """One stored analysis with its metric rows and failure examples; :meth:`value` looks a figure up."""

    id: int
    run_id: int
    group_key: str
    analysis: str
    params: dict[str, Any]
    code_rev: str
    flow_run_id: str | None
    rows: list[Mapping[str, Any]] = field(default_factory=list)
    examples: list[Mapping[str, Any]] = field(default_factory=list)

    def value(self, method: str, metric: str, cls: str = "all", where: Where | None = None) -> float | None:
        """The figure of ``method``, ``metric`` and class ``cls`` at ``where`` (None if not stored)."""
        w = where or Where()
        return self._index.get((w.variant, w.k, w.n_labelled, w.seed, w.bin, method, metric, cls,
                                w.statistic))

    def index(self) -> None:
        self._index = {(r["variant"], r["k"], r["n_labelled"], r["seed"], r["bin"], r["method"], r["metric"],
                        r["class"], r["statistic"]): r["value"] for r in self.rows}


def load_analyses(conn: Connection, runs: Sequence[Mapping[str, Any]],
                  analysis_ids: Sequence[int] | None) -> dict[tuple[Any, str], StoredAnalysis]:
    """Analyses keyed by (group_key, analysis) for group analyses and (run_id, analysis) per run."""
    if analysis_ids is not None:
        heads = analysis_heads(conn, analysis_ids)
    else:  # a report stored without pinned analyses: the earliest of each kind
        heads = earliest_analysis_heads(conn, sorted({r["group_key"] for r in runs}), GROUP_ANALYSES,
                                        [r["id"] for r in runs], RUN_ANALYSES)
    out: dict[tuple[Any, str], StoredAnalysis] = {}
    by_id: dict[int, StoredAnalysis] = {}
    for h in heads:
        a = StoredAnalysis(h["id"], h["run_id"], h["group_key"].strip(), h["analysis"], dict(h["params"]),
                           h["code_rev"], h["flow_run_id"])
        key = (a.group_key, a.analysis) if a.analysis in GROUP_ANALYSES else (a.run_id, a.analysis)
        out.setdefault(key, a)
        by_id[a.id] = a
    if by_id:
        for r in analysis_metric_rows(conn, list(by_id)):
            by_id[r["analysis_id"]].rows.append(r)
        for e in failure_example_rows(conn, list(by_id)):
            by_id[e["analysis_id"]].examples.append(e)
    for a in by_id.values():
        a.index()
    return out
