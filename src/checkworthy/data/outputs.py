"""Files out, written whole or not at all: into a temporary file (or folder) beside the target,
then renamed onto it.

A write that fails at that last step (a full disk, a folder gone read-only) removes what it had
written and raises :class:`~checkworthy.errors.OutputUnwritable`, so a reader never meets half a
file and the command line says so in one line. Whether the target can be written at all is
checked before anything is stored (:mod:`checkworthy.cli.checks`); this covers what can still go
wrong after that.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TextIO

from checkworthy.errors import OutputUnwritable


def _beside(target: Path, suffix: str) -> Path:
    """A hidden name of this process's beside ``target`` (two processes never share one)."""
    return target.with_name(f".{target.name}.{os.getpid()}.{suffix}")


@contextlib.contextmanager
def atomic_text(out: Path) -> Iterator[TextIO]:
    """A UTF-8 text file (no newline translation: csv writes its own) that replaces ``out`` when
    the block ends, synced to disk first; on any failure it is removed and ``out`` is untouched."""
    tmp = _beside(out, "tmp")
    try:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())  # a full disk may only show here, or at close
        os.replace(tmp, out)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise OutputUnwritable(out, exc) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise


def write_tree(folder: Path, files: Mapping[str, bytes]) -> None:
    """Make ``folder`` hold exactly ``files`` (relative path -> bytes): they are written into a
    sibling folder that then takes its place, so a failure leaves the old folder (or none)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    stage, old = _beside(folder, "tmp"), _beside(folder, "old")
    try:
        for rel, data in files.items():
            path = stage / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        if folder.exists():
            folder.rename(old)
        stage.rename(folder)
    except OSError as exc:
        shutil.rmtree(stage, ignore_errors=True)
        if old.exists() and not folder.exists():
            old.rename(folder)
        raise OutputUnwritable(folder, exc) from exc
    shutil.rmtree(old, ignore_errors=True)
