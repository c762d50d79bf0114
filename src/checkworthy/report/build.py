"""Evaluate stored calibration runs completely and render them for people (issue 5).

Two steps, kept apart so that a stored report can always be re-rendered byte for byte:

1. **Analyse** (:func:`ensure_analyses`, writes): for each group of runs that differ only in k
   (same claims, label set, score key, alpha, threshold) compute, once, the k sweep and the
   |L| sweep from one SQL kNN call per group (each target's neighbour list over the whole
   labelled pool, ``k_big`` long; see :mod:`checkworthy.report.analyses`), and for each run the
   temperature comparison, the failure modes with examples, reliability bins and score
   histograms. Results go to ``report_analyses`` / ``analysis_metrics`` /
   ``failure_examples`` (migration 0004); an analysis already stored with the same inputs is
   reused. Gold labels are taken *as of the run* (newest label created before the run
   finished), so a later label correction does not change an old run's analysis.
2. **Render** (:func:`build`, read-only): every table and figure comes from stored rows only
   (runs, ``evaluation_metrics``, the analyses a report pinned in ``reports.analysis_ids``,
   the paper's figures in :mod:`checkworthy.report.paper_figures`), sorted deterministically, with
   no timestamps but stored ones. The same rows give the same Markdown, the same HTML and the
   same PNG bytes.

:func:`save_report` does both, writes ``reports/<name>/`` (report.md, report.html with the
figures embedded, figures/*.png, metrics.json for ``dvc metrics show``, plots/*/ CSVs for
``dvc plots show``), stores the Markdown in ``reports`` and, inside a Prefect flow run,
publishes an artifact linking to the page (:func:`publish_artifact`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Connection, text

from checkworthy.report import analyses, failure_modes, paper_figures, plots
from checkworthy.report.analyses import Pool, Row
from checkworthy.report.document import Document, Heading, Image, Para, Table, code, esc, to_html, to_markdown
from checkworthy.runs.evaluation import load_metrics
from checkworthy.store.rows import sha256_text

METHODS = (("baseline", "Baseline"), ("knn", "KNN"), ("nnppi", "NN-PPI"))
METHOD_LABEL = dict(METHODS)

#: bump when an analysis's computation changes: stored analyses of older versions are not reused
ANALYSIS_VERSION = 1
GROUP_ANALYSES = ("k_sweep", "label_set_size")
RUN_ANALYSES = ("temperature", "failure_modes", "reliability", "histogram")


@dataclass(frozen=True)
class AnalysisOptions:
    """What the analyses compute; part of each stored analysis's inputs (its params hash)."""

    k_sweep: tuple[int, ...] = (1, 2, 3, 5, 7, 10, 15, 20, 30, 50)
    sizes: tuple[int, ...] = (50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 4500)
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    size_ks: tuple[int, ...] = (3, 5, 10)
    k_big: int = 200
    n_examples: int = 2
    n_bins: int = 10
    hist_bins: int = 20

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | None) -> AnalysisOptions:
        """Options from the ``report:`` section of params.yaml (missing keys: defaults)."""
        params = params or {}
        known = {f: params[f] for f in cls.__dataclass_fields__ if f in params}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in known.items()})


# ---- formatting -------------------------------------------------------------------------------


def _missing(v: float | None) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _f(v: float | None, nd: int = 3) -> str:
    if _missing(v):
        return "—"
    s = f"{v:.{nd}f}"
    return s[1:] if s.startswith("-") and float(s) == 0 else s


def _diff(ours: float | None, paper: float | None) -> str:
    if _missing(ours) or _missing(paper):
        return "—"
    s = f"{ours - paper:+.3f}"
    return "+0.000" if s == "-0.000" else s


