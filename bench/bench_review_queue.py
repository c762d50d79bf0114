"""Which labels to buy: the review queue's choice against random choice, on both datasets.

Setting: each dataset's paper calibration set (ClaimBuster: 1,314 claims of the 2012 debates;
CLEF 2024: 2,406 of train) is the pool the data team labels from: the only labelled claims the
scorer never saw (the classifiers are trained without them and without the test splits). The test
split measures: ClaimBuster's 2016 debates (2,745), CLEF dev-test (318).

The simulated data team starts from 200 labels (100 per class, drawn at random from the pool)
and buys 100 per round, up to 2,000 or the whole pool:

- ``queue``: the 100 unlabelled pool claims the review queue puts first: highest review priority
  ``1 - |theta - t| / max(t, 1 - t)`` of their NN-PPI theta (k = 10) from the labels bought so far,
  exactly as a calibration run ranks ``review_queue``;
- ``random``: 100 drawn uniformly.

First, with the full calibration set, the decide-or-review rule on the test split for every k in
{3, 5, 10}, both risks and R in {0.1, 0.05}: automated share and realised risk. Then, after each
round, on the test split: weighted and positive-class F1 of NN-PPI (k = 10) and of the
CV choice (``select_by_cv``, ks 3/5/10), and the share decided automatically at ``error`` <= 0.1
(delta 0.1, Learn-then-Test on the labels' leave-one-out NN-PPI theta) with its realised error.
Means over ``--seeds`` starts. kNN is exact cosine in numpy here (the store's pgvector kNN gives
the same neighbours); scores come from the model spec through the package's scorer.

Targets: the queue reaches the F1 of the full calibration set with at most half its labels, and
beats random at every round after the first. Strategy ``mixed`` buys half of each round from the
queue and half at random. As in a calibration run, the decide-or-review rule is tested on every
label bought. Results and what they mean: docs/review.md, "Which labels to buy".

Prints a table per dataset, the targets and one JSON line; writes a plot. Run:
``.venv/bin/python bench/bench_review_queue.py [--model classifier:minilm-lora] [--seeds 3]``
(about 3 minutes on 2 cores at 3 seeds, most of it the CV choice).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from checkworthy.config import PARAMS_FILE, REPORTS_DIR, load_params, quiet_offline_env
from checkworthy.data.datasets import CLAIMBUSTER, CLEF, load_dataset
from checkworthy.data.splits import build_splits
from checkworthy.method.corrections import LabelledSet, Neighbourhood, correction_paper, select_by_cv
from checkworthy.method.metrics import per_class, weighted_f1
from checkworthy.method.nnppi import decide
from checkworthy.method.selective import RISKS, fit_review, realised, review_priority
from checkworthy.scorers.registry import configured_scorer
from checkworthy.scorers.sentence_encoder import embed

K, KS, START, STEP, MAX_LABELS, THRESHOLD = 10, (3, 5, 10), 200, 100, 2000, 0.5
#: how each round's 100 labels are chosen: (share from the queue's top, share drawn at random)
STRATEGIES = {"queue": 1.0, "random": 0.0, "mixed": 0.5}
CURVE_KEYS = ("n", "wf1_nnppi", "f1c1_nnppi", "wf1_cv", "automated", "error_automated")


@dataclass
class Setting:
    """One dataset: the pool's and the test split's scores, unit vectors and labels."""

    name: str
    c_pool: NDArray[np.float64]
    v_pool: NDArray[np.float32]
    y_pool: NDArray[np.int_]
    c_test: NDArray[np.float64]
    v_test: NDArray[np.float32]
    y_test: NDArray[np.int_]


def load_setting(dataset: str, seed: int, model: str, kind: str) -> Setting:
    claims, _ = load_dataset(dataset)
    split = build_splits(dataset, claims, seed)
    pool, test = split["calibration"], split["test"]
    scorer, _ = configured_scorer(load_params(PARAMS_FILE), model)
    texts = [c.text for c in pool] + [c.text for c in test]
    scores = np.array([s[kind].score for s in scorer.score(texts)], dtype=float)
    if not np.isfinite(scores).all():
        raise SystemExit(f"{model} left {int((~np.isfinite(scores)).sum())} claims unscored")
    vecs = embed(texts)
    n = len(pool)
    y = np.array([c.label for c in pool + test])
    return Setting(dataset, scores[:n], vecs[:n], y[:n], scores[n:], vecs[n:], y[n:])


def nearest(q: NDArray[np.float32], lab: NDArray[np.float32], k: int, loo: bool = False
            ) -> tuple[NDArray[np.int_], NDArray[np.float64]]:
    """Each query's k nearest labelled vectors by cosine distance (ties by index); ``loo``: the
    queries are the labelled vectors themselves and never their own neighbour."""
    dist = 1.0 - q @ lab.T
    if loo:
        np.fill_diagonal(dist, np.inf)
    idx = np.argsort(dist, axis=1, kind="stable")[:, :k]
    return idx, np.take_along_axis(dist, idx, axis=1)


def labelled_set(s: Setting, lab: NDArray[np.int_]) -> LabelledSet:
    nbr, dist = nearest(s.v_pool[lab], s.v_pool[lab], max(KS), loo=True)
    return LabelledSet(y=s.y_pool[lab], c=s.c_pool[lab], nbr=nbr, dist=dist)


def around(s: Setting, cal: LabelledSet, lab: NDArray[np.int_], c: NDArray[np.float64],
           v: NDArray[np.float32]) -> Neighbourhood:
    nbr, dist = nearest(v, s.v_pool[lab], max(KS))
    return Neighbourhood(c=c, nbr=nbr, cal=cal, dist=dist)


def measure(s: Setting, lab: NDArray[np.int_]) -> dict[str, float]:
    """Test-split figures of a calibration on the labels ``lab`` (indices into the pool)."""
    cal = labelled_set(s, lab)
    nb = around(s, cal, lab, s.c_test, s.v_test)
    theta = correction_paper(nb.with_k(K))
    pred = decide(theta, THRESHOLD)
    theta_l = correction_paper(Neighbourhood.loo(cal, K))
    rule = fit_review(theta_l, cal.y, THRESHOLD, "error", 0.1, 0.1)
    auto = rule.review(theta) == 0
    out = {"n": len(lab), "wf1_nnppi": weighted_f1(s.y_test, pred),
           "f1c1_nnppi": per_class(s.y_test, pred)[1]["f1"], "automated": float(auto.mean()),
           "error_automated": float((pred[auto] != s.y_test[auto]).mean()) if auto.any() else 0.0}
    pred_cv = select_by_cv(cal, ks=KS).best.predict(nb)
    return out | {"wf1_cv": weighted_f1(s.y_test, pred_cv), "f1c1_cv": per_class(s.y_test, pred_cv)[1]["f1"]}


def risk_table(s: Setting) -> list[dict[str, float]]:
    """With the full calibration set: for every k in {3, 5, 10}, both risks and R in {0.1, 0.05}
    (delta 0.1), the share of test claims decided automatically and the risk realised among them."""
    lab = np.arange(len(s.y_pool))
    cal = labelled_set(s, lab)
    nb = around(s, cal, lab, s.c_test, s.v_test)
    out = []
    for k in KS:
        theta, theta_l = correction_paper(nb.with_k(k)), correction_paper(Neighbourhood.loo(cal, k))
        for risk in RISKS:
            for bound in (0.1, 0.05):
                rule = fit_review(theta_l, cal.y, THRESHOLD, risk, bound, 0.1)
                share, got = realised(theta, s.y_test, THRESHOLD, risk, rule.margin)
                out.append({"k": k, "risk": risk, "max_risk": bound, "automated": share, "realised": got,
                             "within": got is None or got <= bound})
    return out


def next_batch(s: Setting, lab: NDArray[np.int_], from_queue: float, rng: np.random.Generator, n: int
               ) -> NDArray[np.int_]:
    """The ``n`` pool claims bought next: a uniform draw of ``n * (1 - from_queue)``, then the
    queue's top by review priority among the rest."""
    rest = np.setdiff1d(np.arange(len(s.y_pool)), lab)
    n = min(n, len(rest))
    n_random = n - int(round(n * from_queue))
    drawn = rng.choice(rest, n_random, replace=False)
    rest = np.setdiff1d(rest, drawn)
    queued = rest[:0]
    if n > n_random:
        cal = labelled_set(s, lab)
        theta = correction_paper(around(s, cal, lab, s.c_pool[rest], s.v_pool[rest]).with_k(K))
        queued = rest[np.argsort(-review_priority(theta, THRESHOLD), kind="stable")[: n - n_random]]
    return np.concatenate([drawn, queued])


