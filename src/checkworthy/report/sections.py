"""The report's tables of stored runs and their metrics: the summary, the data beside the paper's
splits, and for each group of runs its inputs and the per-run tables (weighted F1, class figures,
baseline statistics, interval coverage, decision accuracy), each beside the paper's figure.

Functions add blocks to a :class:`~checkworthy.report.document.Document`; they read stored rows
only, already loaded (:mod:`checkworthy.report.render`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from checkworthy.report import paper_figures
from checkworthy.report.document import Document, Heading, Para, Table, code, esc
from checkworthy.report.formatting import METHODS, diff, fmt, missing, ts
from checkworthy.report.run_groups import Group, twin_note
from checkworthy.store.run_spec import RunRecord

INTRODUCTION = (
    "Every calibration run in this report, evaluated completely: the raw model score "
    "(**Baseline**), the mean label of the k nearest labelled claims (**KNN**) and **NN-PPI** "
    "(theta = score + mean neighbour residual), each deciding check-worthy iff its value >= the "
    "threshold. Where the paper (Amatya et al. 2026) reports a counterpart, its figure stands next "
    "to ours with the difference Δ = ours − paper. The paper's LLM figures are for verbalised "
    "confidence scores of its own runs; other score kinds and our data splits differ from them.")


def _m(metrics: Mapping[tuple[str, str, str], float], method: str, metric: str,
       cls: str = "all") -> float | None:
    return metrics.get((method, metric, cls))


def summary(doc: Document, groups: Sequence[Group], metrics: Mapping[int, Mapping]) -> None:
    """The introduction and the weighted F1 of every run beside the paper's NN-PPI figure; runs with
    twins (:func:`~checkworthy.report.run_groups.group_runs`) share a row."""
    doc.add(Heading(2, "Summary"))
    doc.add(Para(INTRODUCTION))
    rows = []
    for g in groups:
        for i, r in enumerate(g.runs):
            m = metrics[r["id"]]
            paper = paper_figures.weighted_f1(r["dataset"], r["model_spec"], r["k"])
            rows.append([esc(r["dataset"]), code(r["model_spec"]), esc(g.setting), str(r["k"]), g.run_ids(i),
                         *[fmt(_m(m, meth, "weighted_f1")) for meth, _ in METHODS],
                         fmt(paper[2] if paper else None), diff(_m(m, "nnppi", "weighted_f1"),
                                                                paper[2] if paper else None),
                         fmt(_m(m, "nnppi", "coverage"))])
    doc.add(Table(["dataset", "model", "score", "k", "run", "Baseline wF1", "KNN wF1", "NN-PPI wF1",
                   "paper NN-PPI", "Δ", "coverage"], rows,
                  caption="Weighted F1 of each run (details per group below)."))
    doc.add(*[Para(twin_note(g)) for g in groups if g.twins])


def data_beside_paper(doc: Document, groups: Sequence[Group], metrics: Mapping[int, Mapping]) -> None:
    """The test claims, their gold classes and |L| of each target and label set, beside the paper's splits."""
    seen: dict[tuple, list[str]] = {}
    for g in groups:
        r = g.run0
        m = metrics[r["id"]]
        n, rate = _m(m, "nnppi", "n"), _m(m, "baseline", "gold_positive_rate")
        if missing(n) or missing(rate):
            continue
        pos = round(n * rate)
        key = (r["target"], r["label_set_id"], int(n))
        if key in seen:
            continue
        p = paper_figures.SPLITS.get(r["dataset"], {})

        def cell(ours: float, name: str, p: Mapping[str, int] = p) -> list[str]:
            theirs = p.get(name)
            return [str(int(ours)), "—" if theirs is None else str(theirs),
                    "—" if theirs is None else f"{int(ours) - theirs:+d}"]

        seen[key] = [esc(r["target"]), esc(r["label_set_name"]), *cell(n, "test_rows"),
                     *cell(pos, "test_positive"), *cell(n - pos, "test_negative"),
                     *cell(r["n_items"], "calibration"),
                     fmt(rate), fmt(paper_figures.GOLD_POSITIVE_RATE.get(r["dataset"])),
                     diff(rate, paper_figures.GOLD_POSITIVE_RATE.get(r["dataset"]))]
    doc.add(Heading(2, "Data beside the paper"))
    doc.add(Table(
        ["target", "label set", "test claims", "paper", "Δ", "check-worthy", "paper", "Δ", "not",
         "paper", "Δ", "|L|", "paper", "Δ", "gold positive rate", "paper", "Δ"],
        list(seen.values()),
        caption="Test claims calibrated (with a valid score), their gold classes, and the calibration "
                "set size, next to the paper's splits."))


