"""A paragraph split into sentences, for ``POST /score/paragraph``.

pysbd (rule-based sentence boundary disambiguation, checked against the "Golden Rules" test set)
rather than a model: it needs no download, gives the same split on every machine, and keeps the
abbreviations, decimals and amounts that debate transcripts are full of ("Mr. Trump", "4.5%",
"$1.5 billion") inside their sentence, where a split on ". " breaks them. English only.
"""

from __future__ import annotations

import pysbd


def split_sentences(paragraph: str) -> list[str]:
    """The paragraph's sentences, stripped, in order; blank ones dropped."""
    segmenter = pysbd.Segmenter(language="en", clean=False)  # one per call: it keeps state
    return [s.strip() for s in segmenter.segment(paragraph) if s.strip()]
