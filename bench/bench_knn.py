"""kNN in SQL (exact and HNSW) against numpy brute force, at ClaimBuster size and at scale.

Vectors are embedding-like: MiniLM vectors of the datasets' own sentences (ClaimBuster and CLEF
2024, distinct texts). The labelled set is made of real sentences; query claims are other real
sentences' vectors plus small Gaussian noise (sd 0.02 per coordinate, re-normalised), generated in
SQL; where the datasets hold fewer distinct sentences than L needs (23,740 for 25,000), noisy
copies of its sentences make up the rest. Everything goes through the real tables and
:func:`checkworthy.store.knn.nearest_labelled`.

- ``ClaimBuster``: 2,745 queries x 1,314 labelled, k = 10: exact SQL, HNSW SQL, numpy, and the
  floor of any exact SQL plan: pgvector has no exact index, so such a plan evaluates the distance
  of every (query, labelled) pair (timed summed, with no sort), and a cheaper bound cannot stand in
  for it (the share of pairs a 128-dimensional principal-component bound cannot rule out).
- ``scale``: 25,000 labelled x 1,000,000 queries (``--quick``: 5,000 x 50,000), k = 10. HNSW SQL
  over every query, in chunks of 10,000 on ``--workers`` connections at once; exact SQL and numpy
  on an evenly spaced sample of ``--sample`` queries, extrapolated; recall@10 of HNSW against exact
  on that sample.

Prints a table and a JSON line. Run from the repository root:
``.venv/bin/python -m bench.bench_knn [--quick]`` (the sentences' vectors are computed once and
kept in var/cache/bench-knn-vectors.npy).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from pgvector.sqlalchemy import Vector
from sqlalchemy import bindparam, text

from checkworthy.config import VAR_DIR, quiet_offline_env
from checkworthy.data.datasets import load_claimbuster, load_clef
from checkworthy.data.text import normalise_text
from checkworthy.scorers.base import OK, Score
from checkworthy.scorers.sentence_encoder import embed
from checkworthy.store import rows as store
from checkworthy.store.embeddings import claim_embeddings
from checkworthy.store.engine import embedded_url, get_engine
from checkworthy.store.knn import EF_SEARCH, EXACT, HNSW_EF_CONSTRUCTION, HNSW_M, KnnPath, nearest_labelled
from checkworthy.testing.datasets import raw_path

K, DIM, NOISE, CHUNK = 10, 384, 0.02, 10_000
CACHE = VAR_DIR / "cache" / "bench-knn-vectors.npy"


def sentence_vectors() -> np.ndarray:
    """MiniLM vectors of every distinct sentence of ClaimBuster and CLEF 2024 (cached)."""
    if CACHE.exists():
        return np.load(CACHE)
    cb, _ = load_claimbuster(raw_path("claimbuster", "crowdsourced.csv"))
    texts: dict[str, str] = {}
    for name in ("train", "dev", "dev-test"):
        clef, _ = load_clef(raw_path("clef2024", f"CT24_checkworthy_english_{name}.tsv"), name)
        texts |= {normalise_text(c.text): c.text for c in clef}
    texts |= {normalise_text(c.text): c.text for c in cb}
    t0 = time.perf_counter()
    vecs = embed(list(texts.values())).astype(np.float32)
    print(f"embedded {len(vecs):,} sentences in {time.perf_counter() - t0:.0f} s")
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    np.save(CACHE, vecs)
    return vecs


def store_world(engine, tag: str, labelled: np.ndarray, base: np.ndarray, n_queries: int,
                ) -> tuple[int, store.ScoreKey, list[int]]:
    """L (real vectors, scored, a label set) and ``n_queries`` query claims around ``base``."""
    insert = text("INSERT INTO embeddings (text_hash, model, embedding) VALUES (:h, 'all-MiniLM-L6-v2', :v)"
                  ).bindparams(bindparam("v", type_=Vector(DIM)))
    names = [f"{tag} labelled {i}" for i in range(len(labelled))]
    with engine.begin() as conn:
        ids = store.store_claims_with_labels(
            conn, [store.NewClaim(tag, "labelled", str(i), t, i % 2) for i, t in enumerate(names)], "bench")
        conn.execute(insert, [{"h": store.sha256_text(t), "v": v} for t, v in zip(names, labelled)])
        ls = store.create_label_set(conn, f"{tag}:L", ids)
        model = store.ensure_model(conn, f"file:{tag}", "file")
        store.insert_predictions(conn, model, "none", {}, [
            (store.sha256_text(t), {"imported": Score(0.5, OK, "")}) for t in names])
        conn.execute(text("CREATE TEMP TABLE base (i int PRIMARY KEY, v vector(384)) ON COMMIT DROP"))
        conn.execute(text("INSERT INTO base VALUES (:i, :v)").bindparams(bindparam("v", type_=Vector(DIM))),
                     [{"i": i, "v": v} for i, v in enumerate(base)])
        conn.execute(text("SELECT setseed(0.13)"))
        name = "convert_to(:tag || ' query ' || j, 'UTF8')"
        conn.execute(text(
            f"""INSERT INTO texts (text_hash, text)
                SELECT encode(sha256({name}), 'hex'), :tag || ' query ' || j
                FROM generate_series(0, :n - 1) AS j"""), {"tag": tag, "n": n_queries})
        q_ids = conn.execute(text(
            f"""INSERT INTO claims (dataset, split, source_id, text_hash)
                SELECT :tag, 'query', 'q' || j, encode(sha256({name}), 'hex')
                FROM generate_series(0, :n - 1) AS j RETURNING id"""),
            {"tag": tag, "n": n_queries}).scalars().all()
        gauss = "sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random())"  # Box-Muller
        conn.execute(text(
            f"""INSERT INTO embeddings (text_hash, model, embedding)
                SELECT encode(sha256({name}), 'hex'), 'all-MiniLM-L6-v2',
                       l2_normalize(b.v + ARRAY(SELECT :s * {gauss} + 0 * j  -- per row, not once
                                                FROM generate_series(1, 384))::vector(384))
                FROM generate_series(0, :n - 1) AS j JOIN base b ON b.i = j % :nb"""),
            {"tag": tag, "n": n_queries, "nb": len(base), "s": NOISE})
    key = store.ScoreKey(model, "none", store.params_hash({}), "imported")
    return ls, key, sorted(q_ids)


def query_vectors(engine, ids: list[int]) -> np.ndarray:
    with engine.connect() as conn:
        return claim_embeddings(conn, ids).astype(np.float32)


def knn_sql(engine, ls: int, key: store.ScoreKey, ids: list[int], knn: KnnPath, workers: int,
            ) -> tuple[float, np.ndarray]:
    """Wall time and neighbour ids of the SQL kNN of ``ids``, in chunks on ``workers`` connections."""
    step = min(CHUNK, -(-len(ids) // workers))  # every connection busy, even on a small batch
    chunks = [ids[i: i + step] for i in range(0, len(ids), step)]

    def one(chunk: list[int]) -> np.ndarray:
        with engine.begin() as conn:
            return nearest_labelled(conn, ls, chunk, K, key, knn=knn).neighbour_ids

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        out = list(pool.map(one, chunks))
    return time.perf_counter() - t0, np.concatenate(out)


def knn_numpy(queries: np.ndarray, labelled: np.ndarray, ids: np.ndarray) -> tuple[float, np.ndarray]:
    """Brute force: (1 - cosine) for unit vectors, top k by argpartition then sort; best of 3
    (the first call also starts BLAS's threads)."""
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        dist = 1.0 - queries @ labelled.T
        part = np.argpartition(dist, K, axis=1)[:, :K]
        order = np.take_along_axis(part, np.argsort(np.take_along_axis(dist, part, 1), axis=1), 1)
        times.append(time.perf_counter() - t0)
    return min(times), ids[order]


def every_pair_s(engine, tag: str, workers: int, distance: bool) -> float:
    """Best of 3: seconds to sum every query-labelled pair's cosine distance (or only count the
    pairs) of size ``tag``, from two plain tables, the queries split over ``workers`` connections."""
    with engine.begin() as conn:
        for split in ("query", "labelled"):
            conn.execute(text(
                f"""CREATE TABLE IF NOT EXISTS floor_{tag}_{split} AS
                    SELECT c.id, e.embedding FROM claims c JOIN embeddings e ON e.text_hash = c.text_hash
                    WHERE c.dataset = :tag AND c.split = :split"""), {"tag": tag, "split": split})
    what = "sum(q.embedding <=> l.embedding)" if distance else "count(*)"
    statement = text(
        f"SELECT {what} FROM floor_{tag}_query q, floor_{tag}_labelled l WHERE q.id % :n = :part")

    def part(i: int) -> None:
        with engine.connect() as conn:
            conn.execute(statement, {"n": workers, "part": i}).scalar()

    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(part, range(workers)))
        times.append(time.perf_counter() - t0)
    return min(times)


