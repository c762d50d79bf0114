"""The report's ablation sections for a group of runs: the number of neighbours k, the
calibration-set size |L| and the sampling temperature, each from a stored analysis
(:mod:`checkworthy.runs.analyses`) and beside the paper's finding."""

from __future__ import annotations

from collections.abc import Mapping

from checkworthy.report import paper_figures, plots
from checkworthy.report.analyses import Where
from checkworthy.report.document import Document, Heading, Image, Para, Table
from checkworthy.report.formatting import METHODS, csv_text, diff, fmt, missing
from checkworthy.report.run_groups import Group


def k_sweep_section(doc: Document, g: Group, metrics: Mapping, analyses: Mapping, figures: dict,
                     plot_files: dict) -> None:
    """Weighted F1 against k (figure, table, CSV), each k checked against the run stored for it."""
    r0 = g.run0
    doc.add(Heading(3, "Ablation: number of neighbours k"))
    a = analyses.get((g.key, "k_sweep"))
    if a is None:
        doc.add(Para("Not computed for these runs (no stored k-sweep analysis)."))
        return
    stored = {r["k"]: metrics[r["id"]] for r in g.runs}
    rows, series = [], {meth: [] for meth, _ in METHODS}
    csv_rows = []
    for k in a.params["ks"]:
        vals = {meth: a.value(meth, "weighted_f1", where=Where(k=k)) for meth, _ in METHODS}
        if all(missing(v) for v in vals.values()):
            continue
        for meth in vals:
            if not missing(vals[meth]):
                series[meth].append((k, vals[meth]))
        paper = paper_figures.weighted_f1(r0["dataset"], r0["model_spec"], k)
        same = "—"
        if k in stored:
            same = "yes" if all(
                not missing(vals[meth]) and not missing(stored[k].get((meth, "weighted_f1", "all")))
                and abs(stored[k][(meth, "weighted_f1", "all")] - vals[meth]) < 1e-9
                for meth, _ in METHODS) else "no"
        at = Where(k=k)
        rows.append([str(k), *[fmt(vals[meth]) for meth, _ in METHODS],
                     fmt(a.value("nnppi", "f1", "0", at)), fmt(a.value("nnppi", "f1", "1", at)),
                     fmt(a.value("nnppi", "coverage", where=at)),
                     fmt(a.value("nnppi", "mean_width", where=at)),
                     fmt(paper[2] if paper else None), diff(vals["nnppi"], paper[2] if paper else None),
                     same])
        csv_rows.append([k, *[vals[meth] for meth, _ in METHODS]])
    path = f"figures/{g.slug}--f1_vs_k.png"
    paper_pts = {meth: [(k, p[i]) for k in (3, 5, 10)
                        if (p := paper_figures.weighted_f1(r0["dataset"], r0["model_spec"], k))]
                 for i, (meth, _) in enumerate(METHODS)}
    figures[path] = lambda: plots.f1_vs_k(f"{g.title}: weighted F1 vs k", series, paper_pts)
    plot_files[f"plots/f1_vs_k/{g.slug}.csv"] = csv_text(["k", "baseline", "knn", "nnppi"], csv_rows)
    info = a.params.get("info", {})
    doc.add(Image(path, f"Weighted F1 against k, {g.title}"), Table(
        ["k", "Baseline", "KNN", "NN-PPI", "NN-PPI F1 (0)", "NN-PPI F1 (1)", "coverage", "mean width",
         "paper NN-PPI", "Δ", "= stored run"], rows,
        caption=f"k beyond {{3, 5, 10}}: each target's {a.params['k_big']} nearest labelled claims "
                f"(pool of {info.get('n_pool', '—')}) from one SQL kNN call, cut at k. "
                "'= stored run': the sweep reproduces the run stored for that k."))