def simulate(s: Setting, from_queue: float, seed: int) -> list[dict[str, float]]:
    rng = np.random.default_rng(seed)
    lab = np.concatenate([rng.choice(np.flatnonzero(s.y_pool == cls), START // 2, replace=False)
                          for cls in (0, 1)])
    rows = [measure(s, lab)]
    while len(lab) < min(MAX_LABELS, len(s.y_pool)):
        lab = np.concatenate([lab, next_batch(s, lab, from_queue, rng, STEP)])
        rows.append(measure(s, lab))
    return rows


def mean_rows(runs: Sequence[list[dict[str, float]]]) -> list[dict[str, float]]:
    return [{key: float(np.mean([r[i][key] for r in runs])) for key in row} for i, row in enumerate(runs[0])]


def summarise(full: dict[str, float], curves: dict[str, list[dict[str, float]]], n_pool: int
              ) -> dict[str, object]:
    """Per strategy: where it first reaches full-L NN-PPI weighted F1, and how often it beats random."""
    rnd = curves["random"]
    out = {}
    for st, rows in curves.items():
        reach = first_reaching(rows, "wf1_nnppi", full["wf1_nnppi"])
        beats = sum(a["wf1_nnppi"] > b["wf1_nnppi"] for a, b in zip(rows[1:], rnd[1:]))
        out[st] = {"reaches_full_at": reach, "half_met": reach is not None and reach <= n_pool / 2,
                   "rounds_beating_random": beats, "rounds": len(rows) - 1}
    return {"full": full, "curves": curves, "strategies": out}


def print_table(curves: dict[str, list[dict[str, float]]]) -> None:
    """One row per round; each cell gives the strategies in order (queue / random / mixed)."""
    names = list(curves)
    columns = {"wf1_nnppi": "NN-PPI wF1", "wf1_cv": "CV choice wF1", "automated": "automated",
               "error_automated": "error among automated"}
    print(f"labels | {' | '.join(columns.values())}   (each: {' / '.join(names)})")
    for i in range(len(curves[names[0]])):
        cells = [" / ".join(f"{curves[st][i][key]:.0%}" if key == "automated" else f"{curves[st][i][key]:.3f}"
                            for st in names) for key in columns]
        print(f"{int(curves[names[0]][i]['n']):>6} | " + " | ".join(cells))


def first_reaching(rows: Sequence[dict[str, float]], key: str, target: float) -> int | None:
    return next((int(r["n"]) for r in rows if r[key] >= target - 1e-9), None)


def plot(results: dict[str, dict], out: Path) -> None:
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(results), figsize=(6 * len(results), 7), squeeze=False)
    for col, (name, r) in enumerate(results.items()):
        for strategy, style in zip(STRATEGIES, ("-", "--", ":")):
            rows = r["curves"][strategy]
            n = [x["n"] for x in rows]
            for key, colour, what in (("wf1_nnppi", "C0", "NN-PPI"), ("wf1_cv", "C1", "CV choice")):
                axes[0, col].plot(n, [x[key] for x in rows], style, color=colour, label=f"{what}, {strategy}")
            axes[1, col].plot(n, [x["automated"] for x in rows], style, color="C2", label=strategy)
        axes[0, col].axhline(r["full"]["wf1_nnppi"], color="C0", lw=0.6, ls=":", label="NN-PPI, full L")
        axes[0, col].set(title=f"{name}: weighted F1 on the test split", xlabel="labels bought")
        axes[1, col].set(title="share decided automatically at error <= 0.1", xlabel="labels bought")
        axes[0, col].legend(fontsize=7)
        axes[1, col].legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)


