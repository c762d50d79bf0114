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
  those added claims, so no kNN over the whole pool is needed. Which added claims can be that
  near is decided against P's stored k-th distance: a vector prefilter (the targets' vectors
  times the added claims', in float32 chunks, with a margin for rounding) keeps the pairs that
  may enter, and only those get their distance from pgvector, the expression the SQL kNN uses;
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

#: the parent's rows as fixed-size binary records: claim id, score, the k neighbour ids, the k
#: distances (parsed with numpy; one message per row, no per-row Python objects)
PARENT_COPY = """COPY (SELECT r.claim_id, r.score, {neighbours} FROM calibrated_results r WHERE r.run_id = %s)
TO STDOUT (FORMAT BINARY)"""
#: the same with each target's vector (needed when labelled claims were added)
PARENT_VECTORS_COPY = """COPY (SELECT r.claim_id, r.score, {neighbours}, e.embedding FROM calibrated_results r
    JOIN claims c ON c.id = r.claim_id JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = %s
    WHERE r.run_id = %s) TO STDOUT (FORMAT BINARY)"""
#: concatenated ``vector_send`` images of a few claims (the labelled pool, never the targets)
VECTORS_SQL = """
SELECT string_agg(int8send(c.id) || vector_send(e.embedding), ''::bytea)
FROM claims c JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = %s
WHERE c.id = ANY(%s)"""
#: slack of the vector prefilter, in cosine distance: pgvector sums 384 float32 products, so its
#: distance may be off by up to ~7e-5 from the exact one; numpy's float32 product by ~1e-6
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
    #: the parent's rows: claim ids (sorted), (n, k) neighbour ids, (n, k) distances
    parent_nb: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def recomputed(self) -> list[int]:
        return sorted(set(self.knn) | set(self.merge))


def _key_params(spec: RunSpec) -> dict[str, Any]:
    return {"m": spec.key.model_id, "pv": spec.key.prompt_version, "ph": spec.key.params_hash,
            "sk": spec.key.score_kind, "em": spec.embed_model}


