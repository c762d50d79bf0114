"""The report's first screen: per dataset, the recommended method against the paper's NN-PPI and the
baselines, in one table and one figure (positive-class F1 per method and dataset).

The recommended method is params.yaml's ``predict:`` (:class:`checkworthy.runs.predict.Recommended`:
the correction ``auto``, chosen on L among Platt scaling, the embedding head and NN-PPI, and the
Mondrian interval, k = 10). Its figures are those the stored method comparison
(:mod:`checkworthy.runs.comparisons`) computed on the run with that model, score and k: the
families of :data:`COMPARED` (``auto`` and ``interval-auto``: decisions, intervals around them). The
paper's NN-PPI (z interval) and the baselines (raw score at the threshold, the plain kNN label
mean) are the runs' stored evaluation metrics, on the paper's score (verbalised, at the paper's
temperature) and on the recommended one; their ROC AUC is the comparison's. Settings are named in
words. ``predict:`` is read when the report is rendered: a stored report re-renders byte for byte
while it is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from checkworthy.report import paper_figures, plots
from checkworthy.report.document import Document, Image, Para, Table, code, esc, to_markdown
from checkworthy.report.formatting import fmt, missing, slug
from checkworthy.report.run_groups import SCORE_WORDS, Group, twin_note
from checkworthy.runs.predict import Recommended
from checkworthy.scorers.sampling_presets import PAPER_SAMPLING
from checkworthy.settings import load_settings

#: a recommended correction -> the comparison's (decision family, interval family) that compute it
COMPARED = {"head-cv": ("head-cv", "interval-head"), "cv": ("cv", "interval-cv"),
            "auto": ("auto", "interval-auto")}
CORRECTION_WORDS = {"auto": "the predictor chosen on L by cross-validated positive-class F1 (Platt scaling "
                            "of the score, the embedding head, or NN-PPI's correction)",
                    "head-cv": "the embedding head (MiniLM vector + score) with its correction chosen by "
                               "cross-validation on L",
                    "cv": "the correction chosen by cross-validation on L"}
INTERVAL_WORDS = {"mondrian": "Mondrian (class-conditional conformal)", "z": "z (the paper's)"}
#: stored method name -> the comparison's correction row for the same decisions (its ROC AUC)
_CORRECTION_ROW = {"baseline": "raw", "knn": "knn", "nnppi": "paper"}
FIGURE = "figures/headline.png"
HEADER = ["dataset", "method", "model", "score", "k", "F1 (check-worthy)", "weighted F1", "paper wF1",
          "ROC AUC", "coverage, not check-worthy", "coverage, check-worthy"]


@dataclass(frozen=True)
class Line:
    """One row of the headline: a method on a model's score, with its figures and the paper's."""

    dataset: str
    method: str  # recommended | nnppi | baseline | knn
    name: str
    model: str  # "" for the kNN label mean, which uses no score
    setting: str
    k: str
    figures: Mapping[str, float | None]  # f1_1, weighted_f1, roc_auc, coverage_0, coverage_1
    paper: Mapping[str, float | None] = field(default_factory=dict)  # f1_1, weighted_f1

    def cells(self) -> list[str]:
        """The row as table cells (inline Markdown)."""
        name = f"**{esc(self.name)}**" if self.method == "recommended" else esc(self.name)
        return [esc(self.dataset), name, esc(self.model or "—"), esc(self.setting or "—"), self.k,
                *self.numbers()]

    def numbers(self) -> list[str]:
        """The figures' cells, in :data:`HEADER` order."""
        f = self.figures
        return [fmt(f.get("f1_1")), fmt(f.get("weighted_f1")), fmt(self.paper.get("weighted_f1")),
                fmt(f.get("roc_auc")), fmt(f.get("coverage_0")), fmt(f.get("coverage_1"))]

    @property
    def label(self) -> str:
        """The figure's name for the row."""
        return f"{self.name}: {self.model}, {self.setting}" if self.model else self.name


@dataclass
class Headline:
    """The headline's rows, its table and the paragraphs under its figure."""

    lines: list[Line]
    table: Table
    notes: list[str]

    def markdown(self, title: str) -> str:
        """The table and its notes as Markdown (a Prefect artifact)."""
        return to_markdown(Document(title, [self.table, *map(Para, self.notes)]))

    def records(self) -> list[dict[str, str]]:
        """The rows as plain cells, one mapping per row (a Prefect table artifact)."""
        return [dict(zip(HEADER, [ln.dataset, ln.name, ln.model or "—", ln.setting or "—", ln.k,
                                  *ln.numbers()])) for ln in self.lines]


def recommended() -> Recommended:
    """What params.yaml (``$CHECKWORTHY_PARAMS``) recommends (``predict:``)."""
    return Recommended.of(load_settings().predict)


