"""The report's diagnostic sections for a group of runs: reliability and score distributions,
and the failure modes (what NN-PPI fixed and broke, claim by claim) with examples."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checkworthy.method import failure_modes
from checkworthy.report import paper_figures, plots
from checkworthy.report.analyses import StoredAnalysis, Where
from checkworthy.report.document import Document, Heading, Image, Para, Table, code, esc
from checkworthy.report.formatting import METHODS, diff, fmt, short
from checkworthy.report.run_groups import Group


def reliability_section(doc: Document, g: Group, analyses: Mapping, figures: dict) -> None:
    """Reliability of raw score, KNN mean and NN-PPI theta (ECE, figure), and histograms by gold class."""
    doc.add(Heading(3, "Reliability and score distributions"))
    rel = [(r, analyses.get((r["id"], "reliability"))) for r in g.runs]
    hist = [(r, analyses.get((r["id"], "histogram"))) for r in g.runs]
    if not any(a for _, a in rel):
        doc.add(Para("Not computed for these runs."))
        return
    rows, panels = [], []
    for r, a in rel:
        if a is None:
            continue
        rows.append([str(r["k"]), *[fmt(a.value(meth, "ece")) for meth, _ in METHODS]])
        pts = {}
        for meth, _ in METHODS:
            at = [Where(bin=b) for b in range(a.params["n_bins"])]
            pts[meth] = [(a.value(meth, "mean_value", where=w), a.value(meth, "positive_rate", where=w),
                          int(a.value(meth, "count", where=w) or 0))
                         for w in at if (a.value(meth, "count", where=w) or 0) > 0]
        panels.append((f"k={r['k']}", pts))
    path = f"figures/{g.slug}--reliability.png"
    figures[path] = lambda: plots.reliability(f"{g.title}: reliability", panels)
    doc.add(Image(path, f"Reliability of raw score, KNN mean and NN-PPI theta, {g.title}"), Table(
        ["k", "ECE raw score", "ECE KNN mean", "ECE NN-PPI theta"], rows,
        caption="Expected calibration error over equal-width bins on [0, 1] (values outside [0, 1] fall in "
                "the end bins): the weighted mean gap between a bin's mean value and its observed "
                "check-worthy rate. The raw score does not depend on k."))
    hpanels = []
    for i, (r, a) in enumerate(hist):
        if a is None:
            continue
        edges = a.params["edges"]
        n_bins = len(edges["baseline"]) - 1
        if i == 0:
            hpanels.append(("raw score", edges["baseline"], {
                c: [a.value("baseline", "count", c, Where(bin=b)) or 0 for b in range(n_bins)]
                for c in ("0", "1")}))
        hpanels.append((f"NN-PPI theta, k={r['k']}", edges["nnppi"], {
            c: [a.value("nnppi", "count", c, Where(bin=b)) or 0 for b in range(len(edges["nnppi"]) - 1)]
            for c in ("0", "1")}))
    if hpanels:
        hpath = f"figures/{g.slug}--histograms.png"
        threshold = g.run0["threshold"]
        figures[hpath] = lambda: plots.histograms(f"{g.title}: scores by gold class", hpanels, threshold)
        doc.add(Image(hpath, f"Raw score and NN-PPI theta by gold class, {g.title}"))


CATEGORY_TITLES = {
    "fixed_fp": "Fixed false positives (raw score said check-worthy, gold no, NN-PPI no)",
    "fixed_fn": "Fixed false negatives (raw score said no, gold check-worthy, NN-PPI yes)",
    "persistent": "Persistent errors (wrong before and after)",
    "regression": "Regressions (raw score right, NN-PPI wrong)",
}


def failure_section(doc: Document, g: Group, analyses: Mapping) -> None:
    """How many claims NN-PPI fixed and broke per run, with the clearest examples and their neighbours."""
    doc.add(Heading(3, "Failure modes"))
    fm = [(r, analyses.get((r["id"], "failure_modes"))) for r in g.runs]
    if not any(a for _, a in fm):
        doc.add(Para("Not computed for these runs."))
        return
    rows = []
    for r, a in fm:
        if a is None:
            continue

        def n(cat: str, cls: str = "all", a: StoredAnalysis = a) -> int:
            return int(a.value("nnppi", "n_claims", cls, Where(variant=cat)) or 0)

        rows.append([str(r["k"]), str(n("fixed_fp")), str(n("fixed_fn")),
                     f"{n('persistent')} ({n('persistent', '0')} / {n('persistent', '1')})",
                     f"{n('regression')} ({n('regression', '0')} / {n('regression', '1')})",
                     str(n("correct")), f"{n('fixed_fp') + n('fixed_fn') - n('regression'):+d}"])
    ds, model, k = paper_figures.FAILURE_MODES_SETTING
    doc.add(Table(["k", "fixed FP", "fixed FN", "persistent (gold 0 / 1)", "regressions (gold 0 / 1)",
                   "right both times", "net (fixed − regressions)"], rows,
                  caption=f"Decisions of the raw score against NN-PPI, claim by claim. The paper shows "
                          f"examples of these four modes (for {model} on {ds} at k={k}) without counts."))
    for r, a in fm:
        if a is None or not a.examples:
            continue
        doc.add(Heading(4, f"Examples at k={r['k']} (run {r['id']})"))
        for cat in failure_modes.CATEGORIES:
            ex = [e for e in a.examples if e["category"] == cat]
            if not ex:
                continue
            doc.add(Para(f"**{CATEGORY_TITLES[cat]}**"))
            for e in ex:
                _example(doc, e, r["k"])


def _example(doc: Document, e: Mapping[str, Any], k: int) -> None:
    """One failure example: the claim, its move from score to theta, and the neighbours behind it."""
    move = e["theta"] - e["score"]
    doc.add(Para(
        f"{code(e['source_id'])} “{esc(short(e['text'], 300))}” — gold {e['gold']}, raw score "
        f"{fmt(e['score'])} → theta {fmt(e['theta'])} (move {move:+.3f}; interval [{fmt(e['ci_low'])}, "
        f"{fmt(e['ci_high'])}]; KNN mean {fmt(e['knn_mean'])}). Decision {e['baseline_decision']} → "
        f"{e['nnppi_decision']}."))
    nbrs = list(e["neighbours"])
    shown = nbrs
    note = "All neighbours, nearest first."
    if len(nbrs) > 5:  # keep the five that pushed theta furthest in the direction it moved
        sign = 1 if move >= 0 else -1
        shown = sorted(sorted(nbrs, key=lambda x: (-sign * x["contribution"], x["rank"]))[:5],
                       key=lambda x: x["rank"])
        note = f"The 5 of {len(nbrs)} neighbours that moved theta most in its direction, nearest first."
    doc.add(Table(["#", "distance", "label", "score", "residual", "share of move", "neighbour"],
                  [[str(x["rank"]), fmt(x["distance"]), str(x["label"]), fmt(x["score"]),
                    diff(x["residual"], 0), diff(x["contribution"], 0),
                    f"{code(x['source_id'])} {esc(short(x['text'], 160))}"]
                   for x in shown], caption=note))
