"""The report's analyses of stored runs, computed once and stored (:mod:`checkworthy.store.analyses`
holds their SQL, :mod:`checkworthy.report.analyses` loads them back for rendering).

For each group of runs that differ only in k (:func:`group_key`) the k sweep and the |L| sweep come
from one SQL kNN call per group (each target's neighbour list over the whole labelled pool,
``k_big`` long; see :mod:`checkworthy.method.sweeps`); for each run, the temperature comparison,
the failure modes with examples (:mod:`checkworthy.method.failure_modes`), reliability bins and
score histograms (:mod:`checkworthy.method.bins`). Results go to ``report_analyses`` /
``analysis_metrics`` / ``failure_examples``; an analysis already stored with the same inputs is
reused. Gold labels are taken *as of the
run* (newest label created before the run finished), so a later label correction does not
change an old run's analysis.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import Connection

from checkworthy.data.versioning import git_rev
from checkworthy.method import bins, failure_modes, sweeps
from checkworthy.method.metrics import METHODS
from checkworthy.method.sweeps import Row, SweepInputs
from checkworthy.store.analyses import (
    claim_text,
    existing_analysis,
    lock_group,
    neighbour_rows,
    run_results,
    runs_with_inputs,
    score_param_siblings,
    score_params,
    store_analysis,
)
from checkworthy.store.knn import Pool, neighbour_lists, pool_of
from checkworthy.store.label_updates import labels_as_of
from checkworthy.store.metrics import load_metrics
from checkworthy.store.rows import sha256_text

#: bump when an analysis's computation changes: stored analyses of older versions are not reused
ANALYSIS_VERSION = 1
GROUP_ANALYSES = ("k_sweep", "label_set_size")
RUN_ANALYSES = ("temperature", "failure_modes", "reliability", "histogram")
#: the stored metrics a temperature comparison shows, (method, metric, class)
TEMPERATURE_METRICS = (
    *[(m, "weighted_f1", "all") for m in METHODS],
    ("nnppi", "f1", "0"), ("nnppi", "f1", "1"), ("nnppi", "accuracy", "all"),
    ("baseline", "predicted_positive_rate", "all"), ("nnppi", "predicted_positive_rate", "all"),
    ("baseline", "mean_score", "0"), ("baseline", "mean_score", "1"),
    ("nnppi", "coverage", "all"), ("nnppi", "mean_width", "all"),
)


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
        options: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in known.items()}
        return cls(**options)


def json_hash(value: Any) -> str:
    """sha256 of a value's sorted-key JSON (group keys, analysis parameters)."""
    return sha256_text(json.dumps(value, sort_keys=True, default=str))


def group_key(run: Mapping[str, Any]) -> str:
    """sha256 of a run's identity without k: runs sharing it differ only in k."""
    return json_hash({f: run[f] for f in (
        "target", "label_set_fingerprint", "model_id", "prompt_version", "params_hash", "score_kind",
        "embed_model", "alpha", "threshold", "interval_method", "claims_hash")})


def load_runs(conn: Connection, run_ids: Sequence[int]) -> list[dict[str, Any]]:
    """The runs with everything a report names about their inputs, in report order, each with its
    ``dataset`` and ``group_key``."""
    runs = runs_with_inputs(conn, run_ids)
    for r in runs:
        r["dataset"] = r["target"].split(":")[0]
        r["group_key"] = group_key(r)
    return runs


def temperature_label(t: Any) -> str:
    """How the report names a sampling temperature ("T=0.1", "T=default"): the temperature
    comparison's variants."""
    return "T=default" if t is None else f"T={float(t):g}"



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
        return run_results(self.conn, self.anchor["id"])

    def _load_claim_ids(self) -> np.ndarray:
        return np.array([r["claim_id"] for r in self.get("results")], dtype=np.int64)

    def _load_gold(self) -> np.ndarray | None:
        ids = self.get("claim_ids")
        gold = labels_as_of(self.conn, ids, self.anchor["finished_at"])
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
    rows = [asdict(row) | {"value": None if row.value is None or math.isnan(row.value) else row.value}
            for row in computed.rows]
    return store_analysis(conn, run, analysis, params | {"info": computed.info}, json_hash(params), rows,
                          computed.examples, code_rev, flow_run_id)


def _existing(conn: Connection, run: Mapping[str, Any], analysis: str, params: dict[str, Any]) -> int | None:
    return existing_analysis(conn, run, analysis, json_hash(params), per_group=analysis in GROUP_ANALYSES)


