"""The languages' labelled and held-out samples, and the multilingual training set that leaves the
held-out ones out: one place, read by the multilingual benchmark and the multilingual fine-tuning.

Per group (English debates, English tweets and the Arabic, Spanish, Dutch, Bulgarian and Turkish
tweets) a "team's labels" sample L (default 1,000 claims of the train file, fewer where it holds
fewer) and a held-out sample U (default 300): the group's dev file where it has one (CLEF 2024 dev,
CT22 dev), else a disjoint part of the train file (Arabic, Dutch: CT24 train only). No CheckThat!
test split (nor CLEF 2024's dev-test) takes part. L and U are prefixes of one seeded permutation, so
a smaller L or U is a subset of a larger one (Arabic and Dutch hold out at most the first 300 of the
permutation, L comes after them); L holds no text of U (normalised).

The multilingual training set is the English leakage-free one (:func:`checkworthy.runs.
train_classifier.leakage_free_set`: every English debate file minus the test splits and both
calibration sets) with its debates cut to a seeded sample of :data:`DEBATE_CAP` texts, plus every
train and dev file of the tweets (English CT21/CT22 and every language of :data:`MULTILINGUAL_TWEETS`),
minus, by normalised text, every group's U of ``language_groups(1000, 300)`` and the tweets' test
splits (English CT21 test, Spanish CT22 dev-test). L stays in it (the team's labels are training
data). The debates are capped because they would otherwise be 16,447 of 38,312 texts (43%), all
English and all one genre: with 4,000 they are 4,000 of 25,865 (15%), the epoch is mostly tweets,
in six languages, and it is a third shorter (the GPU time it gets is a few minutes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from checkworthy.config import DATA_DIR
from checkworthy.data.datasets import (
    MULTILINGUAL_TWEETS,
    TWEET_FILES,
    TWEETS,
    load_clef,
    load_dataset,
    load_tweets,
)
from checkworthy.data.records import Claim
from checkworthy.data.text import normalise_text
from checkworthy.runs.train_classifier import DEFAULT_EXCLUDE, TrainingData, load_groups
from checkworthy.settings import load_settings

#: the seed of every group's permutation (L and U)
SEED = 2026
#: where a group has a train file only, U is drawn from the first this many of its permutation, L after
TRAIN_HELD_OUT = 300
#: the samples the multilingual training set leaves out: ``language_groups(N_LABELLED, N_HELD_OUT)``
N_LABELLED, N_HELD_OUT = 1000, 300
#: English debate texts kept in the multilingual training set (a seeded sample)
DEBATE_CAP = 4000
#: the tweets' test splits: never trained on, their texts left out like a held-out sample's
TWEET_TEST_SPLITS = (f"{TWEETS}:ct21-test", "tweets-es:ct22-dev-test")

#: a raw dataset file from its path under ``data/raw``
RawFile = Callable[..., Path]


def data_raw(*parts: str) -> Path:
    """The project's raw dataset file ``data/raw/<parts>``."""
    return DATA_DIR / "raw" / Path(*parts)


@dataclass(frozen=True)
class Group:
    """One group's language, team's labels L and held-out sample U."""

    name: str
    language: str
    labelled: list[Claim]
    held_out: list[Claim]
    held_out_from: str


