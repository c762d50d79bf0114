"""Text comparison keys shared by the loaders, the splits, validation and the store."""

from __future__ import annotations

import re
import unicodedata

__all__ = ["normalise_text"]

_NON_WORD = re.compile(r"[^\w\s]+")


def normalise_text(text: str) -> str:
    """Comparison key for texts: NFKC, case-folded, punctuation dropped, spaces collapsed.

    Deliberately loose, because it is used to *find* duplicates and leakage: two
    sentences that differ only in case, quotes or a final full stop count as one.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_NON_WORD.sub(" ", folded).split())