def ensure_analyses(
    conn: Connection, run_ids: Sequence[int], options: AnalysisOptions | None = None,
    flow_run_id: str | None = None, code_rev: str | None = None,
) -> list[int]:
    """Compute (or reuse) every analysis of the runs; return the analysis ids, sorted.

    Runs without gold labels for all their claims (or not complete) get no analyses.
    """
    options = options or AnalysisOptions()
    code_rev = git_rev() if code_rev is None else code_rev
    runs = [r for r in load_runs(conn, run_ids) if r["status"] == "complete" and r["n_results"]]
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[r["group_key"]].append(r)
    ids: list[int] = []
    for gk in sorted(groups):
        grp = groups[gk]
        lock_group(conn, gk)
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
    inp = SweepInputs(y, c, lists, pool, run["alpha"], run["threshold"])
    if analysis == "k_sweep":
        ks = [k for k in sorted(set(o.k_sweep)) if k <= lists.shape[1]]
        return _Computed(sweeps.k_sweep(inp, ks), info={"n_pool": len(pool.ids), "n_targets": len(y)})
    claim_ids = data.get("claim_ids")

    def fallback(rows: np.ndarray, subset: np.ndarray, k: int) -> np.ndarray:
        return neighbour_lists(data.conn, run, claim_ids[rows], k, subset=subset)

    n_pool = len(pool.ids)
    sizes = sorted({s for s in o.sizes if s < n_pool} | {n_pool})
    rows, n_fallback = sweeps.label_set_size_sweep(inp, sizes, o.seeds, o.size_ks, fallback)
    return _Computed(rows, info={"n_pool": n_pool, "sizes": sizes, "n_fallback": n_fallback,
                                 "n_targets": len(y)})


def _temperature_siblings(conn: Connection, run: Mapping[str, Any]) -> dict[str, Any]:
    """Complete runs identical to ``run`` except for the sampling temperature of their scores."""
    own = score_params(conn, run)
    if "temperature" not in own:
        return {"applicable": False}
    rest = {k: v for k, v in own.items() if k != "temperature"}
    found: dict[str, int] = {}
    for r in score_param_siblings(conn, run):
        other = run if r.id == run["id"] else load_runs(conn, [r.id])[0]
        if other["claims_hash"] != run["claims_hash"]:
            continue
        params = own if r.id == run["id"] else score_params(conn, other)
        if "temperature" in params and {k: v for k, v in params.items() if k != "temperature"} == rest:
            found.setdefault(temperature_label(params["temperature"]), r.id)
    found[temperature_label(own["temperature"])] = run["id"]
    return {"applicable": True, "own": temperature_label(own["temperature"]),
            "runs": dict(sorted(found.items()))}


def _compute_run(analysis: str, conn: Connection, run: Mapping[str, Any], data: _GroupData,
                 o: AnalysisOptions, params: dict[str, Any]) -> _Computed:
    if analysis == "temperature":
        return _temperature_rows(conn, run, params["siblings"])
    results = data.get("results")
    y = data.get("gold")
    if y is None:
        return _Computed(info={"skipped": "claims without gold labels"})
    score = np.array([r["score"] for r in results], dtype=float)
    theta = np.array([r["theta"] for r in results], dtype=float)
    knn = np.array([r["knn_mean"] for r in results], dtype=float)
    if analysis == "reliability":
        return _Computed(bins.reliability_rows(y, {"baseline": score, "knn": knn, "nnppi": theta}, o.n_bins))
    if analysis == "histogram":
        return _Computed(bins.histogram_rows(y, {"baseline": score, "nnppi": theta}, params["edges"]))
    return _failure_modes(conn, run, data, o, score, theta, knn)


def _temperature_rows(conn: Connection, run: Mapping[str, Any], siblings: Mapping[str, Any]) -> _Computed:
    rows = []
    for label, rid in siblings.get("runs", {}).items():
        m = load_metrics(conn, rid)
        rows += [Row(meth, met, m[(meth, met, cl)], cls=cl, variant=label, k=run["k"])
                 for meth, met, cl in TEMPERATURE_METRICS if (meth, met, cl) in m]
    return _Computed(rows)


def _failure_modes(conn: Connection, run: Mapping[str, Any], data: _GroupData, o: AnalysisOptions,
                   score: np.ndarray, theta: np.ndarray, knn: np.ndarray) -> _Computed:
    """Counts of each failure mode by gold class, and the clearest examples of each with their
    neighbours."""
    results, y = data.get("results"), data.get("gold")
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
                **claim_text(conn, int(ids[i])),
                "neighbours": _neighbour_details(conn, run, r["neighbour_ids"], r["neighbour_distances"]),
            })
    return _Computed(rows, examples)


def _neighbour_details(conn: Connection, run: Mapping[str, Any], ids: Sequence[int],
                       distances: Sequence[float]) -> list[dict[str, Any]]:
    """Each neighbour's frozen label (label set item), score under the run's key, text, and its
    share of the move from score to theta."""
    rows = neighbour_rows(conn, run, ids, distances)
    effects = failure_modes.neighbour_effects([r.label for r in rows], [r.score for r in rows])
    return [{"rank": int(r.rank), "claim_id": int(r.nid), "source_id": r.source_id, "text": r.text,
             "distance": float(r.dist), "label": int(r.label), "score": float(r.score)} | e
            for r, e in zip(rows, effects)]