def bound_survivors(queries: np.ndarray, labelled: np.ndarray, dims: int = 128) -> float:
    """Share of pairs that the distance within the labelled set's first ``dims`` principal
    components (a lower bound of the full distance) cannot exclude from the exact top k."""
    _, _, axes = np.linalg.svd(labelled - labelled.mean(0), full_matrices=False)
    q, lab = queries @ axes[:dims].T, labelled @ axes[:dims].T
    full = 2.0 - 2.0 * queries @ labelled.T  # squared distance of unit vectors
    kth = np.sort(full, axis=1)[:, K - 1]
    bound = (q * q).sum(1)[:, None] + (lab * lab).sum(1)[None] - 2.0 * q @ lab.T
    return float(np.mean(bound <= kth[:, None] + 1e-6))


def recall(approx: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(e)) / K for a, e in zip(approx, exact)]))


def label_ids(engine, ls: int) -> np.ndarray:
    with engine.connect() as conn:
        return np.array(store.label_set_claims(conn, ls), dtype=np.int64)


def size(engine, tag: str, vecs: np.ndarray, n_l: int, n_q: int, sample: int, workers: int,
         ef: int) -> dict[str, Any]:
    """One size: build, time the three paths, measure recall."""
    rng = np.random.default_rng(0)
    order = rng.permutation(len(vecs))
    n_base = min(5000, max(2000, len(vecs) - n_l))  # sentences the queries are drawn around
    base, labelled = vecs[order[:n_base]], vecs[order[n_base: n_base + n_l]]
    if len(labelled) < n_l:  # fewer distinct sentences than L needs: noisy copies make up the rest
        extra = labelled[rng.integers(0, len(labelled), n_l - len(labelled))]
        extra = extra + rng.normal(scale=NOISE, size=extra.shape).astype(np.float32)
        labelled = np.vstack([labelled, extra / np.linalg.norm(extra, axis=1, keepdims=True)])
    t0 = time.perf_counter()
    ls, key, q_ids = store_world(engine, tag, labelled, base, n_q)
    stored = time.perf_counter() - t0
    l_ids = label_ids(engine, ls)
    hnsw = KnnPath("hnsw", ef)
    t0 = time.perf_counter()
    with engine.begin() as conn:  # the first HNSW call copies L's vectors into the index
        nearest_labelled(conn, ls, q_ids[:1], K, key, knn=hnsw)
    build = time.perf_counter() - t0
    picks = np.unique(np.linspace(0, n_q - 1, min(sample, n_q)).astype(int))
    s_ids = [q_ids[i] for i in picks]
    t_exact, exact = knn_sql(engine, ls, key, s_ids, EXACT, workers)
    t_np, by_np = knn_numpy(query_vectors(engine, s_ids), labelled, l_ids)
    t_hnsw, approx = knn_sql(engine, ls, key, q_ids, hnsw, workers)
    scale = n_q / len(s_ids)
    floor = {}
    if len(s_ids) == n_q:  # the floor at a size the exact plan runs whole
        floor = {"every_pair_distance_s": every_pair_s(engine, tag, workers, distance=True),
                 "every_pair_count_s": every_pair_s(engine, tag, workers, distance=False),
                 "bound_128_survivors": bound_survivors(query_vectors(engine, s_ids), labelled)}
        floor |= {"every_pair_distance_over_numpy": floor["every_pair_distance_s"] / t_np,
                  "every_pair_count_over_numpy": floor["every_pair_count_s"] / t_np}
    return {"size": tag, "labelled": n_l, "queries": n_q, "k": K, "workers": workers, "ef_search": ef,
            "store_s": stored, "index_build_s": build, "sample": len(s_ids),
            "exact_sql_s": t_exact * scale, "numpy_s": t_np * scale, "hnsw_sql_s": t_hnsw,
            "exact_over_numpy": t_exact / t_np, "hnsw_over_numpy": t_hnsw / (t_np * scale),
            "hnsw_claims_per_s": n_q / t_hnsw, "recall_at_10": recall(approx[picks], exact),
            "exact_agrees_with_numpy": float(np.mean(exact == by_np)),
            "extrapolated": len(s_ids) < n_q} | floor


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="5,000 x 50,000 at scale (about a minute or two)")
    ap.add_argument("--workers", type=int, default=2, help="connections at once (default 2: the cores)")
    ap.add_argument("--ef-search", type=int, default=EF_SEARCH)
    ap.add_argument("--sample", type=int, default=2000, help="queries timed on the exact paths at scale")
    ap.add_argument("--queries", type=int, help="query claims at scale (default 1,000,000; --quick 50,000)")
    args = ap.parse_args()
    quiet_offline_env()
    vecs = sentence_vectors()
    # as the owner: the floor's scratch tables are DDL, which the application's login may not do
    engine = get_engine(embedded_url(VAR_DIR / f"pg-bench-knn-{os.getpid()}", "bench", cleanup_mode="delete",
                                     owner=True))
    n_l, n_q = (5_000, 50_000) if args.quick else (25_000, 1_000_000)
    n_q = args.queries or n_q
    rows = [size(engine, "claimbuster", vecs, 1314, 2745, 2745, args.workers, args.ef_search),
            size(engine, "scale", vecs, n_l, n_q, args.sample, args.workers, args.ef_search)]
    engine.dispose()
    print(f"load average {os.getloadavg()[0]:.2f}; {args.workers} connections; k = {K}; HNSW m {HNSW_M}, "
          f"ef_construction {HNSW_EF_CONSTRUCTION} (halfvec), ef_search {args.ef_search}")
    print("| size | L x queries | exact SQL s | numpy s | exact / numpy | HNSW SQL s | HNSW claims/s | "
          "recall@10 | index build s |\n|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        star = " (sampled)" if r["extrapolated"] else ""
        print(f"| {r['size']} | {r['labelled']:,} x {r['queries']:,} | {r['exact_sql_s']:.2f}{star} | "
              f"{r['numpy_s']:.2f}{star} | {r['exact_over_numpy']:.1f} | {r['hnsw_sql_s']:.2f} | "
              f"{r['hnsw_claims_per_s']:,.0f} | {r['recall_at_10']:.4f} | {r['index_build_s']:.1f} |")
    cb = rows[0]
    print(f"\nFloor of an exact SQL plan at ClaimBuster size ({args.workers} connections): "
          f"every pair's distance {cb['every_pair_distance_s']:.3f} s "
          f"({cb['every_pair_distance_over_numpy']:.1f}x numpy), the pairs only counted "
          f"{cb['every_pair_count_s']:.3f} s ({cb['every_pair_count_over_numpy']:.1f}x); a 128-dimensional "
          f"bound leaves {cb['bound_128_survivors']:.0%} of the pairs to evaluate")
    print(json.dumps({"bench": "knn", "rows": rows}))


if __name__ == "__main__":
    main()
