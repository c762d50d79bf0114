"""Incremental recalibration: after a label change, recompute only the claims it can affect.

A calibration result of claim t depends on t's score and on its k nearest labelled claims
(ids, labels, scores). Against the previous complete run P of the same calibration (same
target, score key, k, alpha, threshold, interval, embedding model; an earlier version of the
same label-set lineage), the labelled pool changed by

- ``added``:   claims now eligible as neighbours that P could not see;
- ``removed``: claims P could see that are no longer eligible;
- ``changed``: claims in both whose label (or score) differs.

Then, exactly:

- t's neighbour list can only change if an added claim is nearer than t's k-th neighbour in P
  (ties broken by claim id, as in the SQL kNN): its new list is the top k of P's list plus
  those added claims, so no kNN over the whole pool is needed;
- t's values change if a neighbour's label or score changed (same neighbours, new residuals);
- a removed neighbour leaves a gap only a real kNN can fill: those claims, and claims new to
  the target, go through the same SQL kNN (``nearest_labelled``) restricted to them.

Every other row is copied from P in SQL. The new run has the same run key as a full run on the
same inputs (so a later full run reuses it), ``mode = 'incremental'``, ``parent_run_id = P``;
copied rows keep the id of the run that computed them in ``computed_in_run``. Distances come
from the same pgvector expression as the full kNN, so the result equals a full recomputation.

To be safe when P's pool is not known exactly (a score or embedding stored while P ran), the
sets are over-approximated: a claim counts as added unless its score and embedding predate P,
and as removed if it is eligible now under P's label set but not under the new one. Treating an
old neighbour as added, or a non-neighbour as removed, costs work, never correctness.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import Connection, Engine, text

from checkworthy import calibration
from checkworthy.calibrate import RunContext, RunSpec, find_complete_run, run_calibration
from checkworthy.evaluate import metric_rows, store_metrics
from checkworthy.knn_sql import nearest_labelled
from checkworthy.store import ScoreKey, claim_scores, current_labels, sha256_text

#: above this share of added claims in the new pool a full run is cheaper
MAX_ADDED_SHARE = 0.5

POOL_SQL = text(
    """
SELECT i.claim_id, i.label, p.score, greatest(p.created_at, e.created_at) AS since
FROM label_set_items i
JOIN claims c ON c.id = i.claim_id
JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :em
JOIN predictions p ON p.text_hash = c.text_hash AND p.model_id = :m AND p.prompt_version = :pv
     AND p.params_hash = :ph AND p.score_kind = :sk AND p.score IS NOT NULL
WHERE i.label_set_id = :ls
"""
)

#: (target, added claim, distance) for every added claim that enters the target's top k. The
#: added claims are the small side (materialised once, scanned per target in memory); ``OFFSET 0``
#: keeps the planner from flattening the lateral and rescanning the targets instead.
ENTERING_SQL = text(
    """
WITH a AS MATERIALIZED (
    SELECT c.id AS claim_id, e.embedding
    FROM unnest(CAST(:added AS bigint[])) AS u(id)
    JOIN claims c ON c.id = u.id
    JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :em
)
SELECT r.claim_id, x.claim_id AS neighbor_id, x.distance
FROM calibrated_results r
JOIN unnest(CAST(:targets AS bigint[])) AS u(id) ON u.id = r.claim_id
JOIN claims c ON c.id = r.claim_id
JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :em
CROSS JOIN LATERAL (SELECT a.claim_id, a.embedding <=> e.embedding AS distance FROM a OFFSET 0) x
WHERE r.run_id = :parent
  AND (x.distance, x.claim_id) < (r.neighbor_distances[:k], r.neighbor_ids[:k])
