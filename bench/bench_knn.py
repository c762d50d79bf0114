"""SQL batch kNN (pgvector, one statement) versus numpy brute force at ClaimBuster sizes.

2,745 query claims (the 2016 test split) against 1,314 labelled claims (the 2012 calibration
set), k in {3, 5, 10}, 384-d unit vectors (seeded random: the cost does not depend on the
values). Prints wall times and their ratio; run with ``.venv/bin/python bench/bench_knn.py``.
"""

from __future__ import annotations

import os
import time

import numpy as np

from checkworthy.config import VAR_DIR, quiet_offline_env
from checkworthy.scorers.base import OK, Score
from checkworthy.store import rows as store
from checkworthy.store.engine import embedded_url, get_engine
from checkworthy.store.knn import nearest_labelled

N_L, N_Q, DIM = 1314, 2745, 384


def main() -> None:
    quiet_offline_env()
    engine = get_engine(embedded_url(VAR_DIR / f"pg-bench-{os.getpid()}", "bench", cleanup_mode="delete"))
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(N_L + N_Q, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    texts = [f"bench claim {i}" for i in range(N_L + N_Q)]
    with engine.begin() as conn:
        ids = store.store_claims_with_labels(
            conn,
            [store.NewClaim("bench", "x", str(i), t, int(i % 3 == 0)) for i, t in enumerate(texts)],
            "bench",
        )
        from pgvector.sqlalchemy import Vector
        from sqlalchemy import bindparam, text

        conn.execute(
            text(
                "INSERT INTO embeddings (text_hash, model, embedding) VALUES (:h, 'all-MiniLM-L6-v2', :v)"
            ).bindparams(bindparam("v", type_=Vector(DIM))),
            [{"h": store.sha256_text(t), "v": v} for t, v in zip(texts, vecs)],
        )
        ls = store.create_label_set(conn, "bench", ids[:N_L])
        model = store.ensure_model(conn, "file:bench", "file")
        store.insert_predictions(
            conn, model, "none", {}, [(store.sha256_text(t), {"imported": Score(0.5, OK, "")}) for t in texts]
        )
    key = store.ScoreKey(model, "none", store.params_hash({}), "imported")
    q_ids = ids[N_L:]
    print(f"queries {N_Q} x labelled {N_L}, dim {DIM}")
    print(f"{'k':>3} {'SQL (s)':>9} {'numpy (s)':>10} {'SQL/numpy':>10} {'agree':>7}")
    for k in (3, 5, 10):
        with engine.connect() as conn:
            nearest_labelled(conn, ls, q_ids[:50], k, key)  # warm-up
            t0 = time.perf_counter()
            nb = nearest_labelled(conn, ls, q_ids, k, key)
            t_sql = time.perf_counter() - t0
        t0 = time.perf_counter()
        dist = 1.0 - vecs[N_L:] @ vecs[:N_L].T
        part = np.argpartition(dist, k, axis=1)[:, :k]
        order = np.take_along_axis(part, np.argsort(np.take_along_axis(dist, part, 1), axis=1), 1)
        t_np = time.perf_counter() - t0
        agree = np.mean(np.array(ids[:N_L])[order] == nb.neighbor_ids)
        print(f"{k:>3} {t_sql:>9.3f} {t_np:>10.3f} {t_sql / t_np:>10.1f} {agree:>7.3f}")
    engine.dispose()


if __name__ == "__main__":
    main()