def headline(doc: Document, groups: Sequence[Group], metrics: Mapping[int, Mapping],
             comparisons: Mapping[int, Mapping[tuple, Any]], rec: Recommended, figures: dict,
             out_metrics: dict) -> Headline:
    """Add the headline (table, figure, notes) to ``doc``; return it.

    ``comparisons``: per run id, the pinned comparison's rows keyed (family, method, k, metric,
    class). ``out_metrics`` (metrics.json) gets the headline's figures under ``headline``.
    """
    lines: list[Line] = []
    notes = [_legend(rec)]
    for target in dict.fromkeys(g.run0["target"] for g in groups):
        got, said = _target_lines(target, [g for g in groups if g.run0["target"] == target], metrics,
                                  comparisons, rec)
        lines += got
        notes += said
    notes += [twin_note(g) for g in groups if g.twins]
    table = Table(HEADER, [ln.cells() for ln in lines], name="headline")
    doc.add(table)
    if lines:
        figures[FIGURE] = _figure(lines)
        doc.add(Image(FIGURE, "Positive-class F1 (check-worthy) per method and dataset",
                      name="headline-figure"))
    doc.add(*map(Para, notes))
    out_metrics["headline"] = {ln.dataset: {} for ln in lines}
    for ln in lines:
        out_metrics["headline"][ln.dataset][slug(ln.label)] = {
            name: None if missing(v) else v for name, v in ln.figures.items()}
    return Headline(lines, table, notes)


def _legend(rec: Recommended) -> str:
    return (f"**Recommended** (params.yaml {code('predict:')}): {method_words(rec)}, on "
            f"{esc(rec.model)}'s {SCORE_WORDS.get(rec.score_kind, rec.score_kind)} with up to k = {rec.k} "
            "neighbours; its figures are the stored method comparison's. **NN-PPI**: the paper's correction "
            "and interval. **Raw score**: the model's score at the threshold. **kNN label mean**: the share "
            "of check-worthy claims among the k nearest labelled ones. Figures on each dataset's test "
            "claims; coverage: the share of claims of each gold class whose interval holds their label "
            "(nominal 95%); ROC AUC: how well the value ranks the claims, whatever the threshold; paper "
            "wF1: Amatya et al. 2026 for the same model and score, where it reports one.")


def method_words(rec: Recommended) -> str:
    """The recommended correction and interval in words."""
    return (f"{CORRECTION_WORDS.get(rec.correction, rec.correction)} and the "
            f"{INTERVAL_WORDS.get(rec.interval, rec.interval)} interval")


def _family(spec: str) -> str:
    """A model spec's paper name (e.g. Gemma 3 270M through any backend), else the spec."""
    return paper_figures.paper_model_name(spec) or spec


def _paper_temperature(spec: str) -> float | None:
    """The paper's sampling temperature for a Gemma 3 size, if the model is one."""
    fam = paper_figures.paper_model_name(spec) or ""
    sampling = PAPER_SAMPLING.get(fam.removeprefix("gemma3-")) if fam.startswith("gemma3-") else None
    return sampling.temperature if sampling else None


def _target_lines(target: str, groups: Sequence[Group], metrics: Mapping[int, Mapping],
                  comparisons: Mapping[int, Mapping[tuple, Any]],
                  rec: Recommended) -> tuple[list[Line], list[str]]:
    """The headline rows of one target's groups, and what to say about them.

    The recommended method, NN-PPI and the raw score on the recommended model's score; NN-PPI and
    the raw score again on the paper's (a model of the paper, verbalised, at the paper's
    temperature), when that is a different run; the kNN label mean once. k is the recommended k, or
    the largest there is.
    """
    dataset = target.removesuffix(":test")
    notes: list[str] = []
    own_model = [g for g in groups if _family(g.run0["model_spec"]) == _family(rec.model)]
    if not own_model:
        own_model = list(groups)
        notes.append(f"{esc(dataset)}: the recommended model {code(rec.model)} has no run here; the rows "
                     f"show {code(own_model[0].run0['model_spec'])} instead.")
    k = rec.k if any(g.run_at(rec.k) for g in own_model) else max(r["k"] for g in own_model for r in g.runs)
    at_k = [g for g in own_model if g.run_at(k)]
    own = next((g for g in at_k if g.run0["score_kind"] == rec.score_kind), at_k[0])
    paper = _paper_group(groups, k, own)
    line, said = _recommended_line(dataset, own, k, comparisons, rec)
    notes += said
    scored = [g for g in (paper, own) if g is not None]
    return [line, *[_stored_line(dataset, g, k, method, metrics, comparisons)
                    for method in ("nnppi", "baseline") for g in scored],
            _stored_line(dataset, paper or own, k, "knn", metrics, comparisons)], notes


def _paper_group(groups: Sequence[Group], k: int, own: Group) -> Group | None:
    """The run group in the paper's setting (a model of the paper, verbalised score, the paper's
    temperature; the recommended model's family first), unless that is ``own``."""
    if own.run0["score_kind"] == "verbalised" and paper_figures.paper_model_name(own.run0["model_spec"]):
        return None
    candidates = [g for g in groups if g.run_at(k) and g.run0["score_kind"] == "verbalised"
                  and paper_figures.paper_model_name(g.run0["model_spec"])]
    candidates.sort(key=lambda g: (_family(g.run0["model_spec"]) != _family(own.run0["model_spec"]),
                                   g.params.get("temperature") != _paper_temperature(g.run0["model_spec"])))
    return candidates[0] if candidates else None