"""
)

#: a chunk of the parent's rows as one bytea of fixed-size records (claim id, the k neighbour ids,
#: the k distances, ``vector_send`` image): one fetch per chunk instead of one message per row
TARGETS_CHUNK_SQL = """
SELECT string_agg(int8send(r.claim_id) || {neighbours} || vector_send(e.embedding), ''::bytea)
FROM calibrated_results r
JOIN claims c ON c.id = r.claim_id
JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = %s
WHERE r.run_id = %s AND r.claim_id BETWEEN %s AND %s"""
VECTORS_SQL = """
SELECT string_agg(int8send(c.id) || vector_send(e.embedding), ''::bytea)
FROM claims c JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = %s
WHERE c.id = ANY(%s)"""
#: margin of the vector prefilter: far above float32 rounding (~1e-5) in pgvector's distance
PREFILTER_MARGIN = 1e-3

COLUMNS = ("run_id", "claim_id", "score", "theta", "ci_low", "ci_high", "decision", "knn_mean",
           "neighbor_ids", "neighbor_distances")


@dataclass
class RecalOutcome:
    """How a calibration was brought up to date."""

    run_id: int
    mode: str  # "reused", "full" or "incremental"
    parent_run_id: int | None = None
    n_recomputed: int = 0
    n_copied: int = 0
    recomputed: list[int] = field(default_factory=list)
    changes: dict[str, int] = field(default_factory=dict)


@dataclass
class Plan:
    """Which claims an incremental run recomputes, and how."""

    parent_run_id: int
    scores: dict[int, float]
    pool: dict[int, tuple[int, float]]
    knn: list[int]
    merge: list[int]
    keep: list[int]
    entering: pd.DataFrame
    changes: dict[str, int]
    #: the parent's neighbour lists (ids, (n, k) ids, (n, k) distances) when they were streamed
    parent_nb: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def recomputed(self) -> list[int]:
        return sorted(set(self.knn) | set(self.merge))


def _key_params(spec: RunSpec) -> dict[str, Any]:
    return {"m": spec.key.model_id, "pv": spec.key.prompt_version, "ph": spec.key.params_hash,
            "sk": spec.key.score_kind, "em": spec.embed_model}


def find_parent(conn: Connection, spec: RunSpec) -> int | None:
    """The newest complete run of the same calibration on an earlier version of the same lineage."""
    return conn.execute(
        text(
            """SELECT r.id FROM calibration_runs r JOIN label_sets ls ON ls.id = r.label_set_id
               WHERE r.status = 'complete' AND r.target = :t
                 AND ls.name = (SELECT name FROM label_sets WHERE id = :ls)
                 AND r.model_id = :m AND r.prompt_version = :pv AND r.params_hash = :ph
                 AND r.score_kind = :sk AND r.embed_model = :em AND r.k = :k AND r.alpha = :a
                 AND r.threshold = :th AND r.interval_method = :im
               ORDER BY r.id DESC LIMIT 1"""
        ),
        _key_params(spec) | {"t": spec.target, "ls": spec.label_set_id, "k": spec.k, "a": spec.alpha,
                             "th": spec.threshold, "im": spec.interval_method},
    ).scalar()


def _pool(conn: Connection, label_set_id: int, spec: RunSpec) -> pd.DataFrame:
    rows = conn.execute(POOL_SQL, _key_params(spec) | {"ls": label_set_id}).all()
    return pd.DataFrame(rows, columns=["claim_id", "label", "score", "since"]).set_index("claim_id")


def plan(conn: Connection, spec: RunSpec, parent_run_id: int) -> Plan:
    """Find the claims whose neighbours or neighbours' labels/scores changed since the parent run."""
    parent = conn.execute(text("SELECT label_set_id, started_at FROM calibration_runs WHERE id = :i"),
                          {"i": parent_run_id}).one()
    # a target's score is in the parent's row (same score key: stored scores never change)
    in_parent = dict(conn.execute(text("SELECT claim_id, score FROM calibrated_results WHERE run_id = :p"),
                                  {"p": parent_run_id}).all())
    wanted = set(spec.claim_ids)
    scores = {i: s for i, s in in_parent.items() if i in wanted}
    others = [i for i in spec.claim_ids if i not in in_parent]
    stored = claim_scores(conn, others, spec.key.model_id, spec.key.prompt_version, spec.key.params_hash,
                          spec.key.score_kind) if others else {}
    scores |= {i: s for i, s in stored.items() if s is not None}
    new, old = _pool(conn, spec.label_set_id, spec), _pool(conn, parent.label_set_id, spec)
    old_strict = set(old.index[old["since"] < parent.started_at])
    added = sorted(set(new.index) - old_strict)
    removed = sorted(set(old.index) - set(new.index))
    both = new.index.intersection(old.index)
    differs = ((new.loc[both, "label"] != old.loc[both, "label"])
               | (new.loc[both, "score"] != old.loc[both, "score"]))
    changed = sorted(both[differs.to_numpy()])
    usable = set(scores)
    kept = sorted(usable & in_parent.keys())
    need_knn = set(usable - in_parent.keys())
    touched: set[int] = set()
    if removed or changed:
        rows = conn.execute(
            text(
                """SELECT claim_id, neighbor_ids && CAST(:rm AS bigint[]) AS lost FROM calibrated_results
                   WHERE run_id = :p AND neighbor_ids && CAST(:bad AS bigint[])"""
            ),
            {"p": parent_run_id, "rm": removed, "bad": removed + changed},
        ).all()
        for r in rows:
            if r.claim_id in usable:
                (need_knn if r.lost else touched).add(r.claim_id)
    entering = pd.DataFrame(columns=["claim_id", "neighbor_id", "distance"])
    parent_nb = None
    if added:
        entering, parent_nb = _entering(conn, spec, parent_run_id, added, kept)
        touched |= set(entering["claim_id"].tolist())
    merge = sorted(touched - need_knn)
    recomputed = need_knn | touched
    pool = dict(zip(new.index.astype(int).tolist(),
                    zip(new["label"].astype(int).tolist(), new["score"].astype(float).tolist())))
    changes = {"added": len(added), "removed": len(removed), "changed": len(changed)}
    return Plan(parent_run_id, scores, pool, sorted(need_knn), merge,
                [i for i in kept if i not in recomputed], entering, changes, parent_nb)


