"""The raw datasets as the tests and benchmarks find them: the project's own copy, else a shared one."""

from __future__ import annotations

from pathlib import Path

from checkworthy.config import ROOT

#: datasets shared by checkouts that have no data/ of their own (beside the checkout)
SHARED = ROOT.parent / "shared" / "datasets"


def raw_path(*parts: str) -> Path:
    """A raw dataset file: the project's copy under data/raw, else ../shared/datasets."""
    own = ROOT / "data" / "raw" / Path(*parts)
    return own if own.exists() else SHARED / Path(*parts)
