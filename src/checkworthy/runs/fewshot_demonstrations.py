"""``checkworthy demonstrations``: pick the few-shot prompt's labelled sentences, without leakage.

The sentences come from the same leakage-free training texts as the fine-tuned classifiers
(:func:`checkworthy.runs.train_classifier.build_training_set` with its default exclusions: every
test split, CLEF dev and both calibration sets, by normalised text), so the few-shot score can be
measured on the held-out events and calibrated on L like any other predictor. A seeded,
class-balanced draw among sentences of ``min_words``-``max_words`` words (long ones cost prompt
length without showing more); the file records the command and the groups left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from checkworthy.data.outputs import replace_text
from checkworthy.runs.train_classifier import DEFAULT_EXCLUDE, build_training_set, load_groups
from checkworthy.scorers.fewshot_prompt import DEFAULT_DEMONSTRATIONS, fewshot_claim


def pick_demonstrations(texts: Sequence[str], labels: Sequence[int], n: int, seed: int,
                        min_words: int = 6, max_words: int = 22) -> list[tuple[str, int]]:
    """``n`` sentences (half of each class, rounded down for label 1), seeded, length-bounded."""
    rng = np.random.default_rng(seed)
    fit = [i for i, t in enumerate(texts) if min_words <= len(fewshot_claim(t).split()) <= max_words]
    picked: list[tuple[str, int]] = []
    for label, size in ((0, n - n // 2), (1, n // 2)):
        pool = [i for i in fit if labels[i] == label]
        if len(pool) < size:
            raise ValueError(f"only {len(pool)} sentences of label {label} fit; asked for {size}")
        picked += [(fewshot_claim(texts[i]), label) for i in rng.choice(pool, size, replace=False)]
    return picked


def write_demonstrations(n: int, seed: int, n_per_class: Mapping[str, int | None],
                         out: Path = DEFAULT_DEMONSTRATIONS, exclude: Sequence[str] = DEFAULT_EXCLUDE,
                         made_by: str = "") -> dict[str, Any]:
    """Write the demonstrations file (atomically) and return what it holds."""
    ts = build_training_set(load_groups(seed, n_per_class), exclude)
    shots = pick_demonstrations(ts.texts, ts.labels, n, seed)
    data = {"made_by": made_by or f"checkworthy demonstrations --n {n} --seed {seed}",
            "excluded": list(exclude), "training_fingerprint": ts.fingerprint,
            "shots": [{"text": t, "label": y} for t, y in shots]}
    header = ("# Few-shot demonstrations for embedded:gemma3-270m-fewshot (scorers/fewshot_prompt.py).\n"
              "# Editable; every edit is a new prompt version. Made by the command in made_by.\n")
    replace_text(out, header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=1000))
    return data