def _entering(conn: Connection, spec: RunSpec, parent_run_id: int, added: list[int],
              kept: list[int]) -> tuple[pd.DataFrame, tuple[np.ndarray, ...] | None]:
    """(target, added claim, distance) of every added labelled claim that enters a target's top k.

    Exact, in two steps: a vector prefilter over all targets at once (the parent's rows and their
    vectors fetched in a few large chunks, one float32 matrix product with the added claims' vectors),
    generous by ``PREFILTER_MARGIN``; then each surviving pair's distance from pgvector itself
    (the expression the SQL kNN orders by) and the exact test ``(distance, id) < (k-th distance,
    k-th id)``. Falls back to the all-SQL ``ENTERING_SQL`` if the stream is not as expected.
    Also returns the streamed neighbour lists of the parent (the merge step needs them).
    """
    cols = ["claim_id", "neighbor_id", "distance"]
    if not kept:
        return pd.DataFrame(columns=cols), None
    try:
        t_ids, nids, nds, t_vec = _stream_targets(conn, spec, parent_run_id, kept)
        a_ids, a_vec = _vectors(conn, added, spec.embed_model)
    except ValueError:
        rows = conn.execute(ENTERING_SQL, {"added": added, "targets": kept, "em": spec.embed_model,
                                           "k": spec.k, "parent": parent_run_id}).all()
        return pd.DataFrame(rows, columns=cols), None
    keep = np.isin(t_ids, np.asarray(kept, dtype=np.int64))
    t_ids, nids, nds, t_vec = t_ids[keep], nids[keep], nds[keep], t_vec[keep]
    dk, kid = nds[:, -1], nids[:, -1]
    t_vec /= np.linalg.norm(t_vec, axis=1, keepdims=True)
    a_vec /= np.linalg.norm(a_vec, axis=1, keepdims=True)
    pairs_t, pairs_a = [], []
    for start in range(0, len(t_ids), 20_000):
        dist = 1.0 - t_vec[start:start + 20_000] @ a_vec.T
        i, j = np.nonzero(dist <= dk[start:start + 20_000, None] + PREFILTER_MARGIN)
        pairs_t.append(t_ids[start + i])
        pairs_a.append(a_ids[j])
    cand_t = np.concatenate(pairs_t) if pairs_t else np.zeros(0, np.int64)
    cand_a = np.concatenate(pairs_a) if pairs_a else np.zeros(0, np.int64)
    if not len(cand_t):
        return pd.DataFrame(columns=cols), (t_ids, nids, nds)
    exact = pd.DataFrame(conn.execute(
        text(
            """SELECT u.t AS claim_id, u.a AS neighbor_id, ea.embedding <=> et.embedding AS distance
               FROM unnest(CAST(:t AS bigint[]), CAST(:a AS bigint[])) AS u(t, a)
               JOIN claims ct ON ct.id = u.t
               JOIN embeddings et ON et.text_hash = ct.text_hash AND et.model = :em
               JOIN claims ca ON ca.id = u.a
               JOIN embeddings ea ON ea.text_hash = ca.text_hash AND ea.model = :em"""
        ),
        {"t": cand_t.tolist(), "a": cand_a.tolist(), "em": spec.embed_model},
    ).all(), columns=cols)
    bound = pd.DataFrame({"claim_id": t_ids, "dk": dk, "kid": kid})
    exact = exact.merge(bound, on="claim_id")
    enters = (exact["distance"] < exact["dk"]) | ((exact["distance"] == exact["dk"])
                                                   & (exact["neighbor_id"] < exact["kid"]))
    return exact.loc[enters, cols].reset_index(drop=True), (t_ids, nids, nds)