def _compared(g: Group, k: int, comparisons: Mapping[int, Mapping[tuple, Any]]) -> tuple[dict, Mapping]:
    """The group's run at k (or a twin's: the same figures) whose comparison is pinned, and its rows
    (none pinned: the group's own run and no rows)."""
    runs = g.runs_at(k)
    return next(((r, comparisons[r["id"]]) for r in runs if comparisons.get(r["id"])), (runs[0], {}))


def _recommended_line(dataset: str, g: Group, k: int, comparisons: Mapping[int, Mapping[tuple, Any]],
                      rec: Recommended) -> tuple[Line, list[str]]:
    """The recommended method's row, from the comparison of the group's run at k."""
    run, idx = _compared(g, k, comparisons)
    empty = Line(dataset, "recommended", "recommended", run["model_spec"], g.setting, str(k), {})
    if rec.correction not in COMPARED:
        return empty, [f"{esc(dataset)}: the method comparison does not compute the correction "
                       f"{code(rec.correction)}."]
    decisions, intervals = COMPARED[rec.correction]
    chosen = sorted((m, kk) for f, m, kk, metric, _ in idx if f == decisions and metric == "weighted_f1")
    if not chosen:
        return empty, [f"{esc(dataset)}: no method comparison is stored for run {run['id']}, so the "
                       f"recommended row is empty ({code('compare: true')} in params.yaml computes it)."]
    method, kk = chosen[0]
    figures = {"f1_1": idx.get((decisions, method, kk, "f1", "1")),
               "weighted_f1": idx.get((decisions, method, kk, "weighted_f1", "all")),
               "roc_auc": idx.get((decisions, method, kk, "roc_auc", "all")),
               "coverage_0": idx.get((intervals, rec.interval, kk, "coverage", "0")),
               "coverage_1": idx.get((intervals, rec.interval, kk, "coverage", "1"))}
    return replace(empty, figures=figures), [
        f"{esc(dataset)}: on run {run['id']}, cross-validation on L chose {code(method)} at k = {kk} "
        f"(of up to {k} neighbours); the {code(rec.interval)} interval is centred on that choice."]


def _stored_line(dataset: str, g: Group, k: int, method: str, metrics: Mapping[int, Mapping],
                 comparisons: Mapping[int, Mapping[tuple, Any]]) -> Line:
    """NN-PPI or a baseline on the group's run at k: its stored metrics, the ROC AUC of its comparison."""
    run, idx = _compared(g, k, comparisons)
    m = metrics[run["id"]]
    figures = {"f1_1": m.get((method, "f1", "1")), "weighted_f1": m.get((method, "weighted_f1", "all")),
               "roc_auc": idx.get(("correction", _CORRECTION_ROW[method], k, "roc_auc", "all"))}
    if method == "nnppi":
        figures |= {f"coverage_{c}": m.get(("nnppi", "coverage", c)) for c in ("0", "1")}
    threshold = f"{run['threshold']:g}"
    name = {"nnppi": f"NN-PPI, {run['interval_method']} interval",
            "baseline": f"raw score ≥ {threshold}", "knn": f"kNN label mean ≥ {threshold}"}[method]
    paper: dict[str, float | None] = {}
    if g.run0["score_kind"] == "verbalised" or method == "knn":  # the paper's LLM figures are verbalised
        wf1 = paper_figures.weighted_f1(run["dataset"], run["model_spec"], k)
        cls = paper_figures.class_f1(run["dataset"], run["model_spec"], method, k)
        paper = {"weighted_f1": wf1[("baseline", "knn", "nnppi").index(method)] if wf1 else None,
                 "f1_1": cls[1] if cls else None}
    return Line(dataset, method, name, "" if method == "knn" else run["model_spec"],
                "" if method == "knn" else g.setting, "—" if method == "baseline" else str(k), figures, paper)


def _figure(lines: Sequence[Line]) -> Any:
    """A drawing function for the bars of positive-class F1, one row per method and score, one bar
    per dataset, the paper's figure as a diamond (drawn when the report is written)."""
    datasets = list(dict.fromkeys(ln.dataset for ln in lines))
    labels = list(dict.fromkeys(ln.label for ln in lines))
    by = {(ln.label, ln.dataset): ln for ln in lines}
    values: list[list[float | None]] = [[None] * len(datasets) for _ in labels]
    marks = []
    for (label, dataset), ln in by.items():
        i, j = labels.index(label), datasets.index(dataset)
        values[i][j] = None if missing(ln.figures.get("f1_1")) else ln.figures["f1_1"]
        if not missing(ln.paper.get("f1_1")):
            marks.append((i, j, float(ln.paper["f1_1"])))
    return lambda: plots.grouped_bars("Positive-class F1 (check-worthy) on each dataset's test claims",
                                      labels, datasets, values, "F1 (check-worthy)", sorted(marks))