def size_section(doc: Document, g: Group, analyses: Mapping, figures: dict, plot_files: dict) -> None:
    """NN-PPI weighted F1 against the calibration-set size |L| (mean ± sd over seeds)."""
    doc.add(Heading(3, "Ablation: calibration-set size |L|"))
    a = analyses.get((g.key, "label_set_size"))
    if a is None:
        doc.add(Para("Not computed for these runs (no stored |L| analysis)."))
        return
    info = a.params.get("info", {})
    sizes, ks = info.get("sizes", a.params["sizes"]), a.params["ks"]
    rows, series, csv_rows = [], {k: [] for k in ks}, []
    for n in sizes:
        cells, means, sds = [str(n)], [], []
        for k in ks:
            mean = a.value("nnppi", "weighted_f1", where=Where(k=k, n_labelled=n, statistic="mean"))
            sd = a.value("nnppi", "weighted_f1", where=Where(k=k, n_labelled=n, statistic="sd"))
            knn = a.value("knn", "weighted_f1", where=Where(k=k, n_labelled=n, statistic="mean"))
            cells += ["—" if missing(mean) else f"{fmt(mean)} ± {fmt(sd)}", fmt(knn)]
            means.append(mean)
            sds.append(sd)
            if not missing(mean):
                series[k].append((n, mean, sd or 0.0))
        rows.append(cells)
        csv_rows.append([n, *means, *sds])
    path = f"figures/{g.slug}--f1_vs_L.png"
    figures[path] = lambda: plots.f1_vs_size(f"{g.title}: NN-PPI weighted F1 vs |L|", series)
    plot_files[f"plots/f1_vs_L/{g.slug}.csv"] = csv_text(
        ["n_labelled", *[f"k{k}" for k in ks], *[f"k{k}_sd" for k in ks]], csv_rows)
    header = ["|L|"]
    for k in ks:
        header += [f"NN-PPI k={k} (mean ± sd)", f"KNN k={k}"]
    doc.add(Image(path, f"NN-PPI weighted F1 against |L|, {g.title}"), Table(
        header, rows,
        caption=f"Class-stratified nested subsamples of the labelled pool ({info.get('n_pool', '—')} "
                f"claims), seeds {', '.join(map(str, a.params['seeds']))}; neighbours re-ranked within each "
                f"subsample (exact: {info.get('n_fallback', 0)} target lists needed the SQL fallback). "
                f"Beside the paper: {paper_figures.LABEL_SET_SIZE_FINDING}."
                + (" Our pool is smaller than the paper's largest |L|, so larger sizes cannot be measured."
                   if info.get("n_pool", 0) < 4500 else "")))


def temperature_section(doc: Document, g: Group, analyses: Mapping) -> None:
    """The runs' figures beside stored runs whose scores differ only in sampling temperature."""
    doc.add(Heading(3, "Ablation: temperature"))
    rows, notes = [], set()
    for r in g.runs:
        a = analyses.get((r["id"], "temperature"))
        if a is None:
            notes.add("not computed")
            continue
        sib = a.params.get("siblings", {})
        if not sib.get("applicable"):
            notes.add("not applicable")
            continue
        own = sib["own"]
        base = a.value("nnppi", "weighted_f1", where=Where(variant=own, k=r["k"]))
        for label, rid in sib["runs"].items():
            at = Where(variant=label, k=r["k"])
            v = {meth: a.value(meth, "weighted_f1", where=at) for meth, _ in METHODS}
            rows.append([str(r["k"]), label + (" (this run)" if label == own else ""), str(rid),
                         *[fmt(v[meth]) for meth, _ in METHODS],
                         fmt(a.value("nnppi", "f1", "0", at)),
                         fmt(a.value("nnppi", "f1", "1", at)),
                         fmt(a.value("baseline", "predicted_positive_rate", where=at)),
                         fmt(a.value("nnppi", "coverage", where=at)),
                         diff(v["nnppi"], base)])
    if rows:
        doc.add(Table(["k", "temperature", "run", "Baseline wF1", "KNN wF1", "NN-PPI wF1", "NN-PPI F1 (0)",
                       "NN-PPI F1 (1)", "raw predicted positive rate", "coverage", "Δ NN-PPI vs this run"],
                      rows,
                      caption="Stored runs that differ from these only in the sampling temperature of the "
                              f"scores. Beside the paper: {paper_figures.TEMPERATURE_FINDING}."))
        if all(len(analyses[(r["id"], "temperature")].params["siblings"]["runs"]) < 2 for r in g.runs
               if (r["id"], "temperature") in analyses):
            doc.add(Para("No run at another temperature is stored for these scores: score the claims "
                         "again with, e.g., `temperature: 0.1` for this model in params.yaml."))
    elif "not applicable" in notes:
        doc.add(Para("Not applicable: this score key has no sampling temperature (the backend does not "
                     f"sample). Beside the paper: {paper_figures.TEMPERATURE_FINDING}."))
    else:
        doc.add(Para("Not computed for these runs."))
