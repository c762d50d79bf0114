"""Files and folders out, whole or not at all (:mod:`checkworthy.data.outputs`): on real files in a
temporary folder, no temporary name left behind either way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from checkworthy.data.outputs import (
    FOLDER_MODE,
    atomic_bytes,
    atomic_folder,
    cannot_create_in,
    place_folder,
    replace_text,
    staging_folder,
)
from checkworthy.errors import OutputUnwritable


def test_a_file_is_replaced_whole_or_left_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "cache.npz"
    with atomic_bytes(out) as fh:
        np.savez(fh, x=np.arange(3))  # a file object: numpy adds no ".npz" to the name
    with np.load(out) as data:
        assert data["x"].tolist() == [0, 1, 2]
    with pytest.raises(KeyError), atomic_bytes(out) as fh:
        fh.write(b"half")
        raise KeyError("stop")
    with np.load(out) as data:
        assert data["x"].tolist() == [0, 1, 2]
    replace_text(tmp_path / "LATEST", "abc\n")
    replace_text(tmp_path / "LATEST", "déf\r\n")  # no newline translation, UTF-8
    assert (tmp_path / "LATEST").read_bytes() == "déf\r\n".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LATEST", "cache.npz"]


def test_a_file_that_cannot_be_written_says_so_in_one_error(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "out.txt"
    with pytest.raises(OutputUnwritable, match="out.txt: could not be written"):
        replace_text(out, "x")
    assert not list(tmp_path.iterdir())


def test_a_folder_takes_the_old_ones_place_or_the_old_one_stays(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    with atomic_folder(folder) as stage:
        (stage / "a.bin").write_bytes(b"1")
    assert (folder / "a.bin").read_bytes() == b"1" and folder.stat().st_mode & 0o777 == FOLDER_MODE
    with atomic_folder(folder) as stage:
        (stage / "b.bin").write_bytes(b"2")
    assert [p.name for p in folder.iterdir()] == ["b.bin"]  # replaced whole, not merged
    with pytest.raises(OutputUnwritable, match="model: could not be written"), atomic_folder(folder) as stage:
        (stage / ("x" * 300)).write_bytes(b"3")  # File name too long
    with pytest.raises(ValueError), atomic_folder(folder) as stage:
        (stage / "c.bin").write_bytes(b"4")
        raise ValueError("stop")
    assert [p.name for p in folder.iterdir()] == ["b.bin"]
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_a_folder_may_keep_a_parallel_writers_copy(tmp_path: Path) -> None:
    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "config.json").write_text("first")
    with pytest.raises(OutputUnwritable), atomic_folder(folder, replace=False) as stage:
        (stage / "config.json").write_text("second")
    assert (folder / "config.json").read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["weights"]


def test_a_folder_named_after_its_contents_is_staged_first(tmp_path: Path) -> None:
    base = tmp_path / "artefacts" / "tiny"
    with staging_folder(base) as stage:
        (stage / "head.json").write_text("{}")
        place_folder(stage, base / "abc123")
    with staging_folder(base) as stage:  # never placed: removed
        (stage / "head.json").write_text("{}")
    assert [p.name for p in base.iterdir()] == ["abc123"]


def test_whether_a_file_can_be_created_is_found_by_trying(tmp_path: Path) -> None:
    assert cannot_create_in(tmp_path) is None and not list(tmp_path.iterdir())
    assert cannot_create_in(tmp_path / "missing") == "No such file or directory"