def run_tables(doc: Document, g: Group, metrics: Mapping[int, Mapping], analyses: Mapping,
               score_params: Mapping[int, dict]) -> None:
    """A group's heading, its inputs, and the tables of its runs' stored metrics."""
    doc.add(Heading(2, esc(g.title)))
    doc.add(Heading(3, "Inputs"), _inputs(g, analyses, score_params))
    _weighted_f1_table(doc, g, metrics)
    _class_table(doc, g, metrics)
    _baseline_table(doc, g, metrics)
    _coverage_table(doc, g, metrics)
    _accuracy_table(doc, g, metrics)


def _inputs(g: Group, analyses: Mapping, score_params: Mapping[int, dict]) -> Table:
    """Everything the group's runs and analyses were computed from, and by which code and flow run."""
    r = g.run0
    sp = score_params[r["id"]]
    runs = "; ".join(f"k={x['k']}: run {x['id']} ({x['status']}, started {ts(x['started_at'])}, "
                     f"finished {ts(x['finished_at'])})" for x in g.runs)
    record = RunRecord.of(r)
    code_revs = sorted({x["code_rev"] or "unknown" for x in g.runs})
    flows = sorted({x["flow_run_id"] or "—" for x in g.runs})
    ana = [a for a in analyses.values() if a.group_key == g.key or a.run_id in {x["id"] for x in g.runs}]
    ana_revs = sorted({a.code_rev or "unknown" for a in ana})
    ana_flows = sorted({a.flow_run_id or "—" for a in ana})
    rows = [
        ["target claims", f"{code(r['target'])}: {r['n_results']} calibrated, "
                          f"{record.n_without_score or 0} without a valid score; claim-set sha256 "
                          f"{code(r['claims_hash'])}"],
        ["dataset version (DVC md5)",
         f"{code(r['dvc_hash'] or '—')} at git {code(r['data_git_rev'] or '—')}"],
        ["label set", f"{code(r['label_set_name'])} (id {r['label_set_id']}, {r['n_items']} claims, "
                      f"{r['n_positive']} check-worthy), fingerprint {code(r['label_set_fingerprint'])}"
                      f"{r['lineage']}"],
        ["model", f"{code(r['model_spec'])} ({esc(r['model_kind'])})"
                  + (f", details {code(json.dumps(r['model_details'], sort_keys=True))}"
                     if r["model_details"] else "")],
        ["prompt version",
         f"{code(r['prompt_version'])} (template {code(r['prompt_template_version'] or '—')})"],
        ["score", f"kind {code(r['score_kind'])}, parameters hash {code(r['params_hash'])}"],
        ["generation parameters", "; ".join(f"{esc(k)} = {code(json.dumps(v, sort_keys=True))}"
                                            for k, v in sorted(sp.items())) or "—"],
        ["calibration", f"embedding {code(r['embed_model'])}, alpha {r['alpha']}, threshold "
                        f"{r['threshold']}, interval {code(r['interval_method'])}"],
        ["runs", runs],
        ["code revision (runs)", ", ".join(code(c) for c in code_revs)],
        ["flow run (runs)", ", ".join(code(f) for f in flows)],
        ["code revision (analyses)", ", ".join(code(c) for c in ana_revs) or "—"],
        ["flow run (analyses)", ", ".join(code(f) for f in ana_flows) or "—"],
    ]
    return Table(["input", "value"], rows)


def _weighted_f1_table(doc: Document, g: Group, metrics: Mapping[int, Mapping]) -> None:
    """Weighted F1 of each run and method beside the paper's."""
    ds, spec = g.run0["dataset"], g.run0["model_spec"]
    rows = []
    for r in g.runs:
        paper = paper_figures.weighted_f1(ds, spec, r["k"])
        for i, (meth, label) in enumerate(METHODS):
            ours = _m(metrics[r["id"]], meth, "weighted_f1")
            p = paper[i] if paper else None
            rows.append([str(r["k"]), label, fmt(ours), fmt(p), diff(ours, p)])
    pm = paper_figures.paper_model_name(spec)
    doc.add(Heading(3, "Weighted F1 beside the paper"), Table(
        ["k", "method", "weighted F1", "paper", "Δ"], rows,
        caption=f"Paper row: {code(pm)}." if pm else "The paper has no row for this model (—)."))


