"""Which data and code produced a result: DVC snapshots of ``data/`` and the git revision.

The DVC CLI is run quiet and offline (:func:`dvc_in`); :func:`version_data` snapshots ``data/``
and pushes it to the remote, :func:`data_version` names the snapshot and the git revision (the
store records that pair in ``data_versions``), :func:`place_in_data` copies an incoming file
under ``data/`` so that it becomes part of the next snapshot.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

import yaml

from checkworthy.config import CODE_ROOT, DATA_DIR, ROOT
from checkworthy.data.datasets import RAW_FOLDERS
from checkworthy.data.hashing import sha256_file
from checkworthy.data.outputs import atomic_bytes


class DataVersion(NamedTuple):
    """A snapshot of ``data/`` (the md5 in ``data.dvc``) and the git revision of its project."""

    dvc_hash: str
    git_rev: str


def dvc_env() -> dict[str, str]:
    """DVC quiet and offline: no analytics, a site cache inside the project."""
    env = dict(os.environ)
    env.setdefault("DVC_NO_ANALYTICS", "1")
    env.setdefault("DVC_SITE_CACHE_DIR", str(ROOT / "var" / "dvc-site"))
    return env


def dvc_in(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The DVC CLI of this environment in ``repo`` (the project, or a scratch clone in tests)."""
    exe = shutil.which("dvc", path=str(Path(sys.executable).parent)) or "dvc"
    return subprocess.run([exe, *args], cwd=repo, env=dvc_env(), check=check, capture_output=True, text=True)


def dvc(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The DVC CLI in the project root."""
    return dvc_in(ROOT, *args, check=check)


def ensure_data() -> None:
    """A fresh clone has ``data.dvc`` but no ``data/``, an older checkout a ``data/`` without the
    datasets added since: pull ``data/`` from the project's DVC remote."""
    if not all((DATA_DIR / "raw" / folder).is_dir() for folder in RAW_FOLDERS):
        dvc("pull", "-q")


def pull_tracked(path: Path) -> None:
    """A DVC-tracked folder (``<path>.dvc`` beside it, e.g. a trained model) that a fresh clone
    lacks: pull it from the project's remote. Nothing happens when it is there or not tracked."""
    dvc_file = path.with_name(path.name + ".dvc")
    if not path.exists() and dvc_file.exists():
        dvc("pull", "-q", str(dvc_file.relative_to(ROOT)))


def data_hash(repo: Path = ROOT) -> str:
    """The md5 that ``data.dvc`` records for ``data/`` (the dataset version)."""
    with open(repo / "data.dvc", encoding="utf-8") as fh:
        return yaml.safe_load(fh)["outs"][0]["md5"]


def git_rev(repo: Path = CODE_ROOT) -> str:
    """The revision of a git checkout (``<sha>`` or ``<sha>-dirty``), by default the code's own;
    never blank.

    ``$CHECKWORTHY_CODE_REV``, when set, wins (a container image sets it at build time). Outside
    a git checkout, without it, it is the installed package's version marked ``-no-git``
    (``checkworthy-0.1.0-no-git``): which release ran, though not which commit.
    """
    if os.environ.get("CHECKWORTHY_CODE_REV"):
        return os.environ["CHECKWORTHY_CODE_REV"]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        sha = ""
    if not sha:
        return f"checkworthy-{package_version()}-no-git"
    return f"{sha}-dirty" if dirty else sha


def made_now() -> dict[str, str]:
    """An artefact manifest's ``created_at`` (UTC, to the second) and ``git_rev`` (:func:`git_rev`)."""
    return {"created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git_rev": git_rev()}


def package_version() -> str:
    """The installed checkworthy package's version (``unknown`` when it is not installed)."""
    try:
        return metadata.version("checkworthy")
    except metadata.PackageNotFoundError:
        return "unknown"


def data_version(repo: Path = ROOT) -> DataVersion:
    """The data version of ``repo``: the hash in its data.dvc and the git revision of the project
    that holds it (the code's checkout unless CHECKWORTHY_ROOT points elsewhere)."""
    return DataVersion(data_hash(repo), git_rev(repo))


def version_data(repo: Path = ROOT, push: bool = True, remote: str | None = None) -> str:
    """Snapshot ``data/`` as a DVC version (``dvc add``; ``dvc push`` to the remote); return its md5.

    Unchanged data gives the same md5 and pushes nothing, so this is safe to repeat.
    """
    dvc_in(repo, "add", "-q", "data")
    if push:
        dvc_in(repo, "push", "-q", *(["-r", remote] if remote else []), "data.dvc")
    return data_hash(repo)


def place_in_data(path: Path, repo: Path = ROOT, sub: str = "labels") -> Path:
    """The file's copy under ``data/<sub>/`` (copied there unless it already is; same bytes, same name)."""
    path = Path(path).resolve()
    folder = (repo / "data" / sub).resolve()
    if path.parent == folder:
        return path
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / path.name
    if dest.exists() and sha256_file(dest) != sha256_file(path):
        dest = folder / f"{path.stem}-{sha256_file(path)[:12]}{path.suffix}"
    if not dest.exists():
        with open(path, "rb") as src, atomic_bytes(dest) as fh:
            shutil.copyfileobj(src, fh)
    return dest
