"""What a report reads about stored runs, and its analyses (``report_analyses``, ``analysis_metrics``,
``failure_examples``): the runs with their inputs, results, score parameters, claims' texts,
neighbours, lineage positions, and the analyses stored once per run (or group of runs) and inputs.

Plain values in, rows (mappings) out; the report turns them into tables and figures.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Connection, Row, text

from checkworthy.store.run_spec import DEFAULT_CORRECTION

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


# ---- runs and their inputs --------------------------------------------------------------------


def runs_with_inputs(conn: Connection, run_ids: Sequence[int]) -> list[dict[str, Any]]:
    """The runs with their model, label set, data version, prompt template, result count and the
    sha256 of their claim ids, in report order (target, model, score key, label set, k)."""
    rows = conn.execute(RUNS_SQL, {"ids": [int(i) for i in run_ids]}).mappings()
    # a run's target ids stay in the store; reports name them by count and claims_hash
    return [{k: v for k, v in r.items() if k != "claim_ids"} for r in rows]


def score_params(conn: Connection, run: Mapping[str, Any]) -> dict[str, Any]:
    """The generation parameters behind the run's score key (identical for every row of it)."""
    value = conn.execute(
        text("SELECT params FROM predictions WHERE model_id = :m AND prompt_version = :pv "
             "AND params_hash = :ph LIMIT 1"),
        {"m": run["model_id"], "pv": run["prompt_version"], "ph": run["params_hash"]},
    ).scalar()
    return dict(value or {})


def run_results(conn: Connection, run_id: int) -> list[Mapping[str, Any]]:
    """A run's calibrated results, by claim id."""
    return cast(list[Mapping[str, Any]], list(conn.execute(
        text("""SELECT claim_id, score, theta, ci_low, ci_high, decision, knn_mean, neighbour_ids,
                       neighbour_distances FROM calibrated_results WHERE run_id = :r ORDER BY claim_id"""),
        {"r": run_id}).mappings()))


def score_param_siblings(conn: Connection, run: Mapping[str, Any]) -> Sequence[Row[Any]]:
    """Complete runs (id, params_hash) identical to ``run`` except, possibly, for the generation
    parameters of their scores (same target, label set, model, prompt, score kind, k, alpha,
    threshold, interval, embedding and correction), by id."""
    return conn.execute(
        text("""SELECT r.id, r.params_hash FROM calibration_runs r
                WHERE r.status = 'complete' AND r.target = :t AND r.label_set_fingerprint = :fp
                  AND r.model_id = :m AND r.prompt_version = :pv AND r.score_kind = :sk AND r.k = :k
                  AND r.alpha = :a AND r.threshold = :th AND r.interval_method = :im
                  AND r.embed_model = :em
                  AND coalesce(r.params->>'correction', CAST(:dc AS text)) = :co ORDER BY r.id"""),
        {"t": run["target"], "fp": run["label_set_fingerprint"], "m": run["model_id"],
         "pv": run["prompt_version"], "sk": run["score_kind"], "k": run["k"], "a": run["alpha"],
         "th": run["threshold"], "im": run["interval_method"], "em": run["embed_model"],
         "co": (run["params"] or {}).get("correction", DEFAULT_CORRECTION), "dc": DEFAULT_CORRECTION},
    ).all()


def claim_text(conn: Connection, claim_id: int) -> dict[str, str]:
    """A claim's source id and text."""
    row = conn.execute(text("SELECT c.source_id, t.text FROM claims c JOIN texts t USING (text_hash) "
                            "WHERE c.id = :i"), {"i": claim_id}).one()
    return {"source_id": row.source_id, "text": row.text}