def _ts(value: Any) -> str:
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _slug(value: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")


def _json_hash(value: Any) -> str:
    return sha256_text(json.dumps(value, sort_keys=True, default=str))


# ---- reading runs -----------------------------------------------------------------------------

RUNS_SQL = text(
    """SELECT r.*, m.spec AS model_spec, m.kind AS model_kind, m.details AS model_details,
              ls.name AS label_set_name, ls.n_items, ls.n_positive,
              COALESCE(dv.dvc_hash, dvl.dvc_hash) AS dvc_hash,
              COALESCE(dv.git_rev, dvl.git_rev) AS data_git_rev,
              pv.template_version AS prompt_template_version,
              cr.n_results, cr.claims_hash
       FROM calibration_runs r JOIN models m ON m.id = r.model_id
       JOIN label_sets ls ON ls.id = r.label_set_id
       JOIN prompt_versions pv ON pv.id = r.prompt_version
       LEFT JOIN data_versions dv ON dv.id = r.data_version_id
       LEFT JOIN data_versions dvl ON dvl.id = ls.data_version_id
       LEFT JOIN LATERAL (
           SELECT count(*) AS n_results,
                  encode(sha256(convert_to(string_agg(x.claim_id::text, ',' ORDER BY x.claim_id),
                                           'UTF8')), 'hex') AS claims_hash
           FROM calibrated_results x WHERE x.run_id = r.id) cr ON true
       WHERE r.id = ANY(:ids)
       ORDER BY r.target, m.spec, r.score_kind, r.params_hash, r.label_set_id, r.k, r.id"""
)


def _runs(conn: Connection, run_ids: Sequence[int]) -> list[dict[str, Any]]:
    """The runs with everything a report names about their inputs, in report order."""
    runs = [dict(r) for r in conn.execute(RUNS_SQL, {"ids": [int(i) for i in run_ids]}).mappings()]
    for r in runs:
        r["dataset"] = r["target"].split(":")[0]
        r["group_key"] = group_key(r)
    return runs


def group_key(run: Mapping[str, Any]) -> str:
    """sha256 of a run's identity without k: runs sharing it differ only in k."""
    return _json_hash({f: run[f] for f in (
        "target", "label_set_fingerprint", "model_id", "prompt_version", "params_hash", "score_kind",
        "embed_model", "alpha", "threshold", "interval_method", "claims_hash")})


def _score_params(conn: Connection, run: Mapping[str, Any]) -> dict[str, Any]:
    """The generation parameters behind the run's score key (identical for every row of it)."""
    value = conn.execute(
        text("SELECT params FROM predictions WHERE model_id = :m AND prompt_version = :pv "
             "AND params_hash = :ph LIMIT 1"),
        {"m": run["model_id"], "pv": run["prompt_version"], "ph": run["params_hash"]},
    ).scalar()
    return dict(value or {})


def _results(conn: Connection, run_id: int) -> list[Mapping[str, Any]]:
    return list(conn.execute(
        text("""SELECT claim_id, score, theta, ci_low, ci_high, decision, knn_mean, neighbor_ids,
                       neighbor_distances FROM calibrated_results WHERE run_id = :r ORDER BY claim_id"""),
        {"r": run_id}).mappings())


def gold_as_of(conn: Connection, claim_ids: Sequence[int], when: Any) -> dict[int, int]:
    """Each claim's newest label created no later than ``when`` (the run's finish)."""
    rows = conn.execute(
        text("""SELECT DISTINCT ON (claim_id) claim_id, label FROM labels
                WHERE claim_id = ANY(:c) AND created_at <= :t ORDER BY claim_id, id DESC"""),
        {"c": [int(i) for i in claim_ids], "t": when},
    ).all()
    return {r.claim_id: int(r.label) for r in rows}


POOL_SQL = text(
    """SELECT i.claim_id, i.label, p.score
       FROM label_set_items i
       JOIN claims c ON c.id = i.claim_id
       JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :embed_model
       JOIN predictions p ON p.text_hash = c.text_hash AND p.model_id = :model_id
            AND p.prompt_version = :prompt_version AND p.params_hash = :params_hash
            AND p.score_kind = :score_kind AND p.score IS NOT NULL
       WHERE i.label_set_id = :label_set_id ORDER BY i.claim_id"""
)

#: like checkworthy.store.knn.KNN_SQL (same pool, same order and tie-break) but returning each
#: target's first :k neighbours as one array, optionally only among the claims in :subset
NEIGHBOUR_LISTS_SQL = text(
    """
WITH lab AS MATERIALIZED (
    SELECT i.claim_id, e.embedding
    FROM label_set_items i
    JOIN claims c ON c.id = i.claim_id
    JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :embed_model
    JOIN predictions p ON p.text_hash = c.text_hash AND p.model_id = :model_id
         AND p.prompt_version = :prompt_version AND p.params_hash = :params_hash
         AND p.score_kind = :score_kind AND p.score IS NOT NULL
    WHERE i.label_set_id = :label_set_id
      AND (CAST(:subset AS bigint[]) IS NULL OR i.claim_id = ANY(CAST(:subset AS bigint[])))
), q AS MATERIALIZED (
    SELECT c.id AS claim_id, e.embedding
    FROM unnest(CAST(:claim_ids AS bigint[])) AS u(id)
    JOIN claims c ON c.id = u.id
    JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :embed_model
)
SELECT q.claim_id, n.ids
FROM q CROSS JOIN LATERAL (
    SELECT array_agg(x.claim_id ORDER BY x.distance, x.claim_id) AS ids FROM (
        SELECT lab.claim_id, lab.embedding <=> q.embedding AS distance FROM lab
        ORDER BY lab.embedding <=> q.embedding, lab.claim_id LIMIT :k) x
) n
ORDER BY q.claim_id
"""
)


def _key_params(run: Mapping[str, Any]) -> dict[str, Any]:
    return {"embed_model": run["embed_model"], "model_id": run["model_id"],
            "prompt_version": run["prompt_version"], "params_hash": run["params_hash"],
            "score_kind": run["score_kind"], "label_set_id": run["label_set_id"]}


def pool_of(conn: Connection, run: Mapping[str, Any]) -> Pool:
    """The labelled claims that can be a run's neighbours (scored and embedded), by claim id."""
    rows = conn.execute(POOL_SQL, _key_params(run)).all()
    return Pool(np.array([r.claim_id for r in rows], dtype=np.int64),
                np.array([r.label for r in rows], dtype=np.int64),
                np.array([r.score for r in rows], dtype=float))


def neighbour_lists(
    conn: Connection, run: Mapping[str, Any], claim_ids: Sequence[int], k: int,
    subset: Sequence[int] | None = None,
) -> np.ndarray:
    """Each claim's first k labelled neighbours (rows in ``claim_ids`` order), in one statement."""
    rows = conn.execute(NEIGHBOUR_LISTS_SQL, _key_params(run) | {
        "claim_ids": [int(i) for i in claim_ids], "k": int(k),
        "subset": None if subset is None else [int(i) for i in subset]}).all()
    by_id = {r.claim_id: r.ids for r in rows}
    if len(by_id) != len(set(claim_ids)) or any(len(v) < k for v in by_id.values()):
        raise ValueError(f"run {run['id']}: fewer than k={k} labelled neighbours for some claims")
    return np.array([by_id[int(i)] for i in claim_ids], dtype=np.int64).reshape(len(claim_ids), k)


# ---- analyses (writes) ------------------------------------------------------------------------


@dataclass
class _Computed:
    rows: list[Row] = field(default_factory=list)
    examples: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


class _GroupData:
    """The arrays a group's analyses share, loaded once on first use."""

    def __init__(self, conn: Connection, anchor: Mapping[str, Any], k_big: int = 0) -> None:
        self.conn, self.anchor, self.k_big = conn, anchor, k_big
        self._cache: dict[str, Any] = {}

    def get(self, name: str) -> Any:
        if name not in self._cache:
            self._cache[name] = getattr(self, f"_load_{name}")()
        return self._cache[name]

    def _load_results(self) -> list[Mapping[str, Any]]:
        return _results(self.conn, self.anchor["id"])

    def _load_claim_ids(self) -> np.ndarray:
        return np.array([r["claim_id"] for r in self.get("results")], dtype=np.int64)

    def _load_gold(self) -> np.ndarray | None:
        ids = self.get("claim_ids")
        gold = gold_as_of(self.conn, ids, self.anchor["finished_at"])
        if len(gold) != len(ids) or not len(ids):
            return None
        return np.array([gold[int(i)] for i in ids], dtype=np.int64)

    def _load_scores(self) -> np.ndarray:
        return np.array([r["score"] for r in self.get("results")], dtype=float)

    def _load_pool(self) -> Pool:
        return pool_of(self.conn, self.anchor)

    def _load_lists(self) -> np.ndarray:
        k_big = min(self.k_big, len(self.get("pool").ids))
        return neighbour_lists(self.conn, self.anchor, self.get("claim_ids"), k_big)


def _store(conn: Connection, run: Mapping[str, Any], analysis: str, params: dict[str, Any],
           computed: _Computed, code_rev: str, flow_run_id: str | None) -> int:
    ph = _json_hash(params)
    aid = conn.execute(
        text("""INSERT INTO report_analyses (run_id, group_key, analysis, params, params_hash, code_rev,
                flow_run_id) VALUES (:r, :g, :a, CAST(:p AS jsonb), :ph, :cr, :fr) RETURNING id"""),
        {"r": run["id"], "g": run["group_key"], "a": analysis,
         "p": json.dumps(params | {"info": computed.info}, sort_keys=True, default=str), "ph": ph,
         "cr": code_rev, "fr": flow_run_id},
    ).scalar_one()
    if computed.rows:
        conn.execute(
            text("""INSERT INTO analysis_metrics (analysis_id, run_id, variant, k, n_labelled, seed, bin,
                    method, metric, class, statistic, value)
                    VALUES (:a, :r, :variant, :k, :n_labelled, :seed, :bin, :method, :metric, :cls,
                    :statistic, :value)"""),
            [{"a": aid, "r": run["id"]} | asdict(row) | {"value": None if _missing(row.value) else row.value}
             for row in computed.rows],
        )
    if computed.examples:
        conn.execute(
            text("""INSERT INTO failure_examples (analysis_id, run_id, category, rank, claim_id, source_id,
                    text, gold, score, theta, ci_low, ci_high, knn_mean, baseline_decision, nnppi_decision,
                    neighbours) VALUES (:a, :r, :category, :rank, :claim_id, :source_id, :text, :gold,
                    :score, :theta, :ci_low, :ci_high, :knn_mean, :baseline_decision, :nnppi_decision,
                    CAST(:neighbours AS jsonb))"""),
            [{"a": aid, "r": run["id"]} | e | {"neighbours": json.dumps(e["neighbours"])}
             for e in computed.examples],
        )
    return aid


def _existing(conn: Connection, run: Mapping[str, Any], analysis: str, params: dict[str, Any]) -> int | None:
    ph = _json_hash(params)
    if analysis in GROUP_ANALYSES:
        sql = ("SELECT id FROM report_analyses WHERE group_key = :g AND analysis = :a "
               "AND params_hash = :ph ORDER BY id LIMIT 1")
    else:
        sql = "SELECT id FROM report_analyses WHERE run_id = :r AND analysis = :a AND params_hash = :ph"
    return conn.execute(text(sql), {"g": run["group_key"], "r": run["id"], "a": analysis, "ph": ph}).scalar()


def ensure_analyses(
    conn: Connection, run_ids: Sequence[int], options: AnalysisOptions | None = None,
    flow_run_id: str | None = None, code_rev: str | None = None,
) -> list[int]:
    """Compute (or reuse) every analysis of the runs; return the analysis ids, sorted.

    Runs without gold labels for all their claims (or not complete) get no analyses.
    """
    from checkworthy.data.versioning import git_rev

    options = options or AnalysisOptions()
    code_rev = git_rev() if code_rev is None else code_rev
    runs = [r for r in _runs(conn, run_ids) if r["status"] == "complete" and r["n_results"]]
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[r["group_key"]].append(r)
    ids: list[int] = []
    for gk in sorted(groups):
        grp = groups[gk]
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"), {"k": "report:" + gk})
        data = _GroupData(conn, grp[0], k_big=max(options.k_big, *options.k_sweep))
        if data.get("gold") is None:
            continue
        for analysis in GROUP_ANALYSES:
            params = _analysis_params(analysis, options, grp[0])
            aid = _existing(conn, grp[0], analysis, params)
            if aid is None:
                aid = _store(conn, grp[0], analysis, params, _compute_group(analysis, data, options),
                             code_rev, flow_run_id)
            ids.append(aid)
        for run in grp:
            run_data = data if run["id"] == grp[0]["id"] else _GroupData(conn, run)
            for analysis in RUN_ANALYSES:
                params = _analysis_params(analysis, options, run)
                if analysis == "temperature":
                    params["siblings"] = _temperature_siblings(conn, run)
                aid = _existing(conn, run, analysis, params)
                if aid is None:
                    computed = _compute_run(analysis, conn, run, run_data, options, params)
                    aid = _store(conn, run, analysis, params, computed, code_rev, flow_run_id)
                ids.append(aid)
    return sorted(ids)


def _analysis_params(analysis: str, o: AnalysisOptions, run: Mapping[str, Any]) -> dict[str, Any]:
    base: dict[str, Any] = {"version": ANALYSIS_VERSION, "gold": "as of run finish"}
    if analysis == "k_sweep":
        return base | {"ks": sorted(set(o.k_sweep)), "k_big": max(o.k_big, *o.k_sweep)}
    if analysis == "label_set_size":
        return base | {"sizes": sorted(set(o.sizes)), "seeds": list(o.seeds), "ks": sorted(set(o.size_ks)),
                       "k_big": max(o.k_big, *o.k_sweep), "sampling": "class-stratified nested"}
    if analysis == "failure_modes":
        return base | {"n_examples": o.n_examples}
    if analysis == "reliability":
        return base | {"n_bins": o.n_bins}
    if analysis == "histogram":
        return base | {"edges": {
            "baseline": [round(float(x), 10) for x in np.linspace(0.0, 1.0, o.hist_bins + 1)],
            "nnppi": [round(float(x), 10) for x in np.linspace(-0.5, 1.5, o.hist_bins + 1)]}}
    return base


def _compute_group(analysis: str, data: _GroupData, o: AnalysisOptions) -> _Computed:
    run = data.anchor
    y, c, pool, lists = data.get("gold"), data.get("scores"), data.get("pool"), data.get("lists")
    alpha, thr = run["alpha"], run["threshold"]
    if analysis == "k_sweep":
        ks = [k for k in sorted(set(o.k_sweep)) if k <= lists.shape[1]]
        return _Computed(analyses.k_sweep(y, c, lists, pool, ks, alpha, thr),
                         info={"n_pool": len(pool.ids), "n_targets": len(y)})
    claim_ids = data.get("claim_ids")

    def fallback(rows: np.ndarray, subset: np.ndarray, k: int) -> np.ndarray:
        return neighbour_lists(data.conn, run, claim_ids[rows], k, subset=subset)

    n_pool = len(pool.ids)
    sizes = sorted({s for s in o.sizes if s < n_pool} | {n_pool})
    rows, n_fallback = analyses.label_set_size_sweep(y, c, lists, pool, sizes, o.seeds, o.size_ks,
                                                      alpha, thr, fallback)
    return _Computed(rows, info={"n_pool": n_pool, "sizes": sizes, "n_fallback": n_fallback,
                                 "n_targets": len(y)})


def _temperature_siblings(conn: Connection, run: Mapping[str, Any]) -> dict[str, Any]:
    """Complete runs identical to ``run`` except for the sampling temperature of their scores."""
    own = _score_params(conn, run)
    if "temperature" not in own:
        return {"applicable": False}
    rows = conn.execute(
        text("""SELECT r.id, r.params_hash FROM calibration_runs r
                WHERE r.status = 'complete' AND r.target = :t AND r.label_set_fingerprint = :fp
                  AND r.model_id = :m AND r.prompt_version = :pv AND r.score_kind = :sk AND r.k = :k
                  AND r.alpha = :a AND r.threshold = :th AND r.interval_method = :im
                  AND r.embed_model = :em
                  AND coalesce(r.params->>'correction', 'paper') = :co ORDER BY r.id"""),
        {"t": run["target"], "fp": run["label_set_fingerprint"], "m": run["model_id"],
         "pv": run["prompt_version"], "sk": run["score_kind"], "k": run["k"], "a": run["alpha"],
         "th": run["threshold"], "im": run["interval_method"], "em": run["embed_model"],
         "co": (run["params"] or {}).get("correction", "paper")},
    ).all()
    rest = {k: v for k, v in own.items() if k != "temperature"}
    found: dict[str, int] = {}
    for r in rows:
        other = run if r.id == run["id"] else _runs(conn, [r.id])[0]
        if other["claims_hash"] != run["claims_hash"]:
            continue
        params = own if r.id == run["id"] else _score_params(conn, other)
        if "temperature" in params and {k: v for k, v in params.items() if k != "temperature"} == rest:
            found.setdefault(_temperature_label(params["temperature"]), r.id)
    found[_temperature_label(own["temperature"])] = run["id"]
    return {"applicable": True, "own": _temperature_label(own["temperature"]),
            "runs": dict(sorted(found.items()))}


def _temperature_label(t: Any) -> str:
    return "T=default" if t is None else f"T={float(t):g}"


TEMPERATURE_METRICS = (
    *[(m, "weighted_f1", "all") for m, _ in METHODS],
    ("nnppi", "f1", "0"), ("nnppi", "f1", "1"), ("nnppi", "accuracy", "all"),
    ("baseline", "predicted_positive_rate", "all"), ("nnppi", "predicted_positive_rate", "all"),
    ("baseline", "mean_score", "0"), ("baseline", "mean_score", "1"),
    ("nnppi", "coverage", "all"), ("nnppi", "mean_width", "all"),
)


def _compute_run(analysis: str, conn: Connection, run: Mapping[str, Any], data: _GroupData,
                 o: AnalysisOptions, params: dict[str, Any]) -> _Computed:
    if analysis == "temperature":
        sib = params["siblings"]
        rows = []
        for label, rid in sib.get("runs", {}).items():
            m = load_metrics(conn, rid)
            rows += [Row(meth, met, m[(meth, met, cl)], cls=cl, variant=label, k=run["k"])
                     for meth, met, cl in TEMPERATURE_METRICS if (meth, met, cl) in m]
        return _Computed(rows)
    results = data.get("results")
    y = data.get("gold")
    if y is None:
        return _Computed(info={"skipped": "claims without gold labels"})
    score = np.array([r["score"] for r in results], dtype=float)
    theta = np.array([r["theta"] for r in results], dtype=float)
    knn = np.array([r["knn_mean"] for r in results], dtype=float)
    if analysis == "reliability":
        return _Computed(analyses.reliability_rows(y, {"baseline": score, "knn": knn, "nnppi": theta},
                                                    o.n_bins))
    if analysis == "histogram":
        return _Computed(analyses.histogram_rows(y, {"baseline": score, "nnppi": theta}, params["edges"]))
    thr = run["threshold"]
    base_dec = (score >= thr).astype(int)
    nn_dec = np.array([int(r["decision"]) for r in results])
    cats = failure_modes.classify(y, base_dec, nn_dec)
    rows = [Row("nnppi", "n_claims", float(n), cls=cls, variant=cat)
            for (cat, cls), n in sorted(failure_modes.counts(y, cats).items())]
    ids = data.get("claim_ids")
    picks = failure_modes.pick_examples(cats, ids, score, theta, o.n_examples, thr)
    examples = []
    for cat in failure_modes.CATEGORIES:
        for rank, i in enumerate(picks[cat], start=1):
            r = results[i]
            examples.append({
                "category": cat, "rank": rank, "claim_id": int(ids[i]), "gold": int(y[i]),
                "score": float(score[i]), "theta": float(theta[i]), "ci_low": float(r["ci_low"]),
                "ci_high": float(r["ci_high"]), "knn_mean": float(knn[i]),
                "baseline_decision": int(base_dec[i]), "nnppi_decision": int(nn_dec[i]),
                **_claim_text(conn, int(ids[i])),
                "neighbours": _neighbour_details(conn, run, r["neighbor_ids"], r["neighbor_distances"]),
            })
    return _Computed(rows, examples)


def _claim_text(conn: Connection, claim_id: int) -> dict[str, str]:
    row = conn.execute(text("SELECT c.source_id, t.text FROM claims c JOIN texts t USING (text_hash) "
                            "WHERE c.id = :i"), {"i": claim_id}).one()
    return {"source_id": row.source_id, "text": row.text}


def _neighbour_details(conn: Connection, run: Mapping[str, Any], ids: Sequence[int],
                       distances: Sequence[float]) -> list[dict[str, Any]]:
    """Each neighbour's frozen label (label set item), score under the run's key, and text."""
    rows = conn.execute(
        text("""SELECT u.rank, u.nid, u.dist, c.source_id, t.text, i.label, p.score
                FROM unnest(CAST(:ids AS bigint[]), CAST(:d AS float8[]))
                     WITH ORDINALITY AS u(nid, dist, rank)
                JOIN claims c ON c.id = u.nid JOIN texts t ON t.text_hash = c.text_hash
                JOIN label_set_items i ON i.label_set_id = :ls AND i.claim_id = u.nid
                JOIN predictions p ON p.text_hash = c.text_hash AND p.model_id = :m
                     AND p.prompt_version = :pv AND p.params_hash = :ph AND p.score_kind = :sk
                ORDER BY u.rank"""),
        {"ids": [int(i) for i in ids], "d": [float(x) for x in distances], "ls": run["label_set_id"],
         "m": run["model_id"], "pv": run["prompt_version"], "ph": run["params_hash"],
         "sk": run["score_kind"]},
    ).all()
    effects = failure_modes.neighbour_effects([r.label for r in rows], [r.score for r in rows])
    return [{"rank": int(r.rank), "claim_id": int(r.nid), "source_id": r.source_id, "text": r.text,
             "distance": float(r.dist), "label": int(r.label), "score": float(r.score)} | e
            for r, e in zip(rows, effects)]


# ---- loading for rendering (read-only) --------------------------------------------------------


@dataclass
class _Analysis:
    id: int
    run_id: int
    group_key: str
    analysis: str
    params: dict[str, Any]
    code_rev: str
    flow_run_id: str | None
    rows: list[Mapping[str, Any]] = field(default_factory=list)
    examples: list[Mapping[str, Any]] = field(default_factory=list)

    def value(self, method: str, metric: str, cls: str = "all", variant: str = "", k: int | None = None,
              n_labelled: int | None = None, seed: int | None = None, bin: int | None = None,
              statistic: str = "value") -> float | None:
        return self._index.get((variant, k, n_labelled, seed, bin, method, metric, cls, statistic))

    def index(self) -> None:
        self._index = {(r["variant"], r["k"], r["n_labelled"], r["seed"], r["bin"], r["method"], r["metric"],
                        r["class"], r["statistic"]): r["value"] for r in self.rows}


def _load_analyses(conn: Connection, runs: Sequence[Mapping[str, Any]],
                   analysis_ids: Sequence[int] | None) -> dict[tuple[Any, str], _Analysis]:
    """Analyses keyed by (group_key, analysis) for group analyses and (run_id, analysis) per run."""
    if analysis_ids is not None:
        heads = conn.execute(text("SELECT * FROM report_analyses WHERE id = ANY(:i) ORDER BY id"),
                             {"i": [int(i) for i in analysis_ids]}).mappings().all()
    else:  # a report stored without pinned analyses: the earliest of each kind
        heads = conn.execute(
            text("""SELECT * FROM report_analyses WHERE id IN (
                      SELECT min(id) FROM report_analyses WHERE group_key = ANY(:g)
                        AND analysis = ANY(:ga) GROUP BY group_key, analysis
                      UNION
                      SELECT min(id) FROM report_analyses WHERE run_id = ANY(:r)
                        AND analysis = ANY(:ra) GROUP BY run_id, analysis) ORDER BY id"""),
            {"g": sorted({r["group_key"] for r in runs}), "ga": list(GROUP_ANALYSES),
             "r": [r["id"] for r in runs], "ra": list(RUN_ANALYSES)}).mappings().all()
    out: dict[tuple[Any, str], _Analysis] = {}
    by_id: dict[int, _Analysis] = {}
    for h in heads:
        a = _Analysis(h["id"], h["run_id"], h["group_key"].strip(), h["analysis"], dict(h["params"]),
                      h["code_rev"], h["flow_run_id"])
        key = (a.group_key, a.analysis) if a.analysis in GROUP_ANALYSES else (a.run_id, a.analysis)
        out.setdefault(key, a)
        by_id[a.id] = a
    if by_id:
        for r in conn.execute(text("SELECT * FROM analysis_metrics WHERE analysis_id = ANY(:i)"),
                              {"i": list(by_id)}).mappings():
            by_id[r["analysis_id"]].rows.append(r)
        for e in conn.execute(text("SELECT * FROM failure_examples WHERE analysis_id = ANY(:i) "
                                   "ORDER BY analysis_id, category, rank"), {"i": list(by_id)}).mappings():
            by_id[e["analysis_id"]].examples.append(e)
    for a in by_id.values():
        a.index()
    return out


# ---- the document -----------------------------------------------------------------------------


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


@dataclass
class _Group:
    key: str
    runs: list[dict[str, Any]]
    slug: str = ""
    title: str = ""

    @property
    def run0(self) -> dict[str, Any]:
        return self.runs[0]


def _groups(runs: Sequence[dict[str, Any]]) -> list[_Group]:
    order: dict[str, _Group] = {}
    for r in runs:
        order.setdefault(r["group_key"], _Group(r["group_key"], [])).runs.append(r)
    groups = list(order.values())
    base = [(g.run0["dataset"], g.run0["model_spec"], g.run0["score_kind"]) for g in groups]
    for g, b in zip(groups, base):
        r = g.run0
        g.title = f"{r['dataset']} — {r['model_spec']} ({r['score_kind']} score)"
        g.slug = _slug(f"{r['dataset']}--{r['model_spec']}--{r['score_kind']}")
        if base.count(b) > 1:  # same dataset, model and kind twice: name what differs
            extra = f"parameters {r['params_hash'][:8]}, label set {r['label_set_id']}, {r['target']}"
            g.title += f" [{extra}]"
            g.slug += f"--{r['params_hash'][:8]}-ls{r['label_set_id']}-{_slug(r['target'])}"
    return groups


def _m(metrics: Mapping[tuple[str, str, str], float], method: str, metric: str,
       cls: str = "all") -> float | None:
    return metrics.get((method, metric, cls))


def build(conn: Connection, run_ids: Sequence[int], title: str = "checkworthy report",
          analysis_ids: Sequence[int] | None = None, comparison_ids: Sequence[int] | None = None) -> Built:
    """The report of the given runs, from stored rows only.

    ``comparison_ids``: the stored method comparisons (migration 0005) to render in a
    "Methods compared" section; None or empty renders no such section, so reports stored
    before comparisons existed re-render byte for byte.
    """
    runs = _runs(conn, run_ids)
    metrics = {r["id"]: load_metrics(conn, r["id"]) for r in runs}
    analyses = _load_analyses(conn, runs, analysis_ids)
    score_params = {r["id"]: _score_params(conn, r) for r in runs}
    for r in runs:
        r["lineage"] = _lineage(conn, r["label_set_id"])
    groups = _groups(runs)
    doc = Document(title)
    figures: dict[str, Callable[[], bytes]] = {}
    metrics_json: dict[str, Any] = {}
    plot_files: dict[str, str] = {}

    doc.add(Para(
        "Every calibration run in this report, evaluated completely: the raw model score "
        "(**Baseline**), the mean label of the k nearest labelled claims (**KNN**) and **NN-PPI** "
        "(theta = score + mean neighbour residual), each deciding check-worthy iff its value >= the "
        "threshold. Where the paper (Amatya et al. 2026) reports a counterpart, its figure stands next "
        "to ours with the difference Δ = ours − paper. The paper's LLM figures are for verbalised "
        "confidence scores of its own runs; other score kinds and our data splits differ from them."))
    _summary(doc, groups, metrics)
    _data_beside_paper(doc, groups, metrics)
    for g in groups:
        _group_section(doc, g, metrics, analyses, score_params, figures, metrics_json, plot_files)
    if comparison_ids:
        _comparison_section(doc, conn, groups, comparison_ids, figures, plot_files)
    return Built(doc, figures, metrics_json, plot_files)


def _summary(doc: Document, groups: Sequence[_Group], metrics: Mapping[int, Mapping]) -> None:
    doc.add(Heading(2, "Summary"))
    rows = []
    for g in groups:
        for r in g.runs:
            m = metrics[r["id"]]
            paper = paper_figures.weighted_f1(r["dataset"], r["model_spec"], r["k"])
            rows.append([esc(r["dataset"]), code(r["model_spec"]), esc(r["score_kind"]), str(r["k"]),
                         str(r["id"]),
                         *[_f(_m(m, meth, "weighted_f1")) for meth, _ in METHODS],
                         _f(paper[2] if paper else None), _diff(_m(m, "nnppi", "weighted_f1"),
                                                                paper[2] if paper else None),
                         _f(_m(m, "nnppi", "coverage"))])
    doc.add(Table(["dataset", "model", "score", "k", "run", "Baseline wF1", "KNN wF1", "NN-PPI wF1",
                   "paper NN-PPI", "Δ", "coverage"], rows,
                  caption="Weighted F1 of each run (details per group below)."))


def _data_beside_paper(doc: Document, groups: Sequence[_Group], metrics: Mapping[int, Mapping]) -> None:
    seen: dict[tuple, list[str]] = {}
    for g in groups:
        r = g.run0
        m = metrics[r["id"]]
        n, rate = _m(m, "nnppi", "n"), _m(m, "baseline", "gold_positive_rate")
        if _missing(n) or _missing(rate):
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
                     _f(rate), _f(paper_figures.GOLD_POSITIVE_RATE.get(r["dataset"])),
                     _diff(rate, paper_figures.GOLD_POSITIVE_RATE.get(r["dataset"]))]
    doc.add(Heading(2, "Data beside the paper"))
    doc.add(Table(
        ["target", "label set", "test claims", "paper", "Δ", "check-worthy", "paper", "Δ", "not",
         "paper", "Δ", "|L|", "paper", "Δ", "gold positive rate", "paper", "Δ"],
        list(seen.values()),
        caption="Test claims calibrated (with a valid score), their gold classes, and the calibration "
                "set size, next to the paper's splits."))


