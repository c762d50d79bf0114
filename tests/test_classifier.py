"""The supervised classifier predictor: leakage-free training data on the real files, a small real
training run evaluated on real test claims, and the artefact (versioning, integrity, score kinds)."""

from __future__ import annotations

import copy
import dataclasses
import json
import random

import numpy as np
import pytest

from checkworthy.config import EMBED_MODEL, VAR_DIR
from checkworthy.data.text import normalise_text
from checkworthy.runs import train_classifier as training
from checkworthy.scorers import classifier
from checkworthy.scorers.base import OK
from checkworthy.scorers.registry import make_scorer

#: embeddings keyed by sha256(text), kept between runs: MiniLM on 2 shared cores is the slow part
CACHE = VAR_DIR / "cache" / f"test-classifier-{EMBED_MODEL}.npz"


@pytest.fixture(scope="module")
def groups():
    """Every real labelled group, with the paper's calibration sets (seed and sizes of params.yaml)."""
    return training.load_groups(2026, {"claimbuster": None, "clef2024": 1203})


@pytest.fixture(scope="module")
def tiny(groups, tmp_path_factory):
    """A classifier trained on 260 real ClaimBuster sentences from other debates, tested on real
    samples of ClaimBuster 2016 and CLEF dev-test (C chosen by CV on the training set)."""
    rng = random.Random(7)
    other = groups["claimbuster:other"]
    train = (rng.sample([c for c in other if c.label], 100)
             + rng.sample([c for c in other if not c.label], 160))
    small = {
        "claimbuster:other": train,
        "claimbuster:2016": rng.sample(groups["claimbuster:2016"], 140),
        "clef2024:dev": rng.sample(groups["clef2024:dev"], 60),
        "clef2024:dev-test": rng.sample(groups["clef2024:dev-test"], 90),
    }
    root = tmp_path_factory.mktemp("classifiers")
    data = training.TrainingData(training.TEST_SPLITS, groups=small, sources=["claimbuster:other"])
    art = training.train("tiny", data, root=root, cache=CACHE)
    return art, root, small


def test_default_training_set_is_leakage_free(groups):
    """CLEF train holds every ClaimBuster 2016 sentence, so exclusion must go by text, not by file: the
    default training set shares no normalised text with either test split or calibration set."""
    clef_train = {normalise_text(c.text) for c in groups["clef2024:train"]}
    assert {normalise_text(c.text) for c in groups["claimbuster:2016"]} <= clef_train
    ts = training.build_training_set(groups, training.DEFAULT_EXCLUDE)
    trained = {normalise_text(t) for t in ts.texts}
    for name in training.DEFAULT_EXCLUDE:
        assert not trained & {normalise_text(c.text) for c in groups[name]}, name
        assert ts.excluded[name]["n_rows"] == len(groups[name])
    assert len(trained) == len(ts.texts) > 14_000  # deduplicated, still most of the data
    assert set(ts.sources) <= {"claimbuster:2012", "claimbuster:other", "clef2024:train"}
    assert ts.fingerprint == training.build_training_set(groups, training.DEFAULT_EXCLUDE).fingerprint
    with pytest.raises(ValueError, match="unknown group"):
        training.build_training_set(groups, ["claimbuster:2017"])


def test_small_real_training_beats_the_majority_baseline(tiny):
    art, _, small = tiny
    for split in training.TEST_SPLITS:
        m = art.manifest["metrics"][split]["p_positive>=0.5"]
        labels = np.array([c.label for c in small[split]])
        majority_f1 = (1 - labels.mean()) * 2 * (1 - labels.mean()) / (1 + (1 - labels.mean()))
        assert m["weighted_f1"] > majority_f1 + 0.03, (split, m)
        assert m["f1_1"] > 0.3
        c_metrics = art.manifest["metrics"][split]["paper_c>=0.5"]
        assert c_metrics["weighted_f1"] < m["weighted_f1"]  # paper_c >= 0.5 calls everything positive
    manifest = art.manifest
    assert manifest["training_data"]["n_texts"] == 260
    assert set(manifest["training_data"]["excluded"]) == set(training.TEST_SPLITS)
    assert manifest["hyperparameters"]["C"] in training.C_GRID


def test_artefact_versions_integrity_and_scores(tiny):
    art, root, small = tiny
    folder = root / "tiny" / art.version
    assert (root / "tiny" / "LATEST").read_text().strip() == art.version
    assert json.loads((folder / "manifest.json").read_text())["head"]["sha256"].startswith(art.version)
    assert (folder / "head.json").stat().st_size < 20_000
    latest = classifier.ClassifierScorer("tiny", root=root)
    pinned, prompt = make_scorer(f"classifier:tiny@{art.version}", root=str(root))
    assert prompt[0] == "none" and pinned.params() == latest.params()
    params = latest.params()
    assert params["head_sha256"].startswith(art.version) and params["training_fingerprint"]
    texts = [c.text for c in small["claimbuster:2016"][:6]]
    out = latest.score(texts)
    for row in out:
        p, c = row["p_positive"], row["paper_c"]
        assert p.status == c.status == OK and c.score >= 0.5
        assert c.score == pytest.approx(max(p.score, 1 - p.score))
        assert json.loads(p.raw)["p_positive"] == p.score
    x = training.embed_cached(texts, CACHE)
    assert [r["p_positive"].score for r in out] == pytest.approx(art.predict_proba(x).tolist(), abs=1e-5)
    head = folder / "head.json"
    head.write_bytes(head.read_bytes().replace(b'"intercept":', b'"intercept": '))
    with pytest.raises(ValueError, match="sha256"):
        classifier.load_artefact("tiny", root)
    with pytest.raises(FileNotFoundError, match="train-classifier"):
        classifier.load_artefact("nope", root)


def test_evaluation_refuses_splits_seen_in_training(tiny):
    art, _, small = tiny
    manifest = copy.deepcopy(art.manifest)
    manifest["training_data"]["excluded"] = {"claimbuster:2016": {}}
    leaky = dataclasses.replace(art, manifest=manifest)
    metrics = training.evaluate(lambda t: leaky.predict_proba(np.zeros((len(t), 384), np.float32)),
                                leaky.manifest, small)
    assert "refused" in metrics["clef2024:dev-test"] and "refused" not in metrics["claimbuster:2016"]


def test_paper_c_mapping():
    assert classifier.paper_c(0.8) == 0.8
    assert classifier.paper_c(0.2) == pytest.approx(0.8)
    assert classifier.paper_c(0.5) == 0.5