def incremental_applies(spec: RunSpec) -> bool:
    """Only the paper's NN-PPI (z interval, residual-mean correction) is local to each claim's
    neighbours; fitted corrections, conformal intervals and the CV choice depend on all of L, so a
    label change moves every claim and those calibrations are recomputed in full."""
    return spec.interval_method == "z" and getattr(spec, "correction", "paper") == "paper"


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
                 AND coalesce(r.params->>'correction', 'paper') = :corr
               ORDER BY r.id DESC LIMIT 1"""
        ),
        _key_params(spec) | {"t": spec.target, "ls": spec.label_set_id, "k": spec.k, "a": spec.alpha,
                             "th": spec.threshold, "im": spec.interval_method,
                             "corr": getattr(spec, "correction", "paper")},
    ).scalar()


def _pool(conn: Connection, label_set_id: int, spec: RunSpec) -> pd.DataFrame:
    rows = conn.execute(POOL_SQL, _key_params(spec) | {"ls": label_set_id}).all()
    return pd.DataFrame(rows, columns=["claim_id", "label", "score", "since"]).set_index("claim_id")


def plan(conn: Connection, spec: RunSpec, parent_run_id: int) -> Plan:
    """Find the claims whose neighbours or neighbours' labels/scores changed since the parent run."""
    parent = conn.execute(text("SELECT label_set_id, started_at FROM calibration_runs WHERE id = :i"),
                          {"i": parent_run_id}).one()
    new, old = _pool(conn, spec.label_set_id, spec), _pool(conn, parent.label_set_id, spec)
    old_strict = set(old.index[old["since"] < parent.started_at])
    added = sorted(set(new.index) - old_strict)
    t_ids, t_scores, nids, nds, t_vec = parent_rows(conn, parent_run_id, spec.k,
                                                    spec.embed_model if added else None)
    # a target's score is in the parent's row (same score key: stored scores never change)
    wanted = np.asarray(sorted(set(spec.claim_ids)), dtype=np.int64)
    in_parent = np.isin(t_ids, wanted)
    scores = dict(zip(t_ids[in_parent].tolist(), t_scores[in_parent].tolist()))
    others = np.setdiff1d(wanted, t_ids).tolist()
    stored = claim_scores(conn, others, spec.key.model_id, spec.key.prompt_version, spec.key.params_hash,
                          spec.key.score_kind) if others else {}
    need_knn = {i for i, sc in stored.items() if sc is not None}  # new to the target: full SQL kNN
    scores |= {i: stored[i] for i in need_knn}
    removed = sorted(set(old.index) - set(new.index))
    both = new.index.intersection(old.index)
    differs = ((new.loc[both, "label"] != old.loc[both, "label"])
               | (new.loc[both, "score"] != old.loc[both, "score"]))
    changed = sorted(both[differs.to_numpy()])
    kept_ids, kept_nids, kept_nds = t_ids[in_parent], nids[in_parent], nds[in_parent]
    lost = np.isin(kept_nids, np.asarray(removed, dtype=np.int64)).any(axis=1)
    relabelled = np.isin(kept_nids, np.asarray(changed, dtype=np.int64)).any(axis=1) & ~lost
    need_knn |= set(kept_ids[lost].tolist())
    touched = set(kept_ids[relabelled].tolist())
    entering = pd.DataFrame(columns=["claim_id", "neighbor_id", "distance"])
    if added:
        ok = in_parent.copy()
        ok[in_parent] = ~lost
        entering = _entering(conn, spec, added, t_ids[ok], nids[ok], nds[ok], t_vec, np.flatnonzero(ok))
        touched |= set(entering["claim_id"].tolist())
    merge = sorted(touched - need_knn)
    recomputed = need_knn | touched
    pool = dict(zip(new.index.astype(int).tolist(),
                    zip(new["label"].astype(int).tolist(), new["score"].astype(float).tolist())))
    changes = {"added": len(added), "removed": len(removed), "changed": len(changed)}
    keep = [i for i in kept_ids.tolist() if i not in recomputed]
    return Plan(parent_run_id, scores, pool, sorted(need_knn), merge, keep, entering, changes,
                (kept_ids, kept_nids, kept_nds))


def parent_rows(conn: Connection, parent_run_id: int, k: int,
                embed_model: str | None = None) -> tuple[Any, ...]:
    """The parent run's rows as arrays, sorted by claim id: ids, scores, (n, k) neighbour ids and
    distances, and (with ``embed_model``) a lazy (n, dim) big-endian view of the targets' vectors.

    One binary COPY of fixed-size records parsed by numpy: no Python object per row.
    """
    cols = ", ".join([f"r.neighbor_ids[{i}]" for i in range(1, k + 1)]
                     + [f"r.neighbor_distances[{i}]" for i in range(1, k + 1)])
    sql = (PARENT_VECTORS_COPY if embed_model else PARENT_COPY).format(neighbours=cols)
    params = (embed_model, parent_run_id) if embed_model else (parent_run_id,)
    buf = bytearray()
    with conn.connection.driver_connection.cursor() as cur, cur.copy(sql, params) as cp:
        for block in cp:
            buf += block
    if not buf.startswith(b"PGCOPY\n\xff\r\n\x00"):
        raise RuntimeError("unexpected COPY stream of the parent run")
    head = 19 + int.from_bytes(buf[15:19], "big")
    fields = [("nf", ">i2"), ("l_id", ">i4"), ("id", ">i8"), ("l_sc", ">i4"), ("score", ">f8")]
    fields += [x for i in range(k) for x in ((f"l_n{i}", ">i4"), (f"n{i}", ">i8"))]
    fields += [x for i in range(k) for x in ((f"l_d{i}", ">i4"), (f"d{i}", ">f8"))]
    n_fields = 2 + 2 * k
    if embed_model and len(buf) > head + 2:
        at = head + np.dtype(fields).itemsize + 4  # the first row's vector dimension
        dim = int.from_bytes(buf[at:at + 2], "big")
        fields += [("l_v", ">i4"), ("dim", ">i2"), ("unused", ">i2"), ("v", ">f4", (dim,))]
        n_fields += 1
    dt = np.dtype(fields)
    n, rest = divmod(len(buf) - head - 2, dt.itemsize)
    if rest:
        raise RuntimeError("the parent run's rows have NULLs or another k")
    rows = np.frombuffer(buf, dtype=dt, count=n, offset=head)
    lengths = [rows[f[0]] for f in fields if f[0].startswith("l_") and f[0] != "l_v"]
    if n and ((rows["nf"] != n_fields).any() or any((x != 8).any() for x in lengths)):
        raise RuntimeError("the parent run's rows have NULLs or another k")
    order = np.argsort(rows["id"], kind="stable")
    ids = rows["id"][order].astype(np.int64)
    if not n:
        return ids, np.zeros(0), np.zeros((0, k), np.int64), np.zeros((0, k)), None
    nids = np.stack([rows[f"n{i}"][order] for i in range(k)], axis=1).astype(np.int64)
    nds = np.stack([rows[f"d{i}"][order] for i in range(k)], axis=1).astype(float)

    def vectors(positions: np.ndarray) -> np.ndarray:
        """float32 vectors of the rows at these (sorted-order) positions, decoded on demand."""
        return rows["v"][order[positions]].astype(np.float32)

    return ids, rows["score"][order].astype(float), nids, nds, (vectors if embed_model else None)


