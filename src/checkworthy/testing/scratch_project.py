"""A scratch checkworthy project for end-to-end tests, built from real CLEF 2024 claims.

Scores are imported (``file:`` model spec: a CSV a weak model could have produced), the params
file is small (CLEF only, k in {3, 5}, 40 claims per class), and the project is a real git + DVC
repository with ``data/labels/`` and a DVC remote of its own (the project's own data.dvc and
dvcstore/ are never touched). With ``raw_data`` it also holds the raw CLEF files under
``data/raw/clef2024/``, so that it is a complete data project: ``CHECKWORTHY_ROOT`` can point at it
(the CLI and the served deployments then read and version their data there).
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from sqlalchemy import text

from checkworthy.config import ROOT
from checkworthy.data import versioning
from checkworthy.data.datasets import load_clef
from checkworthy.data.text import normalise_text
from checkworthy.store import lineages
from checkworthy.store import rows as store
from checkworthy.store.engine import application_url
from checkworthy.testing.datasets import raw_path

CLEF_FILES = (("train", "CT24_checkworthy_english_train.tsv"),
              ("dev", "CT24_checkworthy_english_dev.tsv"),
              ("dev-test", "CT24_checkworthy_english_dev-test.tsv"))
VENV_BIN = Path(sys.executable).parent


def text_score(t: str) -> float:
    """A weak model's score: numbers look check-worthy, plus text-hash noise (one score per text)."""
    u = int(hashlib.sha256(t.encode()).hexdigest()[:8], 16) / 2**32
    return round(float(np.clip(0.25 + 0.35 * any(ch.isdigit() for ch in t) + 0.4 * u, 0, 1)), 4)


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def make_dvc_repo(root: Path) -> Path:
    """A scratch git + DVC project with data/ tracked and a local-directory remote (never the project's)."""
    repo = root / "repo"
    (repo / "data" / "labels").mkdir(parents=True)
    (repo / "data" / "labels" / "README.md").write_text("label updates\n")
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.org")
    git(repo, "config", "user.name", "t")
    versioning.dvc_in(repo, "init", "-q")
    versioning.dvc_in(repo, "config", "core.analytics", "false")
    versioning.dvc_in(repo, "remote", "add", "-d", "local", str(root / "dvcstore"))
    versioning.dvc_in(repo, "add", "-q", "data")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "data v1")
    return repo


def lineage(seed: int) -> str:
    """The CLEF calibration lineage the main job makes with this seed."""
    return f"clef2024:calibration:seed={seed}"


def make_scratch_project(tmp: Path, db_url: str, seed: int, *, raw_data: bool = False,
                         **params: Any) -> dict[str, Any]:
    """Imported scores for every CLEF text, a params file (``params`` override keys of the project's
    params.yaml after the test defaults), and a scratch git + DVC repository under ``tmp``."""
    texts: dict[str, str] = {}
    for split, name in CLEF_FILES:
        for c in load_clef(raw_path("clef2024", name), split)[0]:
            texts.setdefault(c.text, f"{split}:{c.source_id}")
    scores = tmp / "scores.csv"
    with open(scores, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "text", "score"])
        w.writerows([i, t, text_score(t)] for t, i in texts.items())
    values = yaml.safe_load((ROOT / "params.yaml").read_text())
    values.update(seed=seed, datasets=["clef2024"], k=[3, 5], models=[{"spec": f"file:{scores}"}],
                  sampling={"clef2024": {"n_per_class": 40}}, scoring={"chunk_size": 1000},
                  validation={"min_rows": 20, "max_rows": 100_000, "positive_rate": [0.2, 0.8]})
    values.update(params)
    params_path = tmp / "params.yaml"
    params_path.write_text(yaml.safe_dump(values))
    if raw_data:
        raw = tmp / "repo" / "data" / "raw" / "clef2024"
        raw.mkdir(parents=True)
        for _, name in CLEF_FILES:
            shutil.copyfile(raw_path("clef2024", name), raw / name)
    repo = make_dvc_repo(tmp)
    return {"tmp": tmp, "params": str(params_path), "repo": repo, "db_url": db_url, "scores": scores,
            "seed": seed, "lineage": lineage(seed)}


# --------------------------------------------------------------------------- for the subprocess tests