def neighbour_rows(conn: Connection, run: Mapping[str, Any], ids: Sequence[int],
                   distances: Sequence[float]) -> Sequence[Row[Any]]:
    """Each neighbour (rank, nid, dist, source_id, text) with its frozen label (label set item) and
    its score under the run's key, nearest first."""
    return conn.execute(
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


def lineage_position(conn: Connection, label_set_id: int) -> Any | None:
    """The label set's place in its lineage (name, id, reason, n = its version number), or None when
    it has none or the database predates lineages (migration 0003's ``label_set_versions``)."""
    if conn.execute(text("SELECT to_regclass('label_set_versions')")).scalar() is None:
        return None
    return conn.execute(
        text("""SELECT v.name, v.id, v.reason,
                       (SELECT count(*) FROM label_set_versions w WHERE w.name = v.name AND w.id <= v.id) AS n
                FROM label_set_versions v WHERE v.label_set_id = :ls ORDER BY v.id LIMIT 1"""),
        {"ls": label_set_id}).first()


# ---- analyses (writes) ------------------------------------------------------------------------


def lock_group(conn: Connection, group_key: str) -> None:
    """Serialise, until the transaction ends, the analyses of one group of runs."""
    conn.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"), {"k": "report:" + group_key})


def existing_analysis(conn: Connection, run: Mapping[str, Any], analysis: str, params_hash: str,
                      per_group: bool) -> int | None:
    """The stored analysis with these inputs: of the run's group (the earliest) or of the run."""
    if per_group:
        sql = ("SELECT id FROM report_analyses WHERE group_key = :g AND analysis = :a "
               "AND params_hash = :ph ORDER BY id LIMIT 1")
    else:
        sql = "SELECT id FROM report_analyses WHERE run_id = :r AND analysis = :a AND params_hash = :ph"
    return conn.execute(text(sql), {"g": run["group_key"], "r": run["id"], "a": analysis,
                                    "ph": params_hash}).scalar()


def store_analysis(conn: Connection, run: Mapping[str, Any], analysis: str, params: Mapping[str, Any],
                   params_hash: str, rows: Sequence[Mapping[str, Any]], examples: Sequence[Mapping[str, Any]],
                   code_rev: str, flow_run_id: str | None) -> int:
    """Insert one analysis with its metric rows (``analysis_metrics`` columns, ``cls`` for class) and
    failure examples (``neighbours`` a JSON-ready list); return its id."""
    aid: int = conn.execute(
        text("""INSERT INTO report_analyses (run_id, group_key, analysis, params, params_hash, code_rev,
                flow_run_id) VALUES (:r, :g, :a, CAST(:p AS jsonb), :ph, :cr, :fr) RETURNING id"""),
        {"r": run["id"], "g": run["group_key"], "a": analysis,
         "p": json.dumps(params, sort_keys=True, default=str), "ph": params_hash,
         "cr": code_rev, "fr": flow_run_id},
    ).scalar_one()
    if rows:
        conn.execute(
            text("""INSERT INTO analysis_metrics (analysis_id, run_id, variant, k, n_labelled, seed, bin,
                    method, metric, class, statistic, value)
                    VALUES (:a, :r, :variant, :k, :n_labelled, :seed, :bin, :method, :metric, :cls,
                    :statistic, :value)"""),
            [{"a": aid, "r": run["id"]} | dict(row) for row in rows],
        )
    if examples:
        conn.execute(
            text("""INSERT INTO failure_examples (analysis_id, run_id, category, rank, claim_id, source_id,
                    text, gold, score, theta, ci_low, ci_high, knn_mean, baseline_decision, nnppi_decision,
                    neighbours) VALUES (:a, :r, :category, :rank, :claim_id, :source_id, :text, :gold,
                    :score, :theta, :ci_low, :ci_high, :knn_mean, :baseline_decision, :nnppi_decision,
                    CAST(:neighbours AS jsonb))"""),
            [{"a": aid, "r": run["id"]} | dict(e) | {"neighbours": json.dumps(e["neighbours"])}
             for e in examples],
        )
    return aid


# ---- analyses (reads) -------------------------------------------------------------------------


def analysis_heads(conn: Connection, analysis_ids: Sequence[int]) -> list[Mapping[str, Any]]:
    """The ``report_analyses`` rows with these ids, by id."""
    return cast(list[Mapping[str, Any]], conn.execute(
        text("SELECT * FROM report_analyses WHERE id = ANY(:i) ORDER BY id"),
        {"i": [int(i) for i in analysis_ids]}).mappings().all())


def earliest_analysis_heads(conn: Connection, group_keys: Sequence[str], group_analyses: Sequence[str],
                            run_ids: Sequence[int], run_analyses: Sequence[str]) -> list[Mapping[str, Any]]:
    """The earliest analysis of each kind of each group and of each run, by id."""
    return cast(list[Mapping[str, Any]], conn.execute(
        text("""SELECT * FROM report_analyses WHERE id IN (
                  SELECT min(id) FROM report_analyses WHERE group_key = ANY(:g)
                    AND analysis = ANY(:ga) GROUP BY group_key, analysis
                  UNION
                  SELECT min(id) FROM report_analyses WHERE run_id = ANY(:r)
                    AND analysis = ANY(:ra) GROUP BY run_id, analysis) ORDER BY id"""),
        {"g": list(group_keys), "ga": list(group_analyses), "r": list(run_ids),
         "ra": list(run_analyses)}).mappings().all())


def analysis_metric_rows(conn: Connection, analysis_ids: Sequence[int]) -> list[Mapping[str, Any]]:
    """The ``analysis_metrics`` rows of these analyses."""
    return cast(list[Mapping[str, Any]], conn.execute(
        text("SELECT * FROM analysis_metrics WHERE analysis_id = ANY(:i)"),
        {"i": list(analysis_ids)}).mappings().all())


def failure_example_rows(conn: Connection, analysis_ids: Sequence[int]) -> list[Mapping[str, Any]]:
    """The ``failure_examples`` of these analyses, by analysis, category and rank."""
    return cast(list[Mapping[str, Any]], conn.execute(
        text("SELECT * FROM failure_examples WHERE analysis_id = ANY(:i) "
             "ORDER BY analysis_id, category, rank"),
        {"i": list(analysis_ids)}).mappings().all())
