"""Files out, written whole or not at all: into a temporary file (or folder) beside the target,
then renamed onto it.

A write that fails (a full disk, a folder gone read-only) removes what it had written and raises
:class:`~checkworthy.errors.OutputUnwritable`, so a reader never meets half a file and the
command line says so in one line. Whether the target can be written at all is checked before
anything is stored (:mod:`checkworthy.cli.checks`, with :func:`cannot_create_in`); this covers
what can still go wrong after that. Every temporary name is hidden, this process's and this
call's own, so parallel writers (processes or threads) never share one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any, BinaryIO, TextIO, cast

from checkworthy.errors import OutputUnwritable

#: the mode of a written folder: artefacts are read by other users (containers)
FOLDER_MODE = 0o755


def _beside(target: Path, suffix: str) -> Path:
    """A hidden name beside ``target``, unique to this process and call."""
    return target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.{suffix}")


def _discard(path: Path) -> None:
    """Remove a temporary file or folder, if it is there (quietly: the cleanup of a failure)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


@contextlib.contextmanager
def _or_unwritable(out: Path, tmp: Path) -> Iterator[None]:
    """On any failure in the block remove ``tmp``; an ``OSError`` becomes ``OutputUnwritable(out)``."""
    try:
        yield
    except OSError as exc:
        _discard(tmp)
        raise OutputUnwritable(out, exc) from exc
    except BaseException:
        _discard(tmp)
        raise


@contextlib.contextmanager
def _atomic_open(out: Path, mode: str, **kwargs: Any) -> Iterator[IO[Any]]:
    """A file opened with ``mode`` that replaces ``out`` when the block ends, synced to disk first."""
    tmp = _beside(out, "tmp")
    with _or_unwritable(out, tmp):
        with open(tmp, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())  # a full disk may only show here, or at close
        os.replace(tmp, out)


@contextlib.contextmanager
def atomic_text(out: Path) -> Iterator[TextIO]:
    """A UTF-8 text file (no newline translation: csv writes its own) that replaces ``out`` when
    the block ends; on any failure it is removed and ``out`` is untouched."""
    with _atomic_open(out, "w", newline="", encoding="utf-8") as fh:
        yield cast(TextIO, fh)


@contextlib.contextmanager
def atomic_bytes(out: Path) -> Iterator[BinaryIO]:
    """A binary file that replaces ``out`` when the block ends; on any failure it is removed and
    ``out`` is untouched."""
    with _atomic_open(out, "wb") as fh:
        yield cast(BinaryIO, fh)


def replace_text(out: Path, text: str) -> None:
    """Make ``out`` hold ``text`` (UTF-8), atomically: a small pointer or a whole document."""
    with atomic_text(out) as fh:
        fh.write(text)


def place_folder(stage: Path, folder: Path, replace: bool = True) -> None:
    """Rename ``stage`` (beside ``folder``) onto ``folder``. An existing ``folder`` is moved aside
    first and removed after (put back if the rename fails); with ``replace=False`` it is left alone
    and the rename fails (``OSError``) unless it is missing or empty."""
    old = _beside(folder, "old")
    if replace and folder.exists():
        folder.rename(old)
    try:
        stage.rename(folder)
    except OSError:
        if old.exists() and not folder.exists():
            old.rename(folder)
        raise
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def staging_folder(parent: Path, out: Path | None = None) -> Iterator[Path]:
    """An empty hidden folder (:data:`FOLDER_MODE`) in ``parent`` (made if missing), to be moved
    into place with :func:`place_folder` once its final name is known; whatever was not moved is
    removed when the block ends. A failure raises ``OutputUnwritable`` naming ``out`` (else
    ``parent``)."""
    stage = _beside(parent / "stage", "tmp")
    with _or_unwritable(out or parent, stage):
        parent.mkdir(parents=True, exist_ok=True)
        stage.mkdir()
        stage.chmod(FOLDER_MODE)
        yield stage
    _discard(stage)


@contextlib.contextmanager
def atomic_folder(folder: Path, replace: bool = True) -> Iterator[Path]:
    """An empty folder beside ``folder`` that takes its place when the block ends
    (:func:`place_folder`, ``replace`` as there); on any failure it is removed and ``folder`` is
    as it was."""
    with staging_folder(folder.parent, folder) as stage:
        yield stage
        place_folder(stage, folder, replace)


def write_tree(folder: Path, files: Mapping[str, bytes]) -> None:
    """Make ``folder`` hold exactly ``files`` (relative path -> bytes): they are written into a
    sibling folder that then takes its place, so a failure leaves the old folder (or none)."""
    with atomic_folder(folder) as stage:
        for rel, data in files.items():
            path = stage / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())


def cannot_create_in(folder: Path) -> str | None:
    """Why no file can be created in ``folder`` (None when one can), found by creating and removing
    one: permission bits do not tell for root, a read-only mount or a pseudo file system."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".checkworthy-", suffix=".tmp")
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(name)
    return None