def _vectors(conn: Connection, claim_ids: Sequence[int], embed_model: str) -> dict[int, np.ndarray]:
    """Vectors of a few claims (the labelled pool), by claim id."""
    with conn.connection.driver_connection.cursor(binary=True) as cur:
        cur.execute(VECTORS_SQL, (embed_model, [int(i) for i in claim_ids]))
        (blob,) = cur.fetchone()
    if not blob:
        return {}
    dim = int.from_bytes(blob[8:10], "big")
    dt = np.dtype([("id", ">i8"), ("dim", ">i2"), ("unused", ">i2"), ("v", ">f4", (dim,))])
    rows = np.frombuffer(blob, dtype=dt)
    if len(blob) % dt.itemsize or (rows["dim"] != dim).any():
        raise RuntimeError("vectors of different dimensions")
    return dict(zip(rows["id"].astype(np.int64).tolist(), rows["v"].astype(np.float64)))


def _entering(conn: Connection, spec: RunSpec, added: list[int], t_ids: np.ndarray, nids: np.ndarray,
              nds: np.ndarray, t_vec: Any, rows: np.ndarray) -> pd.DataFrame:
    """(target, added claim, distance) of every added labelled claim that enters a target's top k.

    Exact, in two steps: a vector prefilter (``t_vec(rows)``: the targets' vectors, streamed with
    the parent's rows, times the added claims' vectors, by chunks), generous by
    ``PREFILTER_MARGIN``; then each surviving pair's distance from pgvector itself (the expression
    the SQL kNN orders by) and the exact test ``(distance, id) < (k-th distance, k-th id)``.
    """
    cols = ["claim_id", "neighbor_id", "distance"]
    if not len(t_ids):
        return pd.DataFrame(columns=cols)
    vec = _vectors(conn, added, spec.embed_model)
    added_ids = np.asarray([i for i in added if i in vec], dtype=np.int64)
    A = np.stack([vec[i] for i in added_ids.tolist()]).astype(np.float32)
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    cand_t, cand_a = [], []
    for start in range(0, len(t_ids), 20_000):
        T = t_vec(rows[start:start + 20_000])
        T /= np.linalg.norm(T, axis=1, keepdims=True)
        dist = 1.0 - T @ A.T
        i, j = np.nonzero(dist <= nds[start:start + 20_000, -1:] + PREFILTER_MARGIN)
        cand_t.append(t_ids[start + i])
        cand_a.append(added_ids[j])
    cand_t_all, cand_a_all = np.concatenate(cand_t), np.concatenate(cand_a)
    if not len(cand_t_all):
        return pd.DataFrame(columns=cols)
    got = conn.execute(
        text(
            """WITH av AS MATERIALIZED (
                   SELECT c.id, e.embedding FROM claims c
                   JOIN embeddings e ON e.text_hash = c.text_hash AND e.model = :em
                   WHERE c.id = ANY(CAST(:added AS bigint[])))
               SELECT u.t, u.a, av.embedding <=> et.embedding
               FROM unnest(CAST(:t AS bigint[]), CAST(:a AS bigint[])) AS u(t, a)
               JOIN av ON av.id = u.a
               JOIN claims ct ON ct.id = u.t
               JOIN embeddings et ON et.text_hash = ct.text_hash AND et.model = :em"""
        ),
        {"t": cand_t_all.tolist(), "a": cand_a_all.tolist(), "em": spec.embed_model,
         "added": added_ids.tolist()},
    ).all()
    tt = np.fromiter((r[0] for r in got), np.int64, len(got))
    aa = np.fromiter((r[1] for r in got), np.int64, len(got))
    d = np.fromiter((r[2] for r in got), float, len(got))
    at = np.searchsorted(t_ids, tt)
    dk, kid = nds[at, -1], nids[at, -1]
    enters = (d < dk) | ((d == dk) & (aa < kid))
    return pd.DataFrame({"claim_id": tt[enters], "neighbor_id": aa[enters], "distance": d[enters]})


