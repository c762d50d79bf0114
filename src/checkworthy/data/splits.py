"""The paper's calibration and test sets, leakage-free by construction.

- ClaimBuster: ``calibration`` = class-balanced sample of the 2012 debates (all
  657 check-worthy + 657 sampled others = 1,314); ``test`` = the 2016 debates
  (2,745).
- CLEF 2024 (``claims`` must hold both the train and the dev-test file):
  ``calibration`` = 1,203 per class from train (2,406); ``test`` = dev-test (318).
- Tweets (``claims`` must hold CT22 train and dev and CT21 train): the pool is CT22
  train and CT21 train, one row per tweet id (CT22's where a tweet is in both);
  ``calibration`` = every check-worthy tweet of it and as many others; ``test`` =
  CT22 dev (195).
- Spanish, Bulgarian and Turkish tweets (``tweets-es``, ``-bg``, ``-tr``): the same from
  their CT22 train file, ``test`` = their CT22 dev. Arabic and Dutch (``tweets-ar``,
  ``-nl``) have a train file only (CT24's) and no split: refused.

Before sampling, pool rows whose normalised text also occurs in the test split
are set aside (returned as ``excluded``), and for the tweets those whose tweet id
does: a test sentence must not be its own neighbour. ClaimBuster 2012/2016 share
no text, so nothing is excluded there; CLEF train shares 3 short texts with
dev-test (6 train rows, all "No"); CT21 train holds 19 tweets of CT22 dev.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from checkworthy.data.datasets import CLAIMBUSTER, CLEF, CLEF_N_PER_CLASS, MULTILINGUAL_TWEETS, TWEETS
from checkworthy.data.records import Claim
from checkworthy.data.text import normalise_text
from checkworthy.method.sampling import balanced_sample

__all__ = ["build_splits", "shared_texts"]


def shared_texts(
    calibration: Iterable[Claim], test: Iterable[Claim]
) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Texts present on both sides of a split (leakage guard).

    Returns
    -------
    dict
        ``normalise_text(text) -> (calibration source_ids, test source_ids)`` for every
        normalised text found in both; empty when the split is clean. Texts that
        normalise to ``""`` (pure punctuation) are ignored.
    """

    def index(claims: Iterable[Claim]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for c in claims:
            key = normalise_text(c.text)
            if key:
                out[key].append(c.source_id)
        return out

    left, right = index(calibration), index(test)
    return {k: (tuple(left[k]), tuple(right[k])) for k in sorted(left.keys() & right.keys())}


class _Plan(NamedTuple):
    """Where a dataset's calibration pool and test split come from."""

    pool_splits: tuple[str, ...]  # in order of precedence: the first holding an id keeps it
    test_split: str
    n_per_class: int | None  # None: all of the minority class
    ids_name_tweets: bool = False  # the same id in two files is the same tweet (deduplicated, leak-checked)


_SPLIT_PLAN = {
    CLAIMBUSTER: _Plan(("2012",), "2016", None),
    CLEF: _Plan(("train",), "dev-test", CLEF_N_PER_CLASS),
    TWEETS: _Plan(("ct22-train", "ct21-train"), "ct22-dev", None, ids_name_tweets=True),
    **{name: _Plan(("ct22-train",), "ct22-dev", None, ids_name_tweets=True)
       for name, tweets in MULTILINGUAL_TWEETS.items() if "ct22-dev" in tweets.files},
}


def build_splits(
    dataset: str,
    claims: Sequence[Claim],
    seed: int,
    *,
    n_per_class: int | None = None,
) -> dict[str, list[Claim]]:
    """The paper's calibration and test sets of ``dataset`` (see the module's description).

    Returns
    -------
    dict
        ``calibration``, ``test``, ``pool`` (the calibration pool after exclusion,
        for |L| ablations) and ``excluded``; every list keeps file order.

    Parameters
    ----------
    dataset
        ``"claimbuster"``, ``"clef2024"``, ``"tweets"``, ``"tweets-es"``, ``"tweets-bg"`` or
        ``"tweets-tr"``.
    claims
        Output of the loader(s); claims of other datasets are ignored.
    seed
        Seed of the balanced sample (see :func:`checkworthy.method.sampling.balanced_sample`).
    n_per_class
        Override of the per-class size (default: the paper's).

    Raises
    ------
    ValueError
        Unknown dataset, empty pool or test split, too few items in a class.
    """
    plan = _plan_of(dataset)
    mine = [c for c in claims if c.dataset == dataset]
    test = [c for c in mine if c.split == plan.test_split]
    full_pool = _full_pool(dataset, plan, mine)
    if not test:
        raise ValueError(f"{dataset}: no claims with split {plan.test_split!r} (load that file too)")
    pool, excluded = _set_leaks_aside(plan, full_pool, test)
    idx = balanced_sample(
        [c.label for c in pool],
        n_per_class if n_per_class is not None else plan.n_per_class,
        seed=seed,
    )
    calibration = [pool[i] for i in idx]
    assert not shared_texts(calibration, test)
    return {"calibration": calibration, "test": test, "pool": pool, "excluded": excluded}


def _plan_of(dataset: str) -> _Plan:
    """The dataset's split plan; a dataset without a test split, or an unknown one, is refused."""
    if dataset in MULTILINGUAL_TWEETS and dataset not in _SPLIT_PLAN:
        raise ValueError(f"{dataset}: only a train file, no test split to calibrate for (the lab's "
                         "2024 dev and test files are not in the project); use it as labelled data")
    if dataset not in _SPLIT_PLAN:
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {sorted(_SPLIT_PLAN)}")
    return _SPLIT_PLAN[dataset]


def _full_pool(dataset: str, plan: _Plan, mine: Sequence[Claim]) -> list[Claim]:
    """The calibration pool before exclusion, in the plan's order of splits; for tweets, one row
    per tweet id (a tweet in an earlier file keeps that file's label)."""
    full_pool: list[Claim] = []
    seen: set[str] = set()
    for split in plan.pool_splits:
        part = [c for c in mine if c.split == split]
        if not part:
            raise ValueError(f"{dataset}: no claims with split {split!r} (load that file too)")
        if plan.ids_name_tweets:
            part = [c for c in part if c.source_id not in seen]
            seen |= {c.source_id for c in part}
        full_pool += part
    return full_pool


def _set_leaks_aside(
    plan: _Plan, full_pool: Sequence[Claim], test: Sequence[Claim]
) -> tuple[list[Claim], list[Claim]]:
    """The pool without the rows whose normalised text (for tweets: or tweet id) is in the test
    split, and those rows, both in file order."""
    leaked = shared_texts(full_pool, test)
    test_ids = {c.source_id for c in test} if plan.ids_name_tweets else set()

    def leaks(c: Claim) -> bool:
        return normalise_text(c.text) in leaked or c.source_id in test_ids

    return [c for c in full_pool if not leaks(c)], [c for c in full_pool if leaks(c)]