def _class_table(doc: Document, g: Group, metrics: Mapping[int, Mapping]) -> None:
    """Precision, recall and F1 per class (and the paper's class F1 where it has one)."""
    ds, spec = g.run0["dataset"], g.run0["model_spec"]
    rows = []
    any_paper = False
    for r in g.runs:
        m = metrics[r["id"]]
        for meth, label in METHODS:
            pc = paper_figures.class_f1(ds, spec, meth, r["k"])
            any_paper |= pc is not None
            cells = [str(r["k"]), label]
            for cls in ("0", "1"):
                cells += [fmt(_m(m, meth, "precision", cls)), fmt(_m(m, meth, "recall", cls)),
                          fmt(_m(m, meth, "f1", cls))]
            cells += [fmt(_m(m, meth, "predicted_positive_rate"))]
            for j, cls in enumerate(("0", "1")):
                p = pc[j] if pc else None
                cells += [fmt(p), diff(_m(m, meth, "f1", cls), p)]
            rows.append(cells)
    header = ["k", "method", "P (0)", "R (0)", "F1 (0)", "P (1)", "R (1)", "F1 (1)",
              "predicted positive rate", "paper F1 (0)", "Δ", "paper F1 (1)", "Δ"]
    if not any_paper:
        header, rows = header[:9], [row[:9] for row in rows]
    doc.add(Heading(3, "Precision, recall and F1 per class"), Table(
        header, rows, caption="Class 0 = not check-worthy, class 1 = check-worthy."
        + (" The paper gives class F1 for Gemma 3 270M only (baseline; NN-PPI at one k)."
           if any_paper else "")))


def _baseline_table(doc: Document, g: Group, metrics: Mapping[int, Mapping]) -> None:
    """The raw score's statistics, independent of k, beside the paper's."""
    r0 = g.run0
    ds, spec = r0["dataset"], r0["model_spec"]
    m = metrics[r0["id"]]
    stats = [("gold positive rate", "baseline", "gold_positive_rate", "all", "gold_positive_rate"),
             ("predicted positive rate (raw score >= threshold)", "baseline", "predicted_positive_rate",
              "all", "predicted_positive_rate"),
             ("mean raw score on gold negatives", "baseline", "mean_score", "0", "mean_score_0"),
             ("mean raw score on gold positives", "baseline", "mean_score", "1", "mean_score_1")]
    rows = []
    for label, meth, met, cls, pname in stats:
        ours, p = _m(m, meth, met, cls), paper_figures.baseline_stat(ds, spec, pname)
        rows.append([label, fmt(ours), fmt(p), diff(ours, p)])
    doc.add(Heading(3, "Baseline statistics"), Table(
        ["statistic", "ours", "paper", "Δ"], rows,
        caption="The raw score alone (independent of k). The paper reports these for Gemma 3 1B and 4B "
                "and the test split's gold rate."))


def _coverage_table(doc: Document, g: Group, metrics: Mapping[int, Mapping]) -> None:
    """NN-PPI interval coverage per class and width, beside the paper's coverage."""
    r0 = g.run0
    rows = []
    for r in g.runs:
        mm = metrics[r["id"]]
        pc = paper_figures.coverage(r0["dataset"], r["k"])
        cells = [str(r["k"]), fmt(1 - r["alpha"])]
        for j, cls in enumerate(("0", "1", "all")):
            p = pc[j] if pc else None
            ours = _m(mm, "nnppi", "coverage", cls)
            cells += [fmt(ours), fmt(p), diff(ours, p)]
        cells += [fmt(_m(mm, "nnppi", "mean_width", "0")), fmt(_m(mm, "nnppi", "mean_width", "1")),
                  fmt(_m(mm, "nnppi", "mean_width")), str(int(_m(mm, "nnppi", "n") or 0))]
        rows.append(cells)
    doc.add(Heading(3, "Interval coverage and width"), Table(
        ["k", "nominal", "class 0", "paper", "Δ", "class 1", "paper", "Δ", "overall", "paper", "Δ",
         "width (0)", "width (1)", "mean width", "n"], rows,
        caption=f"Share of claims whose gold label lies inside the NN-PPI interval "
                f"({code(r0['interval_method'])}). The paper's coverage is averaged over its models."))


def _accuracy_table(doc: Document, g: Group, metrics: Mapping[int, Mapping]) -> None:
    """Decision accuracy of each method, and NN-PPI's against the paper's range."""
    lo, hi = paper_figures.DECISION_ACCURACY_RANGE
    rows = []
    for r in g.runs:
        mm = metrics[r["id"]]
        acc = _m(mm, "nnppi", "accuracy")
        where = ("—" if missing(acc) else
                 "within" if lo <= acc <= hi else "below" if acc < lo else "above")
        rows.append([str(r["k"]), *[fmt(_m(mm, meth, "accuracy")) for meth, _ in METHODS],
                     f"{fmt(lo)}–{fmt(hi)}", where])
    doc.add(Heading(3, "Decision accuracy"), Table(
        ["k", "Baseline", "KNN", "NN-PPI", "paper (NN-PPI range)", "NN-PPI vs range"], rows,
        caption="Share of decisions on the right side of the threshold."))