def _lineage(conn: Connection, label_set_id: int) -> str:
    """Where the label set sits in its lineage (migration 0003's label_set_versions), if recorded."""
    if conn.execute(text("SELECT to_regclass('label_set_versions')")).scalar() is None:
        return ""
    row = conn.execute(
        text("""SELECT v.name, v.id, v.reason,
                       (SELECT count(*) FROM label_set_versions w WHERE w.name = v.name AND w.id <= v.id) AS n
                FROM label_set_versions v WHERE v.label_set_id = :ls ORDER BY v.id LIMIT 1"""),
        {"ls": label_set_id}).first()
    if row is None:
        return ""
    return f"; version {row.n} of lineage {code(row.name)} ({esc(row.reason)})"


def _inputs(g: _Group, analyses: Mapping, score_params: Mapping[int, dict]) -> Table:
    r = g.run0
    sp = score_params[r["id"]]
    runs = "; ".join(f"k={x['k']}: run {x['id']} ({x['status']}, started {_ts(x['started_at'])}, "
                     f"finished {_ts(x['finished_at'])})" for x in g.runs)
    params = r["params"] or {}
    code_revs = sorted({x["code_rev"] or "unknown" for x in g.runs})
    flows = sorted({x["flow_run_id"] or "—" for x in g.runs})
    ana = [a for a in analyses.values() if a.group_key == g.key or a.run_id in {x["id"] for x in g.runs}]
    ana_revs = sorted({a.code_rev or "unknown" for a in ana})
    ana_flows = sorted({a.flow_run_id or "—" for a in ana})
    rows = [
        ["target claims", f"{code(r['target'])}: {r['n_results']} calibrated, "
                          f"{params.get('n_without_score', 0)} without a valid score; claim-set sha256 "
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


def _group_section(doc: Document, g: _Group, metrics: Mapping[int, Mapping], analyses: Mapping,
                   score_params: Mapping[int, dict], figures: dict, metrics_json: dict,
                   plot_files: dict) -> None:
    r0 = g.run0
    ds, spec = r0["dataset"], r0["model_spec"]
    doc.add(Heading(2, esc(g.title)))
    doc.add(Heading(3, "Inputs"), _inputs(g, analyses, score_params))

    # -- weighted F1 beside the paper
    rows = []
    for r in g.runs:
        paper = paper_figures.weighted_f1(ds, spec, r["k"])
        for i, (meth, label) in enumerate(METHODS):
            ours = _m(metrics[r["id"]], meth, "weighted_f1")
            p = paper[i] if paper else None
            rows.append([str(r["k"]), label, _f(ours), _f(p), _diff(ours, p)])
    pm = paper_figures.paper_model_name(spec)
    doc.add(Heading(3, "Weighted F1 beside the paper"), Table(
        ["k", "method", "weighted F1", "paper", "Δ"], rows,
        caption=f"Paper row: {code(pm)}." if pm else "The paper has no row for this model (—)."))

    # -- per-class precision / recall / F1
    rows = []
    any_paper = False
    for r in g.runs:
        m = metrics[r["id"]]
        for meth, label in METHODS:
            pc = paper_figures.class_f1(ds, spec, meth, r["k"])
            any_paper |= pc is not None
            cells = [str(r["k"]), label]
            for cls in ("0", "1"):
                cells += [_f(_m(m, meth, "precision", cls)), _f(_m(m, meth, "recall", cls)),
                          _f(_m(m, meth, "f1", cls))]
            cells += [_f(_m(m, meth, "predicted_positive_rate"))]
            for j, cls in enumerate(("0", "1")):
                p = pc[j] if pc else None
                cells += [_f(p), _diff(_m(m, meth, "f1", cls), p)]
            rows.append(cells)
    header = ["k", "method", "P (0)", "R (0)", "F1 (0)", "P (1)", "R (1)", "F1 (1)",
              "predicted positive rate", "paper F1 (0)", "Δ", "paper F1 (1)", "Δ"]
    if not any_paper:
        header, rows = header[:9], [row[:9] for row in rows]
    doc.add(Heading(3, "Precision, recall and F1 per class"), Table(
        header, rows, caption="Class 0 = not check-worthy, class 1 = check-worthy."
        + (" The paper gives class F1 for Gemma 3 270M only (baseline; NN-PPI at one k)."
           if any_paper else "")))

    # -- baseline statistics
    m = metrics[r0["id"]]
    stats = [("gold positive rate", "baseline", "gold_positive_rate", "all", "gold_positive_rate"),
             ("predicted positive rate (raw score >= threshold)", "baseline", "predicted_positive_rate",
              "all", "predicted_positive_rate"),
             ("mean raw score on gold negatives", "baseline", "mean_score", "0", "mean_score_0"),
             ("mean raw score on gold positives", "baseline", "mean_score", "1", "mean_score_1")]
    rows = []
    for label, meth, met, cls, pname in stats:
        ours, p = _m(m, meth, met, cls), paper_figures.baseline_stat(ds, spec, pname)
        rows.append([label, _f(ours), _f(p), _diff(ours, p)])
    doc.add(Heading(3, "Baseline statistics"), Table(
        ["statistic", "ours", "paper", "Δ"], rows,
        caption="The raw score alone (independent of k). The paper reports these for Gemma 3 1B and 4B "
                "and the test split's gold rate."))

    # -- coverage and width
    rows = []
    for r in g.runs:
        mm = metrics[r["id"]]
        pc = paper_figures.coverage(ds, r["k"])
        cells = [str(r["k"]), _f(1 - r["alpha"])]
        for j, cls in enumerate(("0", "1", "all")):
            p = pc[j] if pc else None
            cells += [_f(_m(mm, "nnppi", "coverage", cls)), _f(p), _diff(_m(mm, "nnppi", "coverage", cls), p)]
        cells += [_f(_m(mm, "nnppi", "mean_width", "0")), _f(_m(mm, "nnppi", "mean_width", "1")),
                  _f(_m(mm, "nnppi", "mean_width")), str(int(_m(mm, "nnppi", "n") or 0))]
        rows.append(cells)
    doc.add(Heading(3, "Interval coverage and width"), Table(
        ["k", "nominal", "class 0", "paper", "Δ", "class 1", "paper", "Δ", "overall", "paper", "Δ",
         "width (0)", "width (1)", "mean width", "n"], rows,
        caption=f"Share of claims whose gold label lies inside the NN-PPI interval "
                f"({code(r0['interval_method'])}). The paper's coverage is averaged over its models."))

    # -- decision accuracy
    lo, hi = paper_figures.DECISION_ACCURACY_RANGE
    rows = []
    for r in g.runs:
        mm = metrics[r["id"]]
        acc = _m(mm, "nnppi", "accuracy")
        where = ("—" if _missing(acc) else
                 "within" if lo <= acc <= hi else "below" if acc < lo else "above")
        rows.append([str(r["k"]), *[_f(_m(mm, meth, "accuracy")) for meth, _ in METHODS],
                     f"{_f(lo)}–{_f(hi)}", where])
    doc.add(Heading(3, "Decision accuracy"), Table(
        ["k", "Baseline", "KNN", "NN-PPI", "paper (NN-PPI range)", "NN-PPI vs range"], rows,
        caption="Share of decisions on the right side of the threshold."))

    _k_sweep_section(doc, g, metrics, analyses, figures, plot_files)
    _size_section(doc, g, analyses, figures, plot_files)
    _temperature_section(doc, g, analyses)
    _calibration_section(doc, g, analyses, figures)
    _failure_section(doc, g, analyses)
    metrics_json[g.slug] = _metrics_json(g, metrics)


#: coverage targets for the conformal methods at nominal 95% (overall, each class)
COVERAGE_TARGETS = (0.94, 0.92)
#: (metric, class) columns of the decisions table
DECISION_COLUMNS = (("weighted_f1", "all"), ("f1", "0"), ("f1", "1"), ("accuracy", "all"),
                    ("predicted_positive_rate", "all"), ("brier", "all"), ("cv_weighted_f1", "all"),
                    ("threshold", "all"))
FAMILY_TITLES = {"interval": "around NN-PPI", "interval-cv": "around the CV choice",
                 "interval-head": "around the head's CV choice", "sets": "conformal set",
                 "correction": "correction", "cv": "CV choice", "calibrator": "calibrator",
                 "cv-prior": "CV choice, pool prior", "calibrator-prior": "calibrator, pool prior",
                 "head": "embedding head", "head-cv": "embedding head, CV choice"}


def _comparison_section(doc: Document, conn: Connection, groups: Sequence[_Group],
                        comparison_ids: Sequence[int], figures: dict, plot_files: dict) -> None:
    """Every interval, correction and calibrator on each run's inputs (stored comparisons only)."""
    from checkworthy.report import comparison

    heads = comparison.load_heads(conn, comparison_ids)
    rows = comparison.load_rows(conn, comparison_ids)
    by_run: dict[int, list[dict[str, Any]]] = defaultdict(list)
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
        if not runs:
            continue
        doc.add(Heading(3, f"{esc(g.title)}: methods compared"))
        choices = []
        for r in runs:
            cv = info.get(r["id"], {}).get("cv_choice")
            if cv:
                choices.append(f"k={r['k']} (run {r['id']}): {code(cv['label'])} at k={cv['k']}, "
                               f"L leave-one-out weighted F1 {_f(cv['cv_weighted_f1'])}")
        if choices:
            doc.add(Para("Cross-validated choice — " + "; ".join(choices) + "."))
        head = next((info[r["id"]]["head"] for r in runs if info.get(r["id"], {}).get("head")), None)
        if head:  # fitted on L alone, so the same for every k of the group
            cv = head["cv_choice"]
            doc.add(Para(f"Embedding head (C = {head['C']:g}, chosen by 5-fold log loss on L): the "
                         f"cross-validated correction on its probability is {code(cv['label'])} at "
                         f"k={cv['k']}, L leave-one-out weighted F1 {_f(cv['cv_weighted_f1'])} "
                         "(neighbours' scores cross-fitted pairwise)."))
        trows, points, csv_rows, dec_rows = [], [], [], []
        for r in runs:
            idx = {(x["family"], x["method"], x["k"], x["metric"], x["class"]): x["value"]
                   for x in by_run[r["id"]]}
            met = comparison.targets_met(by_run[r["id"]], overall=lo, per_class=cls_lo)
            for f, m, k in comparison.method_keys(idx, comparison.INTERVAL_FAMILIES):
                cov = [idx.get((f, m, k, "coverage", c)) for c in ("all", "0", "1")]
                width, width01, size = (idx.get((f, m, k, x, "all"))
                                        for x in ("mean_width", "mean_width_01", "mean_set_size"))
                ok = met.get((f, m, k))
                trows.append([str(r["k"]), FAMILY_TITLES[f], code(m), "—" if k is None else str(k),
                              *[_f(x) for x in cov], _f(width), _f(width01), _f(size, 2),
                              "—" if ok is None else "met" if ok else "missed"])
                x = width01 if f != "sets" else (None if _missing(size) else size - 1)
                if not _missing(x) and not _missing(cov[0]):
                    points.append((f, m, k, float(x), float(cov[0])))
                csv_rows.append([r["k"], f, m, k, *cov, width01, size])
            for f, m, k in comparison.method_keys(idx, comparison.DECISION_FAMILIES):
                vals = [idx.get((f, m, k, metric, c)) for metric, c in DECISION_COLUMNS]
                dec_rows.append([str(r["k"]), FAMILY_TITLES[f], code(m), "—" if k is None else str(k),
                                 *[_f(x) for x in vals]])
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
        plot_files[f"plots/coverage_vs_width/{g.slug}.csv"] = _csv(
            ["run_k", "family", "method", "k", "coverage", "coverage_0", "coverage_1", "mean_width_01",
             "mean_set_size"], csv_rows)
        doc.add(Image(path, f"Coverage against mean width of every interval, {g.title}"))
        doc.add(Table(["run k", "family", "method", "k", "weighted F1", "F1 (0)", "F1 (1)", "accuracy",
                       "predicted positive rate", "Brier", "L CV weighted F1", "threshold"], dec_rows,
                      caption="Decisions at the run's threshold on its target claims. 'raw' is the Baseline, "
                              "'knn' the KNN baseline, 'paper' NN-PPI; calibrators see the score alone."))


def _k_sweep_section(doc: Document, g: _Group, metrics: Mapping, analyses: Mapping, figures: dict,
                     plot_files: dict) -> None:
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
        vals = {meth: a.value(meth, "weighted_f1", k=k) for meth, _ in METHODS}
        if all(_missing(v) for v in vals.values()):
            continue
        for meth in vals:
            if not _missing(vals[meth]):
                series[meth].append((k, vals[meth]))
        paper = paper_figures.weighted_f1(r0["dataset"], r0["model_spec"], k)
        same = "—"
        if k in stored:
            same = "yes" if all(
                not _missing(vals[meth]) and not _missing(stored[k].get((meth, "weighted_f1", "all")))
                and abs(stored[k][(meth, "weighted_f1", "all")] - vals[meth]) < 1e-9
                for meth, _ in METHODS) else "no"
        rows.append([str(k), *[_f(vals[meth]) for meth, _ in METHODS],
                     _f(a.value("nnppi", "f1", "0", k=k)), _f(a.value("nnppi", "f1", "1", k=k)),
                     _f(a.value("nnppi", "coverage", k=k)), _f(a.value("nnppi", "mean_width", k=k)),
                     _f(paper[2] if paper else None), _diff(vals["nnppi"], paper[2] if paper else None),
                     same])
        csv_rows.append([k, *[vals[meth] for meth, _ in METHODS]])
    path = f"figures/{g.slug}--f1_vs_k.png"
    paper_pts = {meth: [(k, p[i]) for k in (3, 5, 10)
                        if (p := paper_figures.weighted_f1(r0["dataset"], r0["model_spec"], k))]
                 for i, (meth, _) in enumerate(METHODS)}
    figures[path] = lambda: plots.f1_vs_k(f"{g.title}: weighted F1 vs k", series, paper_pts)
    plot_files[f"plots/f1_vs_k/{g.slug}.csv"] = _csv(["k", "baseline", "knn", "nnppi"], csv_rows)
    info = a.params.get("info", {})
    doc.add(Image(path, f"Weighted F1 against k, {g.title}"), Table(
        ["k", "Baseline", "KNN", "NN-PPI", "NN-PPI F1 (0)", "NN-PPI F1 (1)", "coverage", "mean width",
         "paper NN-PPI", "Δ", "= stored run"], rows,
        caption=f"k beyond {{3, 5, 10}}: each target's {a.params['k_big']} nearest labelled claims "
                f"(pool of {info.get('n_pool', '—')}) from one SQL kNN call, cut at k. "
                "'= stored run': the sweep reproduces the run stored for that k."))


def _size_section(doc: Document, g: _Group, analyses: Mapping, figures: dict, plot_files: dict) -> None:
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
            mean = a.value("nnppi", "weighted_f1", k=k, n_labelled=n, statistic="mean")
            sd = a.value("nnppi", "weighted_f1", k=k, n_labelled=n, statistic="sd")
            knn = a.value("knn", "weighted_f1", k=k, n_labelled=n, statistic="mean")
            cells += ["—" if _missing(mean) else f"{_f(mean)} ± {_f(sd)}", _f(knn)]
            means.append(mean)
            sds.append(sd)
            if not _missing(mean):
                series[k].append((n, mean, sd or 0.0))
        rows.append(cells)
        csv_rows.append([n, *means, *sds])
    path = f"figures/{g.slug}--f1_vs_L.png"
    figures[path] = lambda: plots.f1_vs_size(f"{g.title}: NN-PPI weighted F1 vs |L|", series)
    plot_files[f"plots/f1_vs_L/{g.slug}.csv"] = _csv(
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


def _temperature_section(doc: Document, g: _Group, analyses: Mapping) -> None:
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
        base = a.value("nnppi", "weighted_f1", variant=own, k=r["k"])
        for label, rid in sib["runs"].items():
            v = {meth: a.value(meth, "weighted_f1", variant=label, k=r["k"]) for meth, _ in METHODS}
            rows.append([str(r["k"]), label + (" (this run)" if label == own else ""), str(rid),
                         *[_f(v[meth]) for meth, _ in METHODS],
                         _f(a.value("nnppi", "f1", "0", variant=label, k=r["k"])),
                         _f(a.value("nnppi", "f1", "1", variant=label, k=r["k"])),
                         _f(a.value("baseline", "predicted_positive_rate", variant=label, k=r["k"])),
                         _f(a.value("nnppi", "coverage", variant=label, k=r["k"])),
                         _diff(v["nnppi"], base)])
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


def _calibration_section(doc: Document, g: _Group, analyses: Mapping, figures: dict) -> None:
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
        rows.append([str(r["k"]), *[_f(a.value(meth, "ece")) for meth, _ in METHODS]])
        pts = {}
        for meth, _ in METHODS:
            pts[meth] = [(a.value(meth, "mean_value", bin=b), a.value(meth, "positive_rate", bin=b),
                          int(a.value(meth, "count", bin=b) or 0))
                         for b in range(a.params["n_bins"]) if (a.value(meth, "count", bin=b) or 0) > 0]
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
                c: [a.value("baseline", "count", c, bin=b) or 0 for b in range(n_bins)] for c in ("0", "1")}))
        hpanels.append((f"NN-PPI theta, k={r['k']}", edges["nnppi"], {
            c: [a.value("nnppi", "count", c, bin=b) or 0 for b in range(len(edges["nnppi"]) - 1)]
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


def _failure_section(doc: Document, g: _Group, analyses: Mapping) -> None:
    doc.add(Heading(3, "Failure modes"))
    fm = [(r, analyses.get((r["id"], "failure_modes"))) for r in g.runs]
    if not any(a for _, a in fm):
        doc.add(Para("Not computed for these runs."))
        return
    rows = []
    for r, a in fm:
        if a is None:
            continue

        def n(cat: str, cls: str = "all", a: _Analysis = a) -> int:
            return int(a.value("nnppi", "n_claims", cls, variant=cat) or 0)

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
    move = e["theta"] - e["score"]
    doc.add(Para(
        f"{code(e['source_id'])} “{esc(_short(e['text'], 300))}” — gold {e['gold']}, raw score "
        f"{_f(e['score'])} → theta {_f(e['theta'])} (move {move:+.3f}; interval [{_f(e['ci_low'])}, "
        f"{_f(e['ci_high'])}]; KNN mean {_f(e['knn_mean'])}). Decision {e['baseline_decision']} → "
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
                  [[str(x["rank"]), _f(x["distance"]), str(x["label"]), _f(x["score"]),
                    _diff(x["residual"], 0), _diff(x["contribution"], 0),
                    f"{code(x['source_id'])} {esc(_short(x['text'], 160))}"]
                   for x in shown], caption=note))


def _short(s: str, n: int) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1].rstrip() + "…"


def _csv(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for row in rows:
        w.writerow(["" if _missing(v) else repr(float(v)) if isinstance(v, float) else v for v in row])
    return buf.getvalue()


def _metrics_json(g: _Group, metrics: Mapping[int, Mapping]) -> dict[str, Any]:
    """Every stored metric of the group's runs, nested for ``dvc metrics show``, with paper deltas."""
    out: dict[str, Any] = {}
    for r in g.runs:
        by_method: dict[str, dict[str, float | None]] = {}
        for (meth, met, cls), v in sorted(metrics[r["id"]].items()):
            name = met if cls == "all" else f"{met}_{cls}"
            by_method.setdefault(meth, {})[name] = None if _missing(v) else v
        paper = paper_figures.weighted_f1(r["dataset"], r["model_spec"], r["k"])
        if paper:
            for i, (meth, _) in enumerate(METHODS):
                ours = by_method.get(meth, {}).get("weighted_f1")
                by_method.setdefault(meth, {})["paper_weighted_f1"] = paper[i]
                by_method[meth]["delta_weighted_f1"] = None if ours is None else ours - paper[i]
        out[f"k{r['k']}"] = by_method | {"run_id": r["id"]}
    return out


# ---- console table (kept for the CLI) ---------------------------------------------------------


def table_rows(conn: Connection, run_ids: Sequence[int]) -> list[dict]:
    """One row per run: weighted and class F1 of each method, the paper's figure, coverage."""
    rows = []
    for run in _runs(conn, run_ids):
        m = load_metrics(conn, run["id"])
        paper = paper_figures.weighted_f1(run["dataset"], run["model_spec"], run["k"])
        sampled = _score_params(conn, run)
        label = f"{run['model_spec']} / {run['score_kind']}" + (
            f" {_temperature_label(sampled['temperature'])}" if "temperature" in sampled else "")
        row: dict[str, Any] = {"run": run, "dataset": run["dataset"], "paper": paper, "label": label}
        for method, _ in METHODS:
            row[method] = {
                "wf1": m.get((method, "weighted_f1", "all")),
                "f1_0": m.get((method, "f1", "0")),
                "f1_1": m.get((method, "f1", "1")),
                "ppr": m.get((method, "predicted_positive_rate", "all")),
                "accuracy": m.get((method, "accuracy", "all")),
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
    head = (f"{'dataset':<12} {'model / score':<40} {'k':>3}  "
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
            f"{r['dataset']:<12} {r['label']:<40} {run['k']:>3}  "
            + "  ".join(f"{c:>20}" for c in cells)
            + f"   {_f(r['nnppi']['f1_0'])}/{_f(r['nnppi']['f1_1'])}   {_f(r['coverage']['all'])}"
        )
    return "\n".join(lines)


# ---- files, storage, artifact -----------------------------------------------------------------


def markdown(conn: Connection, run_ids: Sequence[int], title: str = "checkworthy report",
             analysis_ids: Sequence[int] | None = None) -> str:
    """The full Markdown report of the given runs (from stored rows only)."""
    return build(conn, run_ids, title, analysis_ids).markdown


def write_report_dir(built: Built, out: Path) -> Path:
    """Write report.md, report.html, figures/, plots/ and metrics.json under ``out``; return report.md.

    ``figures/`` and ``plots/`` are generated: they are emptied first so no stale file survives.
    """
    out.mkdir(parents=True, exist_ok=True)
    for sub in ("figures", "plots"):
        shutil.rmtree(out / sub, ignore_errors=True)
    images = {path: draw() for path, draw in sorted(built.figures.items())}
    for path, data in images.items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_bytes(data)
    for path, body in sorted(built.plot_files.items()):
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(body, encoding="utf-8")
    (out / "metrics.json").write_text(json.dumps(built.metrics, indent=2, sort_keys=True) + "\n",
                                      encoding="utf-8")
    (out / "report.html").write_text(to_html(built.doc, images), encoding="utf-8")
    md = out / "report.md"
    md.write_text(built.markdown, encoding="utf-8")
    return md


def save_report(conn: Connection, name: str, run_ids: Sequence[int], directory: Path,
                flow_run_id: str | None = None, *, options: AnalysisOptions | None = None) -> Path:
    """Analyse, render and write ``directory/<name>/``; store the Markdown; publish an artifact.

    Returns the path of report.md. The report row pins the analyses it rendered, so
    ``checkworthy report <name>`` re-renders exactly the same Markdown later.
    """
    analysis_ids = ensure_analyses(conn, run_ids, options, flow_run_id)
    from checkworthy.report.comparison import latest_comparisons

    comparison_ids = latest_comparisons(conn, run_ids) or None  # pinned: computed by `checkworthy compare`
    title = f"checkworthy report: {name}"
    built = build(conn, run_ids, title, analysis_ids, comparison_ids)
    path = write_report_dir(built, directory / name)
    conn.execute(
        text("INSERT INTO reports (name, run_ids, markdown, path, flow_run_id, analysis_ids, comparison_ids) "
             "VALUES (:n, :r, :m, :p, :f, :a, :c)"),
        {"n": name, "r": [int(i) for i in run_ids], "m": built.markdown, "p": str(path), "f": flow_run_id,
         "a": analysis_ids, "c": comparison_ids},
    )
    publish_artifact(path.parent, name, _artifact_summary(built, name))
    return path


def stored_report(conn: Connection, ref: str) -> Mapping[str, Any] | None:
    """The newest stored report with this name (or id)."""
    return conn.execute(
        text("SELECT * FROM reports WHERE name = :n OR CAST(id AS text) = :n ORDER BY id DESC LIMIT 1"),
        {"n": ref}).mappings().first()


def rerender(conn: Connection, row: Mapping[str, Any]) -> Built:
    """Re-render a stored report from its runs and pinned analyses."""
    return build(conn, row["run_ids"], f"checkworthy report: {row['name']}", row.get("analysis_ids"),
                 row.get("comparison_ids"))


def _artifact_summary(built: Built, name: str) -> str:
    """The report's summary table as Markdown, for the Prefect artifact."""
    table = next(b for b in built.doc.blocks if isinstance(b, Table))
    return to_markdown(Document(f"checkworthy report: {name}", [table])).strip() + "\n"


def publish_artifact(report_dir: Path, name: str, summary: str = "") -> str | None:
    """Inside a Prefect flow or task run: a link artifact to report.html and a summary artifact.

    Outside a run this is a no-op (returns None), so the CLI and tests call it freely. The link
    is ``$CHECKWORTHY_REPORTS_URL/<name>/report.html`` when that is set (a web server in front
    of reports/), else a file:// URI. Returns the link.
    """
    try:
        from prefect.context import FlowRunContext, TaskRunContext
    except ImportError:  # pragma: no cover - prefect is a dependency
        return None
    if FlowRunContext.get() is None and TaskRunContext.get() is None:
        return None
    from prefect.artifacts import create_link_artifact, create_markdown_artifact

    base = os.environ.get("CHECKWORTHY_REPORTS_URL")
    page = report_dir / "report.html"
    link = f"{base.rstrip('/')}/{name}/report.html" if base else page.resolve().as_uri()
    key = "report-" + (_slug(name)[:40] or "unnamed")
    create_link_artifact(link=link, link_text=f"checkworthy report {name}", key=key,
                         description=f"checkworthy report {name}: report.html (Markdown: report.md)")
    if summary:
        create_markdown_artifact(markdown=summary, key=key + "-summary",
                                 description=f"checkworthy report {name}: weighted F1 per run")
    return link


def timestamp_name(now: datetime | None = None) -> str:
    """A default report name, run-YYYYmmdd-HHMMSS (UTC)."""
    return (now or datetime.now(UTC)).strftime("run-%Y%m%d-%H%M%S")