def language_groups(n_labelled: int = N_LABELLED, n_held_out: int = N_HELD_OUT,
                    raw: RawFile = data_raw) -> list[Group]:
    """Every group's L and U (see the module's docstring) from the train and dev files that ``raw``
    finds."""
    clef = "CT24_checkworthy_english_{}.tsv"
    files: list[tuple[str, str, list[Claim], list[Claim] | None, str]] = [
        ("en-debates", "en", load_clef(raw("clef2024", clef.format("train")), "train")[0],
         load_clef(raw("clef2024", clef.format("dev")), "dev")[0], "CLEF 2024 dev"),
        ("en-tweets", "en", load_tweets(raw("tweets", TWEET_FILES["ct22-train"]), "ct22-train")[0],
         load_tweets(raw("tweets", TWEET_FILES["ct22-dev"]), "ct22-dev")[0], "CT22 dev")]
    for name, tweets in MULTILINGUAL_TWEETS.items():
        read = {split: load_tweets(raw("multilingual", tweets.folder, fname), split, dataset=name)[0]
                for split, fname in tweets.files.items()}
        train = next(s for s in tweets.files if s.endswith("-train"))
        dev = next((s for s in tweets.files if s.endswith("-dev")), None)
        source = dev.replace("ct22-", "CT22 ") if dev else "train (disjoint)"
        files.append((f"{tweets.language}-tweets", tweets.language, read[train], read[dev] if dev else None,
                      source))
    out = []
    for name, language, pool, held, held_from in files:
        rng = np.random.default_rng(SEED)
        pool = [pool[i] for i in rng.permutation(len(pool))]
        if held is None:  # U from the first TRAIN_HELD_OUT of the permutation: a smaller U stays a subset
            held, pool = pool[:min(n_held_out, TRAIN_HELD_OUT)], pool[TRAIN_HELD_OUT:]
        else:
            held = [held[i] for i in rng.permutation(len(held))][:n_held_out]
        seen = {normalise_text(c.text) for c in held}
        pool = [c for c in pool if normalise_text(c.text) not in seen]
        out.append(Group(name, language, pool[:n_labelled], held, held_from))
    return out


def tweet_groups() -> dict[str, list[Claim]]:
    """Every tweet file's claims (English and every language) by ``dataset:split``."""
    out: dict[str, list[Claim]] = {}
    for name in (TWEETS, *MULTILINGUAL_TWEETS):
        claims, _ = load_dataset(name)
        for c in claims:
            out.setdefault(f"{name}:{c.split}", []).append(c)
    return out


def capped(groups: dict[str, list[Claim]], sources: Sequence[str], banned: set[str], cap: int, seed: int
           ) -> dict[str, list[Claim]]:
    """``sources``' claims whose normalised text is one of a seeded sample of ``cap`` of their
    texts that are not ``banned`` (every text where they hold fewer); a text kept is kept in every
    source that holds it."""
    keys = sorted({k for g in sources for c in groups[g]
                   if (k := normalise_text(c.text)) and k not in banned})
    rng = np.random.default_rng(seed)
    kept = {keys[i] for i in rng.permutation(len(keys))[:cap]}
    return {g: [c for c in groups[g] if normalise_text(c.text) in kept] for g in sources}


def multilingual_training_data(debate_cap: int = DEBATE_CAP, without_team_labels: bool = False
                                ) -> TrainingData:
    """The multilingual training set's :class:`TrainingData` (see the module's docstring): its
    groups are the English debates' (calibration sets included, as :func:`load_groups` draws them
    with params.yaml's seed and sizes), every tweet file, each language group's U as
    ``held-out:<group>`` and the excluded test splits; the debates' sources hold only the
    sample of ``debate_cap`` texts. ``without_team_labels``: each group's L is left out too
    (``team-labels:<group>``), so that predict calibrating on L sees out-of-sample scores, as a
    team's own labels would be."""
    if debate_cap < 0:
        raise ValueError(f"debate_cap must be at least 0, got {debate_cap}")
    settings = load_settings()
    seed, n_per_class = settings.seed, settings.labelled_sizes()
    english = load_groups(seed, n_per_class)
    tweets = tweet_groups()
    held = {f"held-out:{g.name}": g.held_out for g in language_groups()}
    if without_team_labels:
        held |= {f"team-labels:{g.name}": g.labelled for g in language_groups()}
    exclude = (*DEFAULT_EXCLUDE, *TWEET_TEST_SPLITS, *held)
    groups = english | tweets | held
    banned = {normalise_text(c.text) for g in exclude for c in groups[g]}
    debates = [g for g in english if not g.endswith(":calibration") and g not in exclude]
    groups |= capped(groups, debates, banned, debate_cap, seed)
    sources = (*debates, *(g for g in tweets if g not in exclude))
    return TrainingData(exclude=exclude, seed=seed, n_per_class=n_per_class, groups=groups, sources=sources)
