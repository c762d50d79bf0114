"""Which data and code produced a result: the DVC hash of ``data/`` and the git revision."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from sqlalchemy import Connection, text

from checkworthy.config import CODE_ROOT, DATA_DIR, ROOT


def dvc_env() -> dict[str, str]:
    """DVC quiet and offline: no analytics, a site cache inside the project."""
    env = dict(os.environ)
    env.setdefault("DVC_NO_ANALYTICS", "1")
    env.setdefault("DVC_SITE_CACHE_DIR", str(ROOT / "var" / "dvc-site"))
    return env


def dvc(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the DVC CLI of this environment in the project root."""
    exe = shutil.which("dvc", path=str(Path(sys.executable).parent)) or "dvc"
    return subprocess.run(
        [exe, *args], cwd=ROOT, env=dvc_env(), check=check, capture_output=True, text=True
    )


def ensure_data() -> None:
    """A fresh clone has ``data.dvc`` but no ``data/``: pull it from the project's DVC remote."""
    if not (DATA_DIR / "raw").exists():
        dvc("pull", "-q")


def dvc_data_hash(dvc_file: Path = ROOT / "data.dvc") -> str:
    """The md5 that ``data.dvc`` records for ``data/`` (the dataset version)."""
    with open(dvc_file, encoding="utf-8") as fh:
        return yaml.safe_load(fh)["outs"][0]["md5"]


def git_rev(repo: Path = CODE_ROOT) -> str:
    """The revision of a git checkout (``<sha>`` or ``<sha>-dirty``), by default the code's own.

    Outside a git checkout (a container image) it is ``$CHECKWORTHY_CODE_REV``, set at build time
    (empty if unset).
    """
    if os.environ.get("CHECKWORTHY_CODE_REV"):
        return os.environ["CHECKWORTHY_CODE_REV"]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return f"{sha}-dirty" if dirty else sha


def record_data_version(conn: Connection) -> int:
    """Store (once) the current data version with the git revision of the project that holds
    ``data.dvc`` (the code's checkout unless CHECKWORTHY_ROOT points elsewhere); return its id."""
    params = {"h": dvc_data_hash(), "g": git_rev(ROOT)}
    conn.execute(
        text("INSERT INTO data_versions (dvc_hash, git_rev) VALUES (:h, :g) ON CONFLICT DO NOTHING"),
        params,
    )
    return conn.execute(
        text("SELECT id FROM data_versions WHERE dvc_hash = :h AND git_rev = :g"), params
    ).scalar_one()