def _merge_neighbours(conn: Connection, spec: RunSpec, p: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """New top-k of the merge claims: the parent's k neighbours plus the added claims that enter."""
    k = spec.k
    t_ids, nids, nds = p.parent_nb
    sel = np.isin(t_ids, np.asarray(p.merge, dtype=np.int64))
    ids, nid, nd = t_ids[sel], nids[sel], nds[sel]
    old = pd.DataFrame({"claim_id": np.repeat(ids, k), "neighbor_id": nid.ravel(), "distance": nd.ravel()})
    enter = p.entering[p.entering["claim_id"].isin(set(p.merge))]
    cand = pd.concat([old, enter], ignore_index=True).astype({"claim_id": np.int64, "neighbor_id": np.int64,
                                                               "distance": float})
    cand = cand.drop_duplicates(["claim_id", "neighbor_id"])
    cand = cand.sort_values(["claim_id", "distance", "neighbor_id"], kind="mergesort")
    top = cand.groupby("claim_id", sort=True).head(k)
    out_ids = top["claim_id"].to_numpy()[::k]
    if len(top) != len(out_ids) * k or len(out_ids) != len(p.merge):
        raise RuntimeError("incremental merge lost neighbours: the parent run is inconsistent")
    return out_ids, top["neighbor_id"].to_numpy().reshape(-1, k), top["distance"].to_numpy().reshape(-1, k)


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
        parent = None
        if not force_full and incremental_applies(spec):
            parent = parent_run_id or find_parent(lock, spec)
        lock.commit()
    if existing is not None:
        return RecalOutcome(existing, "reused")
    if parent is None:
        run_id = run_calibration(engine, spec, ctx)
        return RecalOutcome(run_id, "full", n_recomputed=len(spec.claim_ids))
    with engine.connect() as lock:
        lock.execute(text("SELECT pg_advisory_lock(hashtextextended(:k, 0))"), {"k": key})
        lock.commit()
        held = True
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
                held = False  # the full run takes the same lock on its own connection
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
            if held:
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
                                r.alpha, r.threshold, r.interval_method,
                                coalesce(r.params->>'correction', 'paper') ORDER BY r.id DESC) AS n,
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
    extra = {}
    if "correction" in {f.name for f in fields(RunSpec)}:
        extra["correction"] = (run["params"] or {}).get("correction", "paper")
    return RunSpec(
        target=run["target"], claim_ids=tuple(sorted(claim_ids)), label_set_id=label_set_id,
        key=ScoreKey(run["model_id"], run["prompt_version"], run["params_hash"], run["score_kind"]),
        k=run["k"], alpha=run["alpha"], threshold=run["threshold"], interval_method=run["interval_method"],
        embed_model=run["embed_model"], **extra,
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
