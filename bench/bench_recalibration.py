"""Incremental versus full recalibration after 100 new labels, 100,000 claims to calibrate.

Setting (synthetic, generated in SQL): 100,000 target claims and a labelled set of 2,406 claims
(the CLEF calibration size), 384-d unit vectors drawn around 64 topic centroids (real claim
embeddings are clustered too), uniform scores, k = 5. A complete full run on that labelled set is
the parent. Then 100 new labelled claims arrive (a new label-set version) and the calibration is
brought up to date twice, through the real code paths:

- incremental: ``checkworthy.runs.recalibration.recalibrate`` from the parent run;
- full: ``checkworthy.runs.calibration_run.run_calibration`` (SQL kNN over every target x every
  labelled claim).

Both end as complete stored runs; the bench checks they are identical row for row and prints both
wall times and their ratio, the incremental run's steps and the load average. Run:
``.venv/bin/python bench/bench_recalibration.py [--targets N] [--knn hnsw]`` (about 3 minutes at
the default size on 2 cores: the parent and the full run dominate). With ``--knn hnsw`` every run
takes the HNSW path; an incremental HNSW run keeps its parent's index-found lists, so it may
differ from a fresh HNSW run in a few rows: both recalls are printed, and only the exact path must
match row for row.

2026-11-25, 2 idle cores, one run each: exact 7.51 s against 72.0 s (9.6x, 0 rows differ); HNSW
6.55 s against 41.0 s (6.3x, 1 row of 100,000 differs, recall@5 1.000 for both). 2026-11-26, HNSW
on migration 0012's index (ef_search 80): 7.23 s against 42.0 s (5.8x, 130 rows differ, recall
0.999 both); ``--targets 1000000``: 82.0 s (store 58.2 s) against 396.0 s (4.8x, 1,143 rows differ,
recall 1.000 both).

Result on 2026-11-23 (2 cores, nothing else running, load ~1.1 with the bench itself): 18,986
claims recomputed, 81,014 copied; incremental 2.44 s (pools 0.09, plan 1.60, compute 0.06, store
0.67), full 71.5 s: 29.3x, 0 rows differ. With one other busy process on the cores (load ~2.2):
incremental 3.22 s (pools 0.11, plan 2.52, compute 0.11, store 0.44), full 82.3 s: 25.6x, 0 rows
differ. The incremental run keeps both cores busy (it reads the parent while worker threads fetch
exact distances and copy the unaffected rows), so shared cores slow it more than the full run,
which is mostly one backend. Before (2026-11-22, load ~4): 7.75 s against 142.1 s, 18.3x.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from sqlalchemy import text

from checkworthy.config import EMBED_MODEL, VAR_DIR, quiet_offline_env
from checkworthy.runs.calibration_run import run_calibration
from checkworthy.runs.recalibration import recalibrate
from checkworthy.store import rows as store
from checkworthy.store.calibration_runs import load_run
from checkworthy.store.engine import embedded_url, get_engine
from checkworthy.store.knn import EF_SEARCH, KNN_PATHS
from checkworthy.store.run_spec import RunMethods, RunSpec

DIM, CENTROIDS = 384, 64


def generate(engine, n_targets: int, n_labelled: int, n_new: int, seed: float = 0.42) -> dict:
    """Claims, texts, embeddings, scores and labels, all in SQL (seconds, not minutes)."""
    n = n_targets + n_labelled + n_new
    with engine.begin() as conn:
        conn.execute(text("SELECT setseed(:s)"), {"s": seed})
        conn.execute(text(
            """INSERT INTO texts (text_hash, text)
               SELECT encode(sha256(convert_to('bench claim ' || i, 'UTF8')), 'hex'), 'bench claim ' || i
               FROM generate_series(0, :n - 1) AS i"""), {"n": n})
        conn.execute(text(
            """INSERT INTO claims (dataset, split, source_id, text_hash)
               SELECT 'bench', CASE WHEN i < :t THEN 'target' WHEN i < :tl THEN 'labelled' ELSE 'new' END,
                      i::text, encode(sha256(convert_to('bench claim ' || i, 'UTF8')), 'hex')
               FROM generate_series(0, :n - 1) AS i"""),
            {"t": n_targets, "tl": n_targets + n_labelled, "n": n})
        conn.execute(text(
            f"""CREATE TEMP TABLE centroids AS
                SELECT c, l2_normalize(ARRAY(
                         SELECT random() - 0.5 FROM generate_series(1, {DIM} + c * 0))::vector) AS v
                FROM generate_series(0, {CENTROIDS - 1}) AS c"""))
        conn.execute(text(
            f"""INSERT INTO embeddings (text_hash, model, embedding)
                SELECT c.text_hash, :m, l2_normalize(k.v + ARRAY(
                         SELECT (random() - 0.5) * 0.09 FROM generate_series(1, {DIM} + c.id * 0))::vector)
                FROM claims c JOIN centroids k ON k.c = (c.source_id::bigint * 7919) % {CENTROIDS}
                WHERE c.dataset = 'bench'"""), {"m": EMBED_MODEL})
        model = store.ensure_model(conn, "file:bench-recalibration", "file")
        conn.execute(text(
            """INSERT INTO predictions (text_hash, model_id, prompt_version, params, params_hash, score_kind,
                                        score, raw_output, parse_status)
               SELECT text_hash, :m, 'none', '{}', :ph, 'imported', round(random()::numeric, 4), '', 'ok'
               FROM claims WHERE dataset = 'bench'"""), {"m": model, "ph": store.params_hash({})})
        conn.execute(text(
            """INSERT INTO labels (claim_id, label, source)
               SELECT id, (random() < 0.5)::int, 'bench' FROM claims
               WHERE dataset = 'bench' AND split IN ('labelled', 'new')"""))
        by_split = text("SELECT id FROM claims WHERE dataset = 'bench' AND split = :s ORDER BY id")
        ids = {split: list(conn.execute(by_split, {"s": split}).scalars())
               for split in ("target", "labelled", "new")}
        ls0 = store.create_label_set(conn, "bench:L", ids["labelled"])
        ls1 = store.create_label_set(conn, "bench:L", ids["labelled"] + ids["new"])
        conn.execute(text("ANALYZE"))
    key = store.ScoreKey(model, "none", store.params_hash({}), "imported")
    return {"ids": ids, "ls0": ls0, "ls1": ls1, "key": key}


def identical(engine, a: int, b: int) -> int:
    """Rows that differ between two runs (neighbours, distances, theta, interval, decision)."""
    with engine.connect() as conn:
        return conn.execute(text(
            """SELECT count(*) FROM calibrated_results x FULL JOIN calibrated_results y
                 ON y.run_id = :b AND y.claim_id = x.claim_id
               WHERE (x.run_id = :a OR x.run_id IS NULL) AND (y.run_id = :b OR y.run_id IS NULL)
                 AND (x.claim_id IS NULL OR y.claim_id IS NULL OR x.neighbour_ids <> y.neighbour_ids
                      OR x.neighbour_distances <> y.neighbour_distances OR x.theta <> y.theta
                      OR x.ci_low <> y.ci_low OR x.ci_high <> y.ci_high OR x.decision <> y.decision
                      OR x.knn_mean <> y.knn_mean)"""), {"a": a, "b": b}).scalar_one()


def _time_steps() -> dict[str, float]:
    """Time the steps of an incremental run: pools (how the labelled pool changed); plan (the
    parent's rows and the targets' vectors, prefilter, while worker threads fetch the candidates'
    exact distances and copy the unaffected rows found so far); compute (merge + NN-PPI); store
    (waiting for those copies, the rest of the unaffected rows, COPY of the recomputed ones)."""
    from checkworthy.runs import recalibration as rc

    split: dict[str, float] = {}
    for name, label in (("pool_changes", "pools"), ("plan", "plan"), ("compute_incremental", "compute"),
                        ("store_incremental", "store")):
        fn = getattr(rc, name)

        def timed(*a, _fn=fn, _label=label, **kw):
            t0 = time.perf_counter()
            try:
                return _fn(*a, **kw)
            finally:
                split[_label] = time.perf_counter() - t0

        setattr(rc, name, timed)
    return split


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=100_000)
    ap.add_argument("--labelled", type=int, default=2406)
    ap.add_argument("--new", type=int, default=100)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--knn", choices=KNN_PATHS, default="exact",
                    help="the runs' kNN path: hnsw compares an incremental HNSW run with a fresh one")
    ap.add_argument("--ef-search", type=int, default=EF_SEARCH)
    args = ap.parse_args()
    quiet_offline_env()
    # as the owner: only a table's owner may ANALYZE it (the generated data's planner statistics)
    engine = get_engine(embedded_url(VAR_DIR / f"pg-bench-recal-{os.getpid()}", "bench",
                                     cleanup_mode="delete", owner=True))
    t0 = time.perf_counter()
    d = generate(engine, args.targets, args.labelled, args.new)
    print(f"generated {args.targets:,} targets, {args.labelled:,} + {args.new} labelled claims "
          f"in {time.perf_counter() - t0:.0f} s")
    targets = tuple(d["ids"]["target"])

    def spec(target: str, ls: int) -> RunSpec:
        methods = RunMethods(args.k, knn=args.knn, ef_search=args.ef_search)
        return RunSpec(target, targets, ls, d["key"], methods)

    t0 = time.perf_counter()
    parent = run_calibration(engine, spec("bench:incremental", d["ls0"]))
    t_parent = time.perf_counter() - t0
    print(f"parent (full run on the old label set): {t_parent:.1f} s")

    split = _time_steps()
    t0 = time.perf_counter()
    inc = recalibrate(engine, spec("bench:incremental", d["ls1"]), parent_run_id=parent)
    t_inc = time.perf_counter() - t0
    assert inc.mode == "incremental", inc.mode
    print(f"incremental: {t_inc:.2f} s ({inc.n_recomputed:,} claims recomputed, {inc.n_copied:,} copied, "
          f"changes {inc.changes})")
    print("  of which " + ", ".join(f"{name} {sec:.2f} s" for name, sec in split.items()))
    print("  load average (1, 5, 15 min): " + " ".join(f"{x:.2f}" for x in os.getloadavg()))

    t0 = time.perf_counter()
    full = run_calibration(engine, spec("bench:full", d["ls1"]))
    t_full = time.perf_counter() - t0
    print(f"full:        {t_full:.2f} s (load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + ")")

    diff = identical(engine, inc.run_id, full)
    with engine.connect() as conn:
        recall = {name: load_run(conn, run)["params"]["knn"].get("recall_at_k")
                  for name, run in (("incremental", inc.run_id), ("full", full))}
    print(f"rows differing between incremental and full: {diff}"
          + (f"; recall@{args.k} incremental {recall['incremental']:.4f}, full {recall['full']:.4f}"
             if args.knn == "hnsw" else ""))
    print("\n| kNN | targets | labelled | new labels | k | recomputed | incremental (s) | full (s) "
          "| full / incr |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {args.knn} | {args.targets:,} | {args.labelled:,} | {args.new} | {args.k} "
          f"| {inc.n_recomputed:,} ({inc.n_recomputed / args.targets:.1%}) | {t_inc:.2f} | {t_full:.1f} "
          f"| {t_full / t_inc:.1f}x |")
    print(json.dumps({"bench": "recalibration", "knn": args.knn, "targets": args.targets,
                      "labelled": args.labelled, "new": args.new, "k": args.k,
                      "recomputed": inc.n_recomputed, "incremental_s": round(t_inc, 3),
                      "full_s": round(t_full, 3), "ratio": round(t_full / t_inc, 2), "rows_differing": diff,
                      "recall_at_k": recall if args.knn == "hnsw" else None}))
    engine.dispose()
    if diff and args.knn == "exact":  # two HNSW runs may differ: each records its recall
        raise SystemExit("incremental and full results differ")


if __name__ == "__main__":
    main()
