"""The ``auto`` choice on L: a score that already separates the classes is only calibrated, a score
without signal beside embeddings that carry it gets the embedding head; every candidate is judged
on folds it was not fitted on."""

from __future__ import annotations

import numpy as np
import pytest

from checkworthy.method.corrections import LabelledSet
from checkworthy.method.predictor_choice import (
    AUTO_CANDIDATES,
    auto_columns,
    choose_correction,
    fit_correction,
)

M, D, K = 400, 16, 10


def labelled(c: np.ndarray, emb: np.ndarray, y: np.ndarray, cols: int) -> LabelledSet:
    """L with leave-one-out cosine neighbour lists (what the SQL kNN returns)."""
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    sim = unit @ unit.T
    np.fill_diagonal(sim, -np.inf)
    nbr = np.argsort(-sim, axis=1)[:, :cols]
    return LabelledSet(y=y, c=c, nbr=nbr, dist=1 - np.take_along_axis(sim, nbr, axis=1))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    y = rng.permutation(np.repeat([0, 1], M // 2))
    noise = rng.normal(size=(M, D))
    informative = noise + np.outer(2.0 * y - 1, np.eye(D)[0]) * 1.5
    strong = 1 / (1 + np.exp(-(3.0 * (2 * y - 1) + rng.normal(scale=1.5, size=M))))
    blank = rng.uniform(size=M)
    return y, noise, informative, strong, blank


def test_a_strong_score_is_only_calibrated(data):
    y, noise, _, strong, _ = data
    name, figures = choose_correction(labelled(strong, noise, y, auto_columns(K)), noise, K, 0.5)
    assert name == "platt" and set(figures) == set(AUTO_CANDIDATES)
    assert figures["platt"] > 0.85 and figures["platt"] >= max(figures.values())


def test_a_blank_score_gets_the_embedding_head(data):
    y, _, informative, _, blank = data
    name, figures = choose_correction(labelled(blank, informative, y, auto_columns(K)), informative, K, 0.5)
    assert name == "head-cv"
    assert figures["head-cv"] > figures["platt"] + 0.1


def test_the_choice_is_deterministic_and_fits_on_all_of_L(data):
    y, _, informative, strong, _ = data
    cal = labelled(strong, informative, y, auto_columns(K))
    assert choose_correction(cal, informative, K, 0.5) == choose_correction(cal, informative, K, 0.5)
    choice, _, p, fitted = fit_correction("platt", cal, strong[:5], K, 0.5)
    assert choice.method == "raw" and fitted["predictor"]["name"] == "platt"
    assert np.all((p > 0) & (p < 1))


def test_no_claim_is_judged_by_a_model_that_saw_its_label(data):
    """Labels unrelated to score and embedding: a candidate judged on claims it was fitted on would
    still look good (the head fits noise); judged on folds it never saw, none does."""
    y, _, informative, _, blank = data
    rng = np.random.default_rng(0)
    shuffled = rng.permutation(y)  # labels unrelated to everything: no candidate may look good
    _, figures = choose_correction(labelled(blank, informative, shuffled, auto_columns(K)), informative,
                                      K, 0.5)
    assert max(figures.values()) < 0.65


def test_too_few_columns_for_a_fold_is_refused(data):
    y, noise, _, strong, _ = data
    cal = labelled(strong, noise, y, 1)
    with pytest.raises(ValueError, match="no neighbour outside its fold"):
        choose_correction(cal, noise, K, 0.5)