def _stream_targets(conn: Connection, spec: RunSpec, parent_run_id: int,
                    claim_ids: list[int]) -> tuple[np.ndarray, ...]:
    """(claim ids, (n, k) neighbour ids, (n, k) distances, vectors) of the parent's rows, by chunks."""
    k = int(spec.k)
    neighbours = " || ".join([f"int8send(r.neighbor_ids[{i}])" for i in range(1, k + 1)]
                             + [f"float8send(r.neighbor_distances[{i}])" for i in range(1, k + 1)])
    sql = TARGETS_CHUNK_SQL.format(neighbours=neighbours)
    ids_sorted = sorted(claim_ids)
    parts = []
    with conn.connection.driver_connection.cursor(binary=True) as cur:
        for start in range(0, len(ids_sorted), 20_000):
            chunk = ids_sorted[start:start + 20_000]
            cur.execute(sql, (spec.embed_model, parent_run_id, chunk[0], chunk[-1]))
            (blob,) = cur.fetchone()
            if blob:
                rows = _records(blob, [("id", ">i8"), ("nid", ">i8", (k,)), ("nd", ">f8", (k,))])
                parts.append((rows["id"].astype(np.int64), rows["nid"].astype(np.int64),
                              rows["nd"].astype(float), rows["v"].astype(np.float32)))
    if not parts:
        raise ValueError("no parent rows to stream")
    return tuple(np.concatenate(col) for col in zip(*parts))


def _vectors(conn: Connection, claim_ids: list[int], embed_model: str) -> tuple[np.ndarray, np.ndarray]:
    """(claim ids, vectors) of a few claims."""
    with conn.connection.driver_connection.cursor(binary=True) as cur:
        cur.execute(VECTORS_SQL, (embed_model, list(map(int, claim_ids))))
        (blob,) = cur.fetchone()
    if not blob:
        raise ValueError("no vectors")
    rows = _records(blob, [("id", ">i8")])
    return rows["id"].astype(np.int64), rows["v"].astype(np.float32)


def _records(blob: bytes, head: list[tuple[str, str]]) -> np.ndarray:
    """Fixed-size records: the ``head`` fields, then a ``vector_send`` image (int16 dim, int16 unused,
    dim float4; all big-endian). Raises ValueError if the records do not have one common size."""
    at = np.dtype(head).itemsize
    dim = int.from_bytes(blob[at:at + 2], "big")
    dt = np.dtype(head + [("dim", ">i2"), ("unused", ">i2"), ("v", ">f4", (dim,))])
    n, rest = divmod(len(blob), dt.itemsize)
    if rest or not n:
        raise ValueError("records of different sizes")
    rows = np.frombuffer(blob, dtype=dt)
    if (rows["dim"] != dim).any():
        raise ValueError("vectors of different dimensions")
    return rows