@contextmanager
def fresh_database(owner_url: str, name: str) -> Iterator[str]:
    """A new database ``name`` on the session's Postgres server, migrated by its owner; the URL of
    the application's login to it (:func:`checkworthy.store.engine.application_url`); dropped
    afterwards.

    End-to-end tests whose label files reach every CLEF lineage, or whose served ``watch`` records
    the guidelines baseline, use one so that they neither see nor change the other tests' lineages.
    """
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    url = make_url(owner_url)
    admin = create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    drop()
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield application_url(url.set(database=name).render_as_string(hide_password=False))
    finally:
        drop()
        admin.dispose()


def project_env(project: dict[str, Any], db_url: str, prefect_home: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``checkworthy`` process working on the scratch project: its data root,
    params file and database, its own Prefect home (no ``PREFECT_API_URL``: the ephemeral API,
    unless ``extra`` names a server)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "CHECKWORTHY_")) and k not in ("DATABASE_URL",)}
    env.update(CHECKWORTHY_ROOT=str(project["repo"]), CHECKWORTHY_PARAMS=project["params"],
               DATABASE_URL=db_url, PREFECT_HOME=str(prefect_home), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               DO_NOT_TRACK="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 600
            ) -> subprocess.CompletedProcess[str]:
    """The real console script ``.venv/bin/checkworthy`` as a subprocess (output captured)."""
    return subprocess.run([str(VENV_BIN / "checkworthy"), *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


FIRST_CALIBRATIONS = """
from checkworthy.flows.pipeline import pipeline_flow
out = pipeline_flow(commit_data=False)  # the project of CHECKWORTHY_ROOT, the params of CHECKWORTHY_PARAMS
print("runs", sorted(out.run_ids))
"""


def first_calibrations(project: dict[str, Any], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The main job's flow in the scratch project (what ``checkworthy run`` runs, without its report):
    the first calibrations (one per k), as they stand before label updates arrive."""
    done = subprocess.run([sys.executable, "-c", FIRST_CALIBRATIONS], env=env,
                          cwd=project["repo"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"the pipeline flow failed:\n{done.stdout}\n{done.stderr}"
    return done


def write_label_file(engine, lineage: str, path: Path) -> dict[str, Any]:
    """A label file of 16 new labels (8 per class: CLEF train claims the lineage does not hold, each
    with a text of its own, none shared with the test split) and 2 corrections (flipped labels of
    members); no text column, so the raw CLEF files give the texts. Returns the head it was written
    against."""
    with engine.connect() as conn:
        head = lineages.lineage_head(conn, lineage)
        members = store.label_set_claims(conn, head)
        in_set = set(conn.execute(text("SELECT source_id FROM claims WHERE id = ANY(:i)"),
                                  {"i": members}).scalars())
        flips = conn.execute(text("SELECT c.source_id, cl.label FROM claims c JOIN current_labels cl "
                                  "ON cl.claim_id = c.id WHERE c.id = ANY(:i) ORDER BY c.id LIMIT 2"),
                             {"i": members}).all()
    train, _ = load_clef(raw_path("clef2024", "CT24_checkworthy_english_train.tsv"), "train")
    test_texts = {normalise_text(c.text) for c in load_clef(
        raw_path("clef2024", "CT24_checkworthy_english_dev-test.tsv"), "dev-test")[0]}
    n_text: dict[str, int] = {}
    for c in train:
        n_text[normalise_text(c.text)] = n_text.get(normalise_text(c.text), 0) + 1
    fresh = [c for c in train[4000:] if c.source_id not in in_set and n_text[normalise_text(c.text)] == 1
             and normalise_text(c.text) not in test_texts]  # no duplicate text, no leak into the test split
    new = [c for c in fresh if c.label == 1][:8] + [c for c in fresh if c.label == 0][:8]
    part = path.with_suffix(".part")  # written aside, then renamed: a watch run never sees half a file
    with open(part, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "dataset", "label", "source"])  # no text: the raw CLEF files in data/raw give it
        w.writerows([c.source_id, "clef2024", c.label, "annotator:ann"] for c in new)
        w.writerows([f.source_id, "clef2024", 1 - f.label, "annotator:bob"] for f in flips)
    part.rename(path)
    return {"head": head, "new": new, "flips": [f.source_id for f in flips]}


def pushed_files(project: dict[str, Any], dvc_hash: str) -> dict[str, str]:
    """The files of a data version (``<md5>.dir``) as pushed to the scratch DVC remote: relpath -> md5."""
    import json

    md5 = dvc_hash.removesuffix(".dir")
    listing = project["tmp"] / "dvcstore" / "files" / "md5" / md5[:2] / f"{md5[2:]}.dir"
    return {e["relpath"]: e["md5"] for e in json.loads(listing.read_text())}


def md5_of(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()
