"""Render stored calibration runs as a Markdown report beside the paper's figures.

Reads only the store (runs, metric rows, provenance), so any stored run can be re-rendered
and the same runs always give the same Markdown.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from sqlalchemy import Connection, text

from checkworthy import paper_figures
from checkworthy.evaluate import load_metrics

METHODS = (("baseline", "Baseline"), ("knn", "KNN"), ("nnppi", "NN-PPI"))


def _f(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def _diff(ours: float | None, paper: float | None) -> str:
    if ours is None or paper is None:
        return "—"
    return f"{ours - paper:+.3f}"


def _runs(conn: Connection, run_ids: Sequence[int]) -> list[Mapping]:
    return list(conn.execute(
        text("""SELECT r.*, m.spec AS model_spec, ls.name AS label_set_name, ls.n_items,
                       ls.n_positive, dv.dvc_hash, dv.git_rev AS data_git_rev
                FROM calibration_runs r JOIN models m ON m.id = r.model_id
                JOIN label_sets ls ON ls.id = r.label_set_id
                LEFT JOIN data_versions dv ON dv.id = r.data_version_id
                WHERE r.id = ANY(:ids) ORDER BY r.target, m.spec, r.score_kind, r.k"""),
        {"ids": list(run_ids)},
    ).mappings())


def table_rows(conn: Connection, run_ids: Sequence[int]) -> list[dict]:
    """One row per run: weighted and class F1 of each method, the paper's figure, coverage."""
    rows = []
    for run in _runs(conn, run_ids):
        m = load_metrics(conn, run["id"])
        dataset = run["target"].split(":")[0]
        paper_model = paper_figures.paper_model_name(run["model_spec"])
        paper = paper_figures.WEIGHTED_F1.get(dataset, {}).get(paper_model or "", {}).get(run["k"])
        row = {"run": run, "dataset": dataset, "paper": paper}
        for method, _ in METHODS:
            row[method] = {
                "wf1": m.get((method, "weighted_f1", "all")),
                "f1_0": m.get((method, "f1", "0")),
                "f1_1": m.get((method, "f1", "1")),
                "ppr": m.get((method, "predicted_positive_rate", "all")),
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
    head = (f"{'dataset':<12} {'model / score':<34} {'k':>3}  "
            + "  ".join(f"{label + ' wF1 (paper)':>20}" for _, label in METHODS)
            + "   NN-PPI F1 c0/c1   cover95")
    lines = [head, "-" * len(head)]
    for r in rows:
        run = r["run"]
        cells = []
        for i, (method, _) in enumerate(METHODS):
            paper = r["paper"][i] if r["paper"] else None
            cells.append(f"{_f(r[method]['wf1']):>11} ({_f(paper)})")
        lines.append(
            f"{r['dataset']:<12} {run['model_spec'] + ' / ' + run['score_kind']:<34} {run['k']:>3}  "
            + "  ".join(f"{c:>20}" for c in cells)
            + f"   {_f(r['nnppi']['f1_0'])}/{_f(r['nnppi']['f1_1'])}   {_f(r['coverage']['all'])}"
        )
    return "\n".join(lines)


def markdown(conn: Connection, run_ids: Sequence[int], title: str = "checkworthy report") -> str:
    """The full Markdown report of the given runs."""
    rows = table_rows(conn, run_ids)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["dataset"], r["run"]["model_spec"], r["run"]["score_kind"])].append(r)
    out = [f"# {title}", ""]
    out += ["Weighted F1 of the raw score (Baseline), the kNN label mean (KNN) and NN-PPI on the "
            "test split, with the paper's figure for the same model and k and our difference. "
            "Decision: check-worthy iff value >= threshold.", ""]
    for (dataset, spec, kind), grp in groups.items():
        run0 = grp[0]["run"]
        out += [f"## {dataset} — {spec} ({kind} score)", ""]
        out += ["| k | method | weighted F1 | paper | Δ | F1 class 0 | F1 class 1 | predicted positive rate |",
                "|---|---|---|---|---|---|---|---|"]
        for r in grp:
            for i, (method, label) in enumerate(METHODS):
                paper = r["paper"][i] if r["paper"] else None
                v = r[method]
                out.append(f"| {r['run']['k']} | {label} | {_f(v['wf1'])} | {_f(paper)} | "
                           f"{_diff(v['wf1'], paper)} | {_f(v['f1_0'])} | {_f(v['f1_1'])} | {_f(v['ppr'])} |")
        out += [""]
        cls_paper = paper_figures.GEMMA_270M_CLASS_F1.get(dataset, {})
        if paper_figures.paper_model_name(spec) == "gemma3-270m" and cls_paper:
            out += ["Paper, Gemma 3 270M class F1 (class 0 / class 1): "
                    + "; ".join(f"{m}{'' if k is None else f' k={k}'} {a:.3f} / {b:.3f}"
                                for m, (k, a, b) in cls_paper.items()), ""]
        first = grp[0]
        out += [f"Baseline statistics: gold positive rate {_f(first['gold_ppr'])}, predicted positive "
                f"rate {_f(first['baseline']['ppr'])}, mean score on gold negatives "
                f"{_f(first['mean_score']['0'])} vs gold positives {_f(first['mean_score']['1'])}.", ""]
        out += ["Interval coverage (paper's z-interval, nominal "
                f"{1 - run0['alpha']:.0%}) beside the paper's average over models:", "",
                "| k | class 0 | class 1 | overall | paper overall | mean width | n |",
                "|---|---|---|---|---|---|---|"]
        for r in grp:
            pc = paper_figures.COVERAGE.get(dataset, {}).get(r["run"]["k"])
            cov = r["coverage"]
            out.append(f"| {r['run']['k']} | {_f(cov['0'])} | {_f(cov['1'])} | {_f(cov['all'])} | "
                       f"{_f(pc[2] if pc else None)} | {_f(r['width'])} | {int(r['n'] or 0)} |")
        out += [""]
        params = run0["params"] or {}
        out += ["Inputs: " + "; ".join([
            f"label set `{run0['label_set_name']}` ({run0['n_items']} claims, {run0['n_positive']} "
            f"check-worthy, fingerprint `{run0['label_set_fingerprint'][:12]}`)",
            f"data version (DVC md5) `{run0['dvc_hash']}`",
            f"model `{spec}`, prompt version `{run0['prompt_version'][:12]}`, "
            f"parameters hash `{run0['params_hash'][:12]}`",
            f"alpha {run0['alpha']}, threshold {run0['threshold']}, interval `{run0['interval_method']}`",
            f"code revision `{run0['code_rev'] or 'unknown'}`",
            f"flow run `{run0['flow_run_id'] or '—'}`",
            f"claims without a valid score: {params.get('n_without_score', 0)}",
            "runs " + ", ".join(str(r["run"]["id"]) for r in grp),
        ]) + ".", ""]
    return "\n".join(out)


def save_report(conn: Connection, name: str, run_ids: Sequence[int], directory: Path,
                flow_run_id: str | None = None) -> Path:
    """Render, write ``directory/<name>/report.md`` and keep a copy in the ``reports`` table."""
    md = markdown(conn, run_ids, title=f"checkworthy report: {name}")
    path = directory / name / "report.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(md, encoding="utf-8")
    conn.execute(
        text("INSERT INTO reports (name, run_ids, markdown, path, flow_run_id) "
             "VALUES (:n, :r, :m, :p, :f)"),
        {"n": name, "r": list(run_ids), "m": md, "p": str(path), "f": flow_run_id},
    )
    return path