def _merge_neighbours(conn: Connection, spec: RunSpec, p: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """New top-k of the merge claims: the parent's k neighbours plus the added claims that enter."""
    k = spec.k
    if p.parent_nb is not None:
        t_ids, nids, nds = p.parent_nb
        sel = np.isin(t_ids, np.asarray(p.merge, dtype=np.int64))
        ids, nid, nd = t_ids[sel], nids[sel], nds[sel]
    else:
        rows = conn.execute(
            text("""SELECT claim_id, neighbor_ids, neighbor_distances FROM calibrated_results
                    WHERE run_id = :p AND claim_id = ANY(:c)"""),
            {"p": p.parent_run_id, "c": p.merge},
        ).all()
        ids = np.array([r.claim_id for r in rows], dtype=np.int64)
        nid = np.array([r.neighbor_ids for r in rows], dtype=np.int64).reshape(-1, k)
        nd = np.array([r.neighbor_distances for r in rows], dtype=float).reshape(-1, k)
    old = pd.DataFrame({"claim_id": np.repeat(ids, k), "neighbor_id": nid.ravel(), "distance": nd.ravel()})
    enter = p.entering[p.entering["claim_id"].isin(set(p.merge))]
    cand = pd.concat([old, enter], ignore_index=True).astype({"claim_id": np.int64, "neighbor_id": np.int64,
                                                               "distance": float})
    cand = cand.drop_duplicates(["claim_id", "neighbor_id"])
    cand = cand.sort_values(["claim_id", "distance", "neighbor_id"], kind="mergesort")
    top = cand.groupby("claim_id", sort=True).head(k)
    ids = top["claim_id"].to_numpy()[::k]
    if len(top) != len(ids) * k or len(ids) != len(p.merge):
        raise RuntimeError("incremental merge lost neighbours: the parent run is inconsistent")
    return ids, top["neighbor_id"].to_numpy().reshape(-1, k), top["distance"].to_numpy().reshape(-1, k)


def compute_incremental(conn: Connection, spec: RunSpec, p: Plan) -> list[tuple]:
    """Result rows (without run id) of the recomputed claims."""
    parts = []
    if p.knn:
        nb = nearest_labelled(conn, spec.label_set_id, p.knn, spec.k, spec.key, embed_model=spec.embed_model)
        parts.append((nb.claim_ids, nb.neighbor_ids, nb.distances, nb.labels, nb.scores))
    if p.merge:
        ids, nid, dist = _merge_neighbours(conn, spec, p)
        pool_ids = np.array(sorted(p.pool), dtype=np.int64)
        at = np.searchsorted(pool_ids, nid)
        if (at >= len(pool_ids)).any() or (pool_ids[np.minimum(at, len(pool_ids) - 1)] != nid).any():
            raise RuntimeError("a merged neighbour is not in the labelled pool")
        lab = np.array([p.pool[int(i)][0] for i in pool_ids], dtype=np.int64)[at]
        sc = np.array([p.pool[int(i)][1] for i in pool_ids], dtype=float)[at]
        parts.append((ids, nid, dist, lab, sc))
    out: list[tuple] = []
    for ids, nid, dist, lab, sc in parts:
        c = np.array([p.scores[int(i)] for i in ids], dtype=float)
        res = calibration.nnppi(c, lab, sc, spec.alpha, spec.threshold)
        out += [(int(ids[i]), float(res.score[i]), float(res.theta[i]), float(res.ci_low[i]),
                 float(res.ci_high[i]), bool(res.decision[i]), float(res.knn_mean[i]),
                 [int(x) for x in nid[i]], [float(x) for x in dist[i]])
                for i in range(len(ids))]
    return out


def _copy_line(run_id: int, row: tuple) -> str:
    """One row in COPY text format; ``repr`` of a float round-trips exactly through float8 input."""
    cid, score, theta, lo, hi, decision, km, nids, dists = row
    return (f"{run_id}\t{cid}\t{score!r}\t{theta!r}\t{lo!r}\t{hi!r}\t{'t' if decision else 'f'}\t{km!r}\t"
            f"{{{','.join(map(str, nids))}}}\t{{{','.join(map(repr, dists))}}}\n")


def _copy_rows(conn: Connection, run_id: int, rows: Sequence[tuple]) -> None:
    """Bulk-insert result rows with COPY (row-by-row INSERT is the slow part at 100k rows)."""
    raw = conn.connection.driver_connection
    with raw.cursor() as cur, cur.copy(f"COPY calibrated_results ({', '.join(COLUMNS)}) FROM STDIN") as cp:
        for start in range(0, len(rows), 5000):
            cp.write("".join(_copy_line(run_id, r) for r in rows[start:start + 5000]))


def _store(conn: Connection, spec: RunSpec, run_id: int, p: Plan, rows: Sequence[tuple]) -> None:
    conn.execute(
        text(
            f"""INSERT INTO calibrated_results ({', '.join(COLUMNS)}, computed_in_run)
                SELECT :new, r.claim_id, r.score, r.theta, r.ci_low, r.ci_high, r.decision, r.knn_mean,
                       r.neighbor_ids, r.neighbor_distances, coalesce(r.computed_in_run, r.run_id)
                FROM calibrated_results r JOIN unnest(CAST(:keep AS bigint[])) AS u(id) ON u.id = r.claim_id
                WHERE r.run_id = :p"""
        ),
        {"new": run_id, "keep": p.keep, "p": p.parent_run_id},
    )
    _copy_rows(conn, run_id, rows)
    n_cal = len(p.keep) + len(rows)
    ids = sorted(p.keep + [r[0] for r in rows])
    gold = current_labels(conn, ids)
    if len(gold) == len(ids) and ids:
        res = conn.execute(
            text("""SELECT claim_id, score, theta, ci_low, ci_high, decision, knn_mean FROM calibrated_results
                    WHERE run_id = :r ORDER BY claim_id"""), {"r": run_id}).all()
        arr = {c: np.array([getattr(r, c) for r in res], dtype=float)
               for c in ("score", "theta", "ci_low", "ci_high", "knn_mean")}
        result = calibration.NNPPIResult(
            score=arr["score"], theta=arr["theta"], ci_low=arr["ci_low"], ci_high=arr["ci_high"],
            knn_mean=arr["knn_mean"], decision=np.array([int(r.decision) for r in res]),
            knn_decision=calibration.decide(arr["knn_mean"], spec.threshold),
            baseline_decision=calibration.decide(arr["score"], spec.threshold))
        store_metrics(conn, run_id, metric_rows(np.array([gold[i] for i in ids]), result))
    counts = {"n_claims": len(spec.claim_ids), "n_calibrated": n_cal,
              "n_without_score": len(spec.claim_ids) - n_cal, "n_recomputed": len(rows),
              "n_copied": len(p.keep)} | {f"n_{k}_labelled": v for k, v in p.changes.items()}
    conn.execute(
        text("""UPDATE calibration_runs SET status = 'complete', finished_at = now(),
                params = params || CAST(:p AS jsonb) WHERE id = :i"""),
        {"i": run_id, "p": json.dumps(counts)},
    )


def _start(conn: Connection, spec: RunSpec, key: str, fingerprint: str, ctx: RunContext,
           parent_run_id: int) -> int:
    return conn.execute(
        text(
            """INSERT INTO calibration_runs (run_key, target, label_set_id, label_set_fingerprint,
               model_id, prompt_version, params_hash, score_kind, embed_model, k, alpha, threshold,
               interval_method, params, status, flow_run_id, code_rev, data_version_id, parent_run_id,
               mode)
               VALUES (:key, :t, :ls, :fp, :m, :pv, :ph, :sk, :em, :k, :a, :th, :im, CAST(:p AS jsonb),
               'running', :fr, :cr, :dv, :parent, 'incremental') RETURNING id"""
        ),
        _key_params(spec) | {
            "key": key, "t": spec.target, "ls": spec.label_set_id, "fp": fingerprint, "k": spec.k,
            "a": spec.alpha, "th": spec.threshold, "im": spec.interval_method,
            "p": json.dumps(ctx.extra | {"n_claims": len(spec.claim_ids)}), "fr": ctx.flow_run_id,
            "cr": ctx.code_rev, "dv": ctx.data_version_id, "parent": parent_run_id},
    ).scalar_one()


def fast_run_key(spec: RunSpec, fingerprint: str) -> str:
    """:func:`checkworthy.calibrate.run_key`, without ``asdict`` deep-copying 100k claim ids.

    Must equal ``run_key`` (tests check it): an incremental run and a full run of the same inputs
    share one key, so either is reused by the other.
    """
    body: dict[str, Any] = {f.name: getattr(spec, f.name) for f in fields(spec)}
    body |= {"key": asdict(spec.key), "claim_ids": sorted(spec.claim_ids), "fingerprint": fingerprint,
             "label_set_id": None}
    return sha256_text(json.dumps(body, sort_keys=True, default=str))


def recalibrate(
    engine: Engine, spec: RunSpec, ctx: RunContext | None = None, parent_run_id: int | None = None,
    validation_run_id: int | None = None, force_full: bool = False,
) -> RecalOutcome:
    """Bring calibration ``spec`` up to date: reuse it, recompute it incrementally from a parent run,
    or run it in full. ``validation_run_id`` (the suite run that cleared the label set) is kept in
    the run's params."""
    ctx = ctx or RunContext()
    if validation_run_id is not None:
        ctx = replace(ctx, extra=ctx.extra | {"validation_run_id": validation_run_id})
    with engine.connect() as lock:
        fingerprint = lock.execute(text("SELECT fingerprint FROM label_sets WHERE id = :i"),
                                   {"i": spec.label_set_id}).scalar_one()
        key = fast_run_key(spec, fingerprint)
        existing = find_complete_run(lock, key)
        parent = None if force_full else (parent_run_id or find_parent(lock, spec))
        lock.commit()
    if existing is not None:
        return RecalOutcome(existing, "reused")
    if parent is None:
        run_id = run_calibration(engine, spec, ctx)
        return RecalOutcome(run_id, "full", n_recomputed=len(spec.claim_ids))
    with engine.connect() as lock:
        lock.execute(text("SELECT pg_advisory_lock(hashtextextended(:k, 0))"), {"k": key})
        lock.commit()
        try:
            existing = find_complete_run(lock, key)
            lock.commit()
            if existing is not None:
                return RecalOutcome(existing, "reused")
            with engine.connect() as conn:
                p = plan(conn, spec, parent)
                conn.commit()
            if p.changes["added"] > MAX_ADDED_SHARE * max(len(p.pool), 1):
                lock.execute(text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))"), {"k": key})
                lock.commit()
                return recalibrate(engine, spec, ctx, force_full=True)
            with engine.begin() as conn:
                run_id = _start(conn, spec, key, fingerprint, ctx, parent)
            try:
                with engine.begin() as conn:
                    rows = compute_incremental(conn, spec, p)
                    _store(conn, spec, run_id, p, rows)
            except BaseException:
                with engine.begin() as conn:
                    conn.execute(text("UPDATE calibration_runs SET status = 'failed', finished_at = now() "
                                      "WHERE id = :i"), {"i": run_id})
                raise
            return RecalOutcome(run_id, "incremental", parent, len(rows), len(p.keep), p.recomputed,
                                p.changes)
        finally:
            lock.execute(text("SELECT pg_advisory_unlock(hashtextextended(:k, 0))"), {"k": key})
            lock.commit()


