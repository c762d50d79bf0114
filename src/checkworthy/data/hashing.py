"""File fingerprints: the sha256 that names the exact bytes a result was computed from."""

from __future__ import annotations

import hashlib
from os import PathLike

__all__ = ["PathArg", "sha256_file"]

#: a file path as the readers accept it
PathArg = str | PathLike[str]


def sha256_file(path: PathArg, chunk_size: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes (streamed; identifies the exact data used)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_size):
            h.update(chunk)
    return h.hexdigest()