def main() -> None:
    quiet_offline_env()
    params = load_params(PARAMS_FILE)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=params["predict"]["model"])
    ap.add_argument("--score-kind", default=params["predict"]["score_kind"])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", default=str(REPORTS_DIR / "bench" / "review-queue.png"))
    args = ap.parse_args()
    t0 = time.monotonic()
    results: dict[str, dict] = {}
    for dataset in (CLAIMBUSTER, CLEF):
        s = load_setting(dataset, params["seed"], args.model, args.score_kind)
        full = measure(s, np.arange(len(s.y_pool)))
        risks = risk_table(s)
        print(f"\n{dataset}: decide or review on the test split, full L, NN-PPI theta, delta 0.1")
        for x in risks:
            print(f"  k={x['k']:>2} {x['risk']:<5} <= {x['max_risk']:<4}: automated {x['automated']:.0%}, "
                  f"realised {'-' if x['realised'] is None else format(x['realised'], '.3f')}"
                  f"{'' if x['within'] else '  ABOVE THE BOUND'}")
        curves = {st: mean_rows([simulate(s, share, seed) for seed in range(args.seeds)])
                  for st, share in STRATEGIES.items()}
        results[dataset] = summarise(full, curves, len(s.y_pool)) | {"risks": risks}
        print(f"\n{dataset}: pool {len(s.y_pool)}, test {len(s.y_test)}, {args.model} {args.score_kind}; "
              f"full L: NN-PPI wF1 {full['wf1_nnppi']:.3f} F1c1 {full['f1c1_nnppi']:.3f}, CV choice wF1 "
              f"{full['wf1_cv']:.3f}, automated {full['automated']:.0%} "
              f"(error {full['error_automated']:.3f})")
        print_table(curves)
        for st, r in results[dataset]["strategies"].items():
            print(f"{st}: reaches full-L NN-PPI wF1 at {r['reaches_full_at']} labels (target <= "
                  f"{len(s.y_pool) / 2:.0f}: {'met' if r['half_met'] else 'not met'})"
                  + ("" if st == "random" else f"; beats random in {r['rounds_beating_random']} of "
                     f"{r['rounds']} rounds after the first (target: all)"))
    plot(results, Path(args.out))
    print(f"\nplot: {args.out}; wall time {time.monotonic() - t0:.0f} s")
    print(json.dumps({"bench": "review_queue", "model": args.model, "score_kind": args.score_kind,
                      "seeds": args.seeds, "wall_s": round(time.monotonic() - t0)} | {
        d: {"full": {k: round(v, 4) for k, v in r["full"].items()}, "strategies": r["strategies"],
            "risks": r["risks"],
            "curves": {st: {k: [round(x[k], 4) for x in rows] for k in CURVE_KEYS}
                       for st, rows in r["curves"].items()}}
        for d, r in results.items()}))

if __name__ == "__main__":
    main()