# --------------------------------------------------------------------------- what is in force


def runs_in_force(conn: Connection, label_set_name: str) -> list[Any]:
    """The newest complete run of every calibration (target x score key x k x ...) of a lineage's targets.

    Only the newest prompt version per model and score kind counts: a guideline change supersedes
    the calibrations made under the older prompt.
    """
    return list(conn.execute(
        text(
            """WITH r AS (
                 SELECT r.*, row_number() OVER (
                   PARTITION BY r.target, r.model_id, r.params_hash, r.score_kind, r.embed_model, r.k,
                                r.alpha, r.threshold, r.interval_method ORDER BY r.id DESC) AS n,
                   rank() OVER (PARTITION BY r.target, r.model_id, r.score_kind
                                ORDER BY pv.created_at DESC) AS prompt_rank
                 FROM calibration_runs r JOIN calibration_targets t ON t.name = r.target
                 JOIN label_sets ls ON ls.id = r.label_set_id AND ls.name = t.label_set_name
                 JOIN prompt_versions pv ON pv.id = r.prompt_version
                 WHERE t.label_set_name = :n AND r.status = 'complete')
               SELECT * FROM r WHERE n = 1 AND prompt_rank = 1 ORDER BY id"""
        ),
        {"n": label_set_name},
    ).mappings())


