"""Claims the tests share: real CLEF 2024 ones, off-topic ones, attacks on the prompt's slot, and
CSV files of them."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from checkworthy.data.datasets import load_clef
from checkworthy.data.records import Claim
from checkworthy.testing.datasets import raw_path

#: score-like attacks on the prompt's slot (the prompt's tests, and the real model's)
ADVERSARIAL = Path(__file__).parent / "data" / "adversarial_claims.csv"


def adversarial_claims() -> list[dict[str, str]]:
    """attack (template id), clean (the claim without the attack; empty for a bare attack), claim."""
    with open(ADVERSARIAL, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@cache
def clef_claims() -> tuple[Claim, ...]:
    """Real claims (CLEF 2024 dev-test) so that embeddings and neighbours are real."""
    claims, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    return tuple(claims)


@cache
def clef() -> tuple[list[Claim], list[Claim]]:
    """CLEF 2024's train and dev-test claims."""
    train, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_train.tsv"), "train")
    dev, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")
    return train, dev


#: claims far from every labelled one (recipes): a batch of them drifts
COOKING = [f"Stir in {n} grams of {what} and let the {dish} simmer for {m} minutes over low heat."
           for n, what, dish, m in zip(range(50, 650, 20), ["butter", "flour", "sugar", "rice", "garlic"] * 6,
                                       ["sauce", "soup", "stew", "risotto", "broth", "curry"] * 5,
                                       range(3, 33))]


#: a label file's columns (``data/labels/*.csv``)
LABEL_HEADER = ("id", "dataset", "label", "source")


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Path:
    """A CSV file of ``header`` and ``rows``; returns its path."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def write_labels(path: Path, rows: Iterable[Sequence[Any]], header: Sequence[str] = LABEL_HEADER) -> Path:
    """A label file (columns :data:`LABEL_HEADER` unless ``header``); returns its path."""
    return write_csv(path, header, rows)
