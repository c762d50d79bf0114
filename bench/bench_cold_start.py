"""Cold start in a new kind of claim: which tweets to label first when debate labels are all a team has.

L starts as a balanced sample of ClaimBuster's 2012 debates (``--per-class`` a class, default
450); the pool to label from is the CheckThat! 2021/2022 English train tweets
(``build_splits(TWEETS)["pool"]``, none sharing a text or id with the test set); the test set is
CT22 dev (195). Each round adds ``--step`` labelled tweets chosen by one arm:

- ``coverage``: ``checkworthy review export --order coverage`` (:func:`checkworthy.method.
  coverage.coverage_order`): the pool's tweets beyond the labelled set's radius in greedy
  k-center order, then the most uncertain;
- ``uncertain``: the open queue's order, most uncertain theta first;
- ``random``: a seeded uniform sample of the pool.

After each round, predict's path on arrays: the MiniLM logistic head's p_positive (each text
embedded and scored once), NN-PPI with predict's k over the labelled set (cosine), the
decide-or-review rule chosen on L's leave-one-out theta (certified on the queries' labelled
neighbours, those drift does not hold back), drift against L's radius. On the test
tweets: positive-class F1 of the decisions, ROC AUC of theta, the share decided automatically and
the error among those decisions, averaged over ``--seeds`` draws of the random and coverage arms
(the debate sample stays params.yaml's). Prints a table and a JSON line. Run from the repository root:
``.venv/bin/python -m bench.bench_cold_start [--rounds-queue N]``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from checkworthy.config import VAR_DIR, load_params
from checkworthy.data.datasets import CLAIMBUSTER, TWEETS, load_dataset
from checkworthy.data.splits import build_splits
from checkworthy.data.text import normalise_text
from checkworthy.method.coverage import coverage_order
from checkworthy.method.drift import CALM, check_drift, drift_status, fit_radius
from checkworthy.method.embedding_head import fit_head
from checkworthy.method.metrics import classification_report, roc_auc
from checkworthy.method.nnppi import decide, nnppi_theta
from checkworthy.method.sampling import balanced_sample
from checkworthy.method.selective import fit_review, neighbour_weights, review_priority
from checkworthy.scorers.classifier import load_artefact
from checkworthy.scorers.sentence_encoder import embed

CACHE = VAR_DIR / "bench-cold-start"
ARMS = ("coverage", "uncertain", "random")


def vectors(texts: list[str], name: str) -> np.ndarray:
    """Unit MiniLM vectors of ``texts``, embedded once and cached under var/."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"{name}.npy"
    if path.exists() and len(x := np.load(path)) == len(texts):
        return x
    x = embed(texts).astype(np.float64)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    np.save(path, x)
    return x