def spec_from_run(run: Any, label_set_id: int, claim_ids: Sequence[int]) -> RunSpec:
    """The same calibration as ``run`` on another label set and the target's current claims."""
    return RunSpec(
        target=run["target"], claim_ids=tuple(sorted(claim_ids)), label_set_id=label_set_id,
        key=ScoreKey(run["model_id"], run["prompt_version"], run["params_hash"], run["score_kind"]),
        k=run["k"], alpha=run["alpha"], threshold=run["threshold"], interval_method=run["interval_method"],
        embed_model=run["embed_model"],
    )


def recalibrate_lineage(
    engine: Engine, label_set_name: str, label_set_id: int, ctx: RunContext | None = None,
    validation_run_id: int | None = None,
) -> list[RecalOutcome]:
    """Recalibrate every calibration in force for a lineage's targets on its (new) label set."""
    from checkworthy.labels import target_claim_ids

    with engine.connect() as conn:
        runs = runs_in_force(conn, label_set_name)
        targets = target_claim_ids(conn, label_set_name)
    return [recalibrate(engine, spec_from_run(r, label_set_id, targets[r["target"]]), ctx,
                        parent_run_id=r["id"], validation_run_id=validation_run_id)
            for r in runs if r["target"] in targets]


def targets_needing_work(conn: Connection, label_set_names: Sequence[str] | None = None) -> list[str]:
    """Targets with no complete run yet, or with more claims than their newest complete run covered.

    Cheap enough to run on every schedule tick, so that loading a model is skipped when nothing
    has arrived.
    """
    return list(conn.execute(
        text(
            """SELECT DISTINCT t.name FROM calibration_targets t
               LEFT JOIN LATERAL (SELECT (r.params->>'n_claims')::int AS n FROM calibration_runs r
                                  JOIN label_sets ls ON ls.id = r.label_set_id
                                  WHERE r.target = t.name AND ls.name = t.label_set_name
                                    AND r.status = 'complete'
                                  ORDER BY r.id DESC LIMIT 1) last ON true
               WHERE (last.n IS NULL
                      OR last.n < (SELECT count(*) FROM target_claims tc WHERE tc.target = t.name))
                 AND (CAST(:names AS text[]) IS NULL OR t.label_set_name = ANY(CAST(:names AS text[])))
               ORDER BY t.name"""
        ),
        {"names": list(label_set_names) if label_set_names is not None else None},
    ).scalars())


def unscored_in_force(conn: Connection, label_set_name: str, label_set_id: int) -> dict[str, list[int]]:
    """Claims of a label set with no stored prediction under a score key in force, by model spec.

    Newly labelled claims must be scored (and embedded) before they can act as neighbours.
    """
    out: dict[str, list[int]] = {}
    for run in runs_in_force(conn, label_set_name):
        ids = conn.execute(
            text(
                """SELECT i.claim_id FROM label_set_items i JOIN claims c ON c.id = i.claim_id
                   WHERE i.label_set_id = :ls AND NOT EXISTS (
                     SELECT 1 FROM predictions p WHERE p.text_hash = c.text_hash AND p.model_id = :m
                       AND p.prompt_version = :pv AND p.params_hash = :ph AND p.score_kind = :sk)"""
            ),
            {"ls": label_set_id, "m": run["model_id"], "pv": run["prompt_version"], "ph": run["params_hash"],
             "sk": run["score_kind"]},
        ).scalars().all()
        if ids:
            spec = conn.execute(text("SELECT spec FROM models WHERE id = :m"),
                                {"m": run["model_id"]}).scalar_one()
            out[spec] = sorted(set(out.get(spec, [])) | set(ids))
    return out
