"""The languages' L and U samples and the multilingual training set drawn around them: no text of a
held-out sample or a test split is trained on, the debates are capped, every language takes part."""

from __future__ import annotations

import pytest

from bench import bench_multilingual_embeddings as bench
from checkworthy.data.text import normalise_text
from checkworthy.runs.multilingual_set import (
    DEBATE_CAP,
    TWEET_TEST_SPLITS,
    language_groups,
    multilingual_training_data,
)
from checkworthy.runs.train_classifier import TEST_SPLITS, leakage_free_set


@pytest.fixture(scope="module")
def drawn():
    data = multilingual_training_data()
    return data, leakage_free_set(data)[0], language_groups()


def test_no_held_out_or_test_split_text_is_trained_on(drawn):
    data, ts, groups = drawn
    trained = {normalise_text(t) for t in ts.texts}
    for g in groups:
        assert not trained & {normalise_text(c.text) for c in g.held_out}, g.name
    for split in (*TEST_SPLITS, *TWEET_TEST_SPLITS):
        assert not trained & {normalise_text(c.text) for c in data.groups[split]}, split
    assert {f"held-out:{g.name}" for g in groups} <= set(ts.excluded)


def test_the_debates_are_capped_and_every_language_is_trained_on(drawn):
    _, ts, groups = drawn
    debates = sum(n for g, n in ts.sources.items() if g.startswith(("claimbuster:", "clef2024:")))
    assert debates == DEBATE_CAP and len(ts.texts) - debates > 4 * DEBATE_CAP
    assert {g.split(":")[0] for g in ts.sources} >= {"tweets", "tweets-ar", "tweets-es", "tweets-nl",
                                                       "tweets-bg", "tweets-tr"}
    assert [g.name for g in groups] == ["en-debates", "en-tweets", "ar-tweets", "es-tweets", "nl-tweets",
                                        "bg-tweets", "tr-tweets"]


def test_the_bench_draws_its_samples_from_the_same_split():
    assert bench.language_groups is language_groups
    for g in language_groups(50, 20):
        assert len(g.held_out) == 20 and not ({normalise_text(c.text) for c in g.labelled}
                                              & {normalise_text(c.text) for c in g.held_out})