def neighbours(q: np.ndarray, lab: np.ndarray, k: int, loo: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Indices of each row's k nearest labelled rows (cosine) and its nearest distance; ``loo``:
    each labelled row without itself."""
    d = 1.0 - q @ lab.T
    if loo:
        np.fill_diagonal(d, np.inf)
    idx = np.argpartition(d, k, axis=1)[:, :k]
    return idx, d.min(axis=1)


def calibrate(x_l: np.ndarray, c_l: np.ndarray, y_l: np.ndarray, x_q: np.ndarray, c_q: np.ndarray,
              k: int, predictor: str) -> dict[str, np.ndarray]:
    """Predict's path for queries ``x_q`` against L: theta (``nnppi``: the paper's NN-PPI;
    ``head``: predict's ``head`` run, the embedding head on [vector, score] fitted on L, L's theta
    out of fold), decisions, the rule's review flags, whether each query lies beyond L's radius
    and its review priority."""
    idx_l, near_l = neighbours(x_l, x_l, k, loo=True)
    idx, near = neighbours(x_q, x_l, k)
    if predictor == "head":
        head = fit_head(x_l, c_l, y_l)
        theta_l, theta = head.oof, head.predict(x_q, c_q)
    else:
        theta_l = nnppi_theta(c_l, y_l[idx_l], c_l[idx_l])
        theta = nnppi_theta(c_q, y_l[idx], c_l[idx])
    radius = fit_radius(near_l)
    figure = check_drift(near, radius).as_dict()
    status = drift_status(near, figure)
    rule = fit_review(theta_l, y_l, weights=neighbour_weights(idx[status == CALM], len(y_l)))
    return {"theta": theta, "decision": decide(theta),
            "review": rule.review(theta, status),
            "beyond": near > radius if radius is not None else np.zeros(len(near), bool),
            "priority": review_priority(theta, rule.threshold)}


def figures(cal: dict[str, np.ndarray], y: np.ndarray) -> dict[str, float | None]:
    auto = cal["review"] == 0
    return {"f1_positive": classification_report(y, cal["decision"])["f1_1"],
            "roc_auc_theta": roc_auc(y, cal["theta"]), "automated": float(auto.mean()),
            "error_automated": float((cal["decision"][auto] != y[auto]).mean()) if auto.any() else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--per-class", type=int, default=450, help="debate labels a class (default 450)")
    ap.add_argument("--step", type=int, default=50, help="labels added a round (default 50)")
    ap.add_argument("--budget", type=int, default=800, help="the random arm's labels (default 800)")
    ap.add_argument("--rounds-queue", type=int, help="rounds of the queue arms (default: up to the budget)")
    ap.add_argument("--predictor", choices=("nnppi", "head"), default="nnppi",
                    help="theta: the paper's NN-PPI on the score (default), or predict's embedding head")
    ap.add_argument("--seeds", type=int, default=10,
                    help="draws of the random and coverage arms (default 10)")
    opts = ap.parse_args()
    t0 = time.monotonic()
    params = load_params()
    seed, k = params["seed"], int(params["predict"]["k"])
    debates = build_splits(CLAIMBUSTER, load_dataset(CLAIMBUSTER)[0], seed)["calibration"]
    debates = [debates[i] for i in balanced_sample([c.label for c in debates], opts.per_class, seed=seed)]
    tweets = build_splits(TWEETS, load_dataset(TWEETS)[0], seed)
    test = tweets["test"]
    known = {normalise_text(c.text) for c in debates}
    pool = [c for c in tweets["pool"] if normalise_text(c.text) not in known]
    named = ((debates, f"debates-{opts.per_class}-{seed}"), (pool, "pool"), (test, "test"))
    x_d, x_p, x_t = (vectors([c.text for c in part], name) for part, name in named)
    head = load_artefact("minilm-lr")
    c_d, c_p, c_t = (head.predict_proba(x) for x in (x_d, x_p, x_t))
    y_d, y_p, y_t = (np.array([c.label for c in part]) for part in (debates, pool, test))
    print(f"L: {len(debates)} debate claims; pool: {len(pool)} tweets ({y_p.sum()} check-worthy); "
          f"test: {len(test)} tweets ({y_t.sum()} check-worthy); k={k}; "
          f"embedded and scored in {time.monotonic() - t0:.0f} s", flush=True)
    queue_rounds = opts.rounds_queue or opts.budget // opts.step
    rows: list[dict] = []
    for arm in ARMS:
        rounds = opts.budget // opts.step if arm == "random" else queue_rounds
        for s in range(seed, seed + (1 if arm == "uncertain" else opts.seeds)):  # uncertain: no draw
            chosen = np.empty(0, dtype=int)
            shuffled = np.random.default_rng(s).permutation(len(pool))
            for r in range(rounds + 1):
                x_l, c_l, y_l = (np.concatenate([a, b[chosen]])
                                 for a, b in ((x_d, x_p), (c_d, c_p), (y_d, y_p)))
                cal = calibrate(x_l, c_l, y_l, x_t, c_t, k, opts.predictor)
                rows.append({"arm": arm, "seed": s, "labels": len(chosen), **figures(cal, y_t)})
                if r == rounds:
                    break
                if arm == "random":
                    chosen = shuffled[:len(chosen) + opts.step]
                    continue
                rest = np.setdiff1d(np.arange(len(pool)), chosen)
                cal = calibrate(x_l, c_l, y_l, x_p[rest], c_p[rest], k, opts.predictor)
                order = (coverage_order(x_p[rest], cal["beyond"], cal["priority"], seed=s)
                         if arm == "coverage" else np.lexsort((rest, -cal["priority"])))
                chosen = np.concatenate([chosen, rest[order[:opts.step]]])
        print(f"{arm}: done ({time.monotonic() - t0:.0f} s)", flush=True)
    table = summary(rows)
    print(f"\nmeans over {opts.seeds} seeds (uncertain: one order, no draw); sd of F1 in brackets")
    print("\n| arm | tweets labelled | F1 (positive) | ROC AUC theta | automated | error among automated |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in table:
        err = "-" if row["error_automated"] is None else f"{row['error_automated']:.3f}"
        print(f"| {row['arm']} | {row['labels']} | {row['f1_positive']:.3f} ({row['f1_sd']:.3f}) | "
              f"{row['roc_auc_theta']:.3f} | {row['automated']:.1%} | {err} |")
    at = {(r["arm"], r["labels"]): r["f1_positive"] for r in table}
    target = {"coverage_200": at.get(("coverage", 200)), "uncertain_200": at.get(("uncertain", 200)),
              "random_800": at.get(("random", opts.budget))}
    said = {key: "-" if v is None else f"{v:.3f}" for key, v in target.items()}
    print(f"\ntarget: mean F1 at 200 coverage-chosen {said['coverage_200']}, at 200 uncertain-chosen "
          f"{said['uncertain_200']}, at {opts.budget} random {said['random_800']}")
    print(json.dumps({"bench": "cold_start", "n_debates": len(debates), "n_pool": len(pool),
                      "n_test": len(test), "k": k, "seeds": opts.seeds, "predictor": opts.predictor,
                      "seconds": round(time.monotonic() - t0, 1), "target": target, "table": table}))


def summary(rows: list[dict]) -> list[dict]:
    """Each arm's figures a round, averaged over its seeds (the error over the seeds that
    automated any decision)."""
    out = []
    for arm in ARMS:
        for n in sorted({r["labels"] for r in rows if r["arm"] == arm}):
            got = [r for r in rows if r["arm"] == arm and r["labels"] == n]
            errs = [r["error_automated"] for r in got if r["error_automated"] is not None]
            f1 = [r["f1_positive"] for r in got]
            out.append({"arm": arm, "labels": n, "f1_positive": float(np.mean(f1)),
                        "f1_sd": float(np.std(f1)),
                        "roc_auc_theta": float(np.mean([r["roc_auc_theta"] for r in got])),
                        "automated": float(np.mean([r["automated"] for r in got])),
                        "error_automated": float(np.mean(errs)) if errs else None})
    return out

if __name__ == "__main__":
    main()
