"""Label updates from the data team: a CSV of ``id,dataset,label[,source][,text]`` per change.

Why it is built this way:

- Labels are appended, never overwritten (``labels`` keeps source, time and the update that
  brought each row), so any earlier label set can be rebuilt from the history.
- A label-set *lineage* (the label-set name, e.g. ``clef2024:calibration:seed=2026``) evolves
  by versions: ``label_set_versions`` is an append-only log of the set in force; its newest row
  is the head. A row of an update corrects a claim already in a head, or adds a claim of the
  head's dataset to it; a label for a claim the lineage *calibrates* (a target) is stored as
  gold only, never added to the calibration set.
- Before anything is written, the candidate set each touched lineage would become goes through
  the Great Expectations suite (:mod:`checkworthy.data.validation`). A failing suite rejects the
  whole update: the file and the failed expectations are recorded, no label is appended, the
  head and the calibration in force stay as they are.
- The file itself becomes a data version: it is copied under ``data/labels/``, ``dvc add data``
  records the new hash in ``data.dvc`` and ``dvc push`` stores it in the DVC remote; the hash
  and git revision go to ``data_versions``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, text

from checkworthy.config import ROOT
from checkworthy.data.user_csv import read_rows, require_filled
from checkworthy.data.versioning import dvc_env, git_rev
from checkworthy.errors import DataError
from checkworthy.store import rows as store

REQUIRED = ("id", "dataset", "label")
OPTIONAL = ("source", "text")
LABELS_LOCK = 7_2024_0003  # one label update at a time (DVC and the version log)


# --------------------------------------------------------------------------- the file


@dataclass(frozen=True)
class LabelRow:
    """One row of a label file; ``label`` stays a string when it is not 0 or 1 (validation says so)."""

    line: int
    id: str
    dataset: str
    label: int | str
    source: str | None = None
    text: str | None = None


def read_label_csv(path: Path) -> list[LabelRow]:
    """Read a label file; structural problems raise :class:`DataError` (file, line, field).

    Label values are not judged here: the validation suite reports every bad value at once.
    """
    name = str(path)
    _, records = read_rows(Path(path), REQUIRED, OPTIONAL)  # the one parser of user CSVs
    rows = []
    for line, rec in records:
        require_filled(name, line, rec, ("id", "dataset"))
        value = rec["label"].strip()
        rows.append(LabelRow(
            line, rec["id"].strip(), rec["dataset"].strip(),
            int(value) if value in ("0", "1") else value,
            (rec.get("source") or "").strip() or None,
            rec.get("text") if rec.get("text") else None,
        ))
    if not rows:
        raise DataError(name, 2, None, "no data rows")
    return rows


def file_sha256(path: Path) -> str:
    """sha256 of the file's bytes: the identity of a label update."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --------------------------------------------------------------------------- DVC


def dvc_in(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The DVC CLI in ``repo`` (the project, or a scratch clone in tests), quiet and offline."""
    exe = shutil.which("dvc", path=str(Path(sys.executable).parent)) or "dvc"
    return subprocess.run([exe, *args], cwd=repo, env=dvc_env(), check=True, capture_output=True, text=True)


def data_hash(repo: Path) -> str:
    """The md5 ``data.dvc`` records for ``data/``."""
    import yaml

    with open(repo / "data.dvc", encoding="utf-8") as fh:
        return yaml.safe_load(fh)["outs"][0]["md5"]


def version_data(repo: Path = ROOT, push: bool = True, remote: str | None = None) -> str:
    """Snapshot ``data/`` as a DVC version (``dvc add``; ``dvc push`` to the remote); return its md5.

    Unchanged data gives the same md5 and pushes nothing, so this is safe to repeat.
    """
    dvc_in(repo, "add", "-q", "data")
    if push:
        dvc_in(repo, "push", "-q", *(["-r", remote] if remote else []), "data.dvc")
    return data_hash(repo)


def record_data_version(conn: Connection, repo: Path = ROOT) -> int:
    """Store (once) the data version of ``repo`` (hash in data.dvc + git revision); return its id."""
    params = {"h": data_hash(repo), "g": git_rev(repo)}
    conn.execute(
        text("INSERT INTO data_versions (dvc_hash, git_rev) VALUES (:h, :g) ON CONFLICT DO NOTHING"), params
    )
    return conn.execute(
        text("SELECT id FROM data_versions WHERE dvc_hash = :h AND git_rev = :g"), params
    ).scalar_one()


def place_in_data(path: Path, repo: Path = ROOT, sub: str = "labels") -> Path:
    """The file's copy under ``data/<sub>/`` (copied there unless it already is; same bytes, same name)."""
    path = Path(path).resolve()
    folder = (repo / "data" / sub).resolve()
    if path.parent == folder:
        return path
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / path.name
    if dest.exists() and file_sha256(dest) != file_sha256(path):
        dest = folder / f"{path.stem}-{file_sha256(path)[:12]}{path.suffix}"
    if not dest.exists():
        tmp = dest.with_suffix(dest.suffix + ".tmp")
        shutil.copyfile(path, tmp)
        tmp.replace(dest)
    return dest


# --------------------------------------------------------------------------- lineages


def lineage_head(conn: Connection, name: str) -> int | None:
    """The label set in force for a lineage (None before its first version)."""
    return conn.execute(
        text("SELECT label_set_id FROM label_set_versions WHERE name = :n ORDER BY id DESC LIMIT 1"),
        {"n": name},
    ).scalar()


def set_head(
    conn: Connection, name: str, label_set_id: int, reason: str, update_id: int | None = None,
    data_version_id: int | None = None,
) -> bool:
    """Make ``label_set_id`` the lineage's head by appending a version; False if it already is."""
    head = conn.execute(
        text("SELECT id, label_set_id FROM label_set_versions WHERE name = :n ORDER BY id DESC LIMIT 1"),
        {"n": name},
    ).first()
    if head is not None and head.label_set_id == label_set_id:
        return False
    conn.execute(
        text(
            """INSERT INTO label_set_versions (name, label_set_id, parent_id, update_id, data_version_id,
               reason) VALUES (:n, :s, :p, :u, :dv, :r)"""
        ),
        {"n": name, "s": label_set_id, "p": head.id if head else None, "u": update_id,
         "dv": data_version_id, "r": reason},
    )
    return True


def ensure_head(conn: Connection, label_set_id: int, data_version_id: int | None = None) -> int:
    """The head of ``label_set_id``'s lineage, registering it as the first version if there is none.

    The main job re-creates its sampled calibration set on every run; once a lineage has
    versions, the data team's updates define it, so the existing head stays in force.
    """
    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LABELS_LOCK})
    name = conn.execute(text("SELECT name FROM label_sets WHERE id = :i"), {"i": label_set_id}).scalar_one()
    head = lineage_head(conn, name)
    if head is None:
        set_head(conn, name, label_set_id, "initial", data_version_id=data_version_id)
        return label_set_id
    return head


def register_target(conn: Connection, target: str, label_set_name: str, claim_ids: Sequence[int]) -> None:
    """Name the claims a lineage calibrates (needed by the leakage check and by recalibration)."""
    conn.execute(
        text(
            """INSERT INTO calibration_targets (name, label_set_name) VALUES (:t, :n)
               ON CONFLICT DO NOTHING"""
        ),
        {"t": target, "n": label_set_name},
    )
    conn.execute(
        text(
            """INSERT INTO target_claims (target, claim_id)
               SELECT :t, u.id FROM unnest(CAST(:c AS bigint[])) AS u(id) ON CONFLICT DO NOTHING"""
        ),
        {"t": target, "c": list(map(int, claim_ids))},
    )


def target_claim_ids(conn: Connection, label_set_name: str) -> dict[str, list[int]]:
    """The claims each target of a lineage holds, by target name."""
    rows = conn.execute(
        text(
            """SELECT t.name, tc.claim_id FROM calibration_targets t
               JOIN target_claims tc ON tc.target = t.name WHERE t.label_set_name = :n
               ORDER BY t.name, tc.claim_id"""
        ),
        {"n": label_set_name},
    ).all()
    out: dict[str, list[int]] = {}
    for r in rows:
        out.setdefault(r.name, []).append(r.claim_id)
    return out


def heads(conn: Connection) -> dict[str, int]:
    """Every lineage and its head label set."""
    rows = conn.execute(
        text("SELECT DISTINCT ON (name) name, label_set_id FROM label_set_versions ORDER BY name, id DESC")
    ).all()
    return {r.name: r.label_set_id for r in rows}


# --------------------------------------------------------------------------- applying an update


@dataclass
class Candidate:
    """What one lineage would become: its rows (for validation) and its claims after the update."""

    name: str
    head_id: int
    rows: list[dict[str, Any]]
    changed_keys: set[tuple[str, str]] = field(default_factory=set)


@dataclass
class LabelUpdateOutcome:
    """What applying a label file did (or, if ``status == 'rejected'``, refused to do)."""

    update_id: int
    status: str
    reused: bool
    n_rows: int
    n_appended: int
    new_heads: dict[str, int]
    validation_run_ids: list[int]
    data_version_id: int | None


@cache
def _raw_claims(dataset: str) -> dict[str, Any]:
    """Claims of a project dataset by source id, from the raw files (label rows of unstored claims)."""
    from checkworthy.runs.main_job import load_dataset

    claims, _ = load_dataset(dataset)
    return {c.source_id: c for c in claims}


def _resolve(conn: Connection, path: Path, rows: Sequence[LabelRow]) -> dict[tuple[str, str], dict[str, Any]]:
    """Each row's claim: the stored one, else its text from the row or from the raw dataset."""
    keys = sorted({(r.dataset, r.id) for r in rows})
    found = conn.execute(
        text(
            """SELECT c.id, c.dataset, c.source_id, c.split, t.text FROM unnest(CAST(:d AS text[]),
               CAST(:i AS text[])) AS u(dataset, source_id)
               JOIN claims c ON c.dataset = u.dataset AND c.source_id = u.source_id
               JOIN texts t ON t.text_hash = c.text_hash"""
        ),
        {"d": [k[0] for k in keys], "i": [k[1] for k in keys]},
    ).all()
    out = {(r.dataset, r.source_id): {"claim_id": r.id, "split": r.split, "text": r.text} for r in found}
    for r in rows:
        key = (r.dataset, r.id)
        if key in out:
            if r.text is not None and out[key]["claim_id"] is not None and r.text != out[key]["text"]:
                raise DataError(path, r.line, "text",
                                f"claim {r.id!r} of {r.dataset!r} is stored with another text")
            continue
        if r.text is not None:
            out[key] = {"claim_id": None, "split": "labels", "text": r.text}
            continue
        raw = _raw_claims(r.dataset) if r.dataset in ("claimbuster", "clef2024") else {}
        if r.id not in raw:
            raise DataError(path, r.line, "id",
                            f"unknown claim {r.id!r} of {r.dataset!r}: give its text in a 'text' column")
        out[key] = {"claim_id": None, "split": raw[r.id].split, "text": raw[r.id].text}
    return out


def _head_rows(conn: Connection, head_id: int) -> list[dict[str, Any]]:
    rows = conn.execute(
        text(
            """SELECT i.claim_id, c.dataset, c.source_id, t.text, i.label FROM label_set_items i
               JOIN claims c ON c.id = i.claim_id JOIN texts t ON t.text_hash = c.text_hash
               WHERE i.label_set_id = :s ORDER BY i.claim_id"""
        ),
        {"s": head_id},
    ).mappings()
    return [dict(r) | {"line": None} for r in rows]


def plan_update(
    conn: Connection, path: Path, rows: Sequence[LabelRow]
) -> tuple[list[Candidate], dict[tuple[str, str], dict[str, Any]]]:
    """The candidate set of every lineage the rows touch, and each row's claim."""
    resolved = _resolve(conn, path, rows)
    candidates = []
    for name, head_id in sorted(heads(conn).items()):
        base = _head_rows(conn, head_id)
        in_head = {(r["dataset"], r["source_id"]) for r in base}
        datasets = {r["dataset"] for r in base}
        targets = {i for ids in target_claim_ids(conn, name).values() for i in ids}
        mine = [r for r in rows
                if (r.dataset, r.id) in in_head
                or (r.dataset in datasets and resolved[(r.dataset, r.id)]["claim_id"] not in targets)]
        if not mine:
            continue
        touched = {(r.dataset, r.id) for r in mine}
        cand = [b for b in base if (b["dataset"], b["source_id"]) not in touched]
        cand += [{"claim_id": resolved[(r.dataset, r.id)]["claim_id"], "dataset": r.dataset,
                  "source_id": r.id, "text": resolved[(r.dataset, r.id)]["text"], "label": r.label,
                  "line": r.line} for r in mine]
        candidates.append(Candidate(name, head_id, cand, touched))
    return candidates, resolved


def apply_label_file(
    engine: Engine, path: Path, bounds: Any = None, data_version_id: int | None = None,
    source: str | None = None,
) -> LabelUpdateOutcome:
    """Validate and apply one label file in one transaction; the same bytes are considered once.

    ``bounds`` are the validation bounds (:class:`checkworthy.data.validation.Bounds`).
    """
    from checkworthy.data import validation

    path = Path(path)
    rows = read_label_csv(path)
    sha = file_sha256(path)
    bounds = bounds or validation.Bounds()
    source = source or f"file:{path.name}"
    with engine.begin() as conn:
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LABELS_LOCK})
        done = conn.execute(text("SELECT * FROM label_updates WHERE file_sha256 = :h"),
                            {"h": sha}).mappings().first()
        if done is not None:
            return _outcome_of(conn, done)
        candidates, resolved = plan_update(conn, path, rows)
        in_lineage = {key for c in candidates for key in c.changed_keys}
        for r in rows:  # gold-only rows never reach a label set, but must still be labels
            if (r.dataset, r.id) not in in_lineage and r.label not in (0, 1):
                raise DataError(path, r.line, "label", f"must be 0 or 1, got {r.label!r}")
        outcomes = [validation.run_suite(
            validation.build_frame(c.rows, validation.target_texts(conn, c.name)), bounds)
            for c in candidates]
        ok = all(o.success for o in outcomes)
        n_new = _count_new_labels(conn, rows, resolved) if ok else 0
        update_id = conn.execute(
            text(
                """INSERT INTO label_updates (file_sha256, path, source, status, n_rows, n_appended,
                   data_version_id) VALUES (:h, :p, :s, :st, :n, :na, :dv) RETURNING id"""
            ),
            {"h": sha, "p": str(path), "s": source, "st": "applied" if ok else "rejected",
             "n": len(rows), "na": n_new, "dv": data_version_id},
        ).scalar_one()
        vids = [validation.store_outcome(conn, o, c.name, None, update_id, data_version_id)
                for c, o in zip(candidates, outcomes)]
        new_heads: dict[str, int] = {}
        if ok:
            appended = _append(conn, rows, resolved, source, update_id)
            if appended != n_new:
                raise RuntimeError(f"appended {appended} labels, expected {n_new}")
            for c in candidates:
                ids = [r["claim_id"] if r["claim_id"] is not None
                       else resolved[(r["dataset"], r["source_id"])]["claim_id"] for r in c.rows]
                new_id = store.create_label_set(conn, c.name, ids, data_version_id)
                if set_head(conn, c.name, new_id, "labels", update_id, data_version_id):
                    new_heads[c.name] = new_id
    return LabelUpdateOutcome(update_id, "applied" if ok else "rejected", False, len(rows), n_new,
                              new_heads, vids, data_version_id)


def _count_new_labels(
    conn: Connection, rows: Sequence[LabelRow], resolved: dict[tuple[str, str], dict[str, Any]]
) -> int:
    """How many labels :func:`_append` will add (a row whose label equals the current one adds none)."""
    known = [v["claim_id"] for v in resolved.values() if v["claim_id"] is not None]
    current: dict[Any, int] = dict(store.current_labels(conn, known))
    n = 0
    for r in rows:
        claim = resolved[(r.dataset, r.id)]["claim_id"] or (r.dataset, r.id)
        if current.get(claim) != r.label:
            n += 1
            current[claim] = int(r.label)
    return n


def _append(
    conn: Connection, rows: Sequence[LabelRow], resolved: dict[tuple[str, str], dict[str, Any]],
    default_source: str, update_id: int,
) -> int:
    """Store new claims, then append each row's label where it differs from the current one."""
    new = [(key, v) for key, v in resolved.items() if v["claim_id"] is None]
    if new:
        ids = store.upsert_claims(conn, [store.NewClaim(k[0], v["split"], k[1], v["text"]) for k, v in new])
        for (_, v), i in zip(new, ids):
            v["claim_id"] = i
    n = 0
    for r in rows:  # in file order: a later row for the same claim is the newer label
        n += conn.execute(
            text(
                """INSERT INTO labels (claim_id, label, source, update_id)
                   SELECT :c, :l, :s, :u WHERE (SELECT label FROM current_labels WHERE claim_id = :c)
                   IS DISTINCT FROM CAST(:l AS smallint)"""
            ),
            {"c": resolved[(r.dataset, r.id)]["claim_id"], "l": int(r.label), "s": r.source or default_source,
             "u": update_id},
        ).rowcount
    return n


def _outcome_of(conn: Connection, row: Mapping[str, Any]) -> LabelUpdateOutcome:
    heads_ = conn.execute(
        text("SELECT name, label_set_id FROM label_set_versions WHERE update_id = :u ORDER BY id"),
        {"u": row["id"]},
    ).all()
    vids = conn.execute(text("SELECT id FROM validation_runs WHERE label_update_id = :u ORDER BY id"),
                        {"u": row["id"]}).scalars().all()
    return LabelUpdateOutcome(row["id"], row["status"], True, row["n_rows"], row["n_appended"],
                              {h.name: h.label_set_id for h in heads_}, list(vids), row["data_version_id"])


def pending_label_files(conn: Connection, repo: Path = ROOT) -> list[Path]:
    """CSV files under data/labels/ not yet considered (by content), oldest first."""
    files = sorted((repo / "data" / "labels").glob("*.csv"), key=lambda p: (p.stat().st_mtime, p.name))
    if not files:
        return []
    seen = set(conn.execute(text("SELECT file_sha256 FROM label_updates WHERE file_sha256 = ANY(:h)"),
                            {"h": [file_sha256(p) for p in files]}).scalars())
    return [p for p in files if file_sha256(p) not in seen]


def append_file_labels(conn: Connection, claim_ids: Sequence[int], labels: Sequence[int], source: str) -> int:
    """Append a dataset file's labels without undoing the data team's corrections.

    A file label is appended only when that claim has no label from this source yet, or when
    the file's label differs from the last label this source gave (the file itself changed).
    """
    return conn.execute(
        text(
            """INSERT INTO labels (claim_id, label, source)
               SELECT u.c, u.l, :s FROM unnest(CAST(:c AS bigint[]), CAST(:l AS smallint[])) AS u(c, l)
               WHERE (SELECT l2.label FROM labels l2 WHERE l2.claim_id = u.c AND l2.source = :s
                      ORDER BY l2.id DESC LIMIT 1) IS DISTINCT FROM u.l"""
        ),
        {"c": list(map(int, claim_ids)), "l": list(map(int, labels)), "s": source},
    ).rowcount


# --------------------------------------------------------------------------- history


def label_history(conn: Connection, claim_id: int) -> list[Mapping[str, Any]]:
    """Every label a claim ever had, oldest first, with source, time, update and flow run."""
    return list(conn.execute(
        text("SELECT id, label, source, created_at, update_id, flow_run_id FROM labels "
             "WHERE claim_id = :c ORDER BY id"), {"c": claim_id}).mappings())


def labels_as_of(conn: Connection, claim_ids: Sequence[int], at: datetime) -> dict[int, int]:
    """Each claim's label as it stood at time ``at`` (from the append-only history)."""
    rows = conn.execute(
        text(
            """SELECT DISTINCT ON (claim_id) claim_id, label FROM labels
               WHERE claim_id = ANY(:c) AND created_at <= :at ORDER BY claim_id, id DESC"""
        ),
        {"c": list(map(int, claim_ids)), "at": at},
    ).all()
    return {r.claim_id: r.label for r in rows}


def reconstruct_label_set(conn: Connection, label_set_id: int) -> dict[int, int]:
    """Rebuild a label-set version from the label history and check it against its fingerprint.

    Each item points at the label row it froze; the labels table is append-only, so the
    (claim, label) pairs and hence the fingerprint can always be recomputed.
    """
    rows = conn.execute(
        text(
            """SELECT i.claim_id, c.text_hash, l.label FROM label_set_items i
               JOIN labels l ON l.id = i.label_id JOIN claims c ON c.id = i.claim_id
               WHERE i.label_set_id = :s"""
        ),
        {"s": label_set_id},
    ).all()
    fingerprint = store.sha256_text("\n".join(sorted(f"{r.claim_id}:{r.text_hash}:{r.label}" for r in rows)))
    expected = conn.execute(text("SELECT fingerprint FROM label_sets WHERE id = :s"),
                            {"s": label_set_id}).scalar_one()
    if fingerprint != expected:
        raise ValueError(f"label set {label_set_id}: history does not reproduce its fingerprint")
    return {r.claim_id: r.label for r in rows}


def version_log(conn: Connection, name: str) -> list[Mapping[str, Any]]:
    """A lineage's versions, oldest first: which set, why, from which update and data version."""
    return list(conn.execute(
        text(
            """SELECT v.*, ls.fingerprint, ls.n_items, ls.n_positive, dv.dvc_hash, dv.git_rev
               FROM label_set_versions v JOIN label_sets ls ON ls.id = v.label_set_id
               LEFT JOIN data_versions dv ON dv.id = v.data_version_id WHERE v.name = :n ORDER BY v.id"""
        ),
        {"n": name},
    ).mappings())


def store_file_claims(conn: Connection, claims: Sequence[store.NewClaim], source: str) -> list[int]:
    """Store a dataset file's claims and labels without reverting later label corrections."""
    ids = store.upsert_claims(conn, claims)
    labelled = [(i, c.label) for i, c in zip(ids, claims) if c.label is not None]
    append_file_labels(conn, [i for i, _ in labelled], [lab for _, lab in labelled], source)
    return ids


def lineages_for_dataset(conn: Connection, dataset: str, names: Sequence[str] | None = None) -> list[str]:
    """The lineages whose calibration set is of ``dataset``: those of ``names`` if given (a
    scheduled run that names its lineages), else the first by name."""
    found = list(conn.execute(
        text(
            """SELECT v.name FROM (SELECT DISTINCT ON (name) name, label_set_id FROM label_set_versions
                                  ORDER BY name, id DESC) v
               WHERE EXISTS (SELECT 1 FROM label_set_items i JOIN claims c ON c.id = i.claim_id
                             WHERE i.label_set_id = v.label_set_id AND c.dataset = :d)
                 AND (CAST(:names AS text[]) IS NULL OR v.name = ANY(CAST(:names AS text[])))
               ORDER BY v.name"""
        ),
        {"d": dataset, "names": list(names) if names is not None else None},
    ).scalars())
    if not found:
        raise ValueError(f"no calibration label set of dataset {dataset!r}: run the main job first")
    return found if names is not None else found[:1]


def ingest_claims(engine: Engine, path: Path, lineages: Sequence[str] | None = None) -> dict[str, list[int]]:
    """Newly arrived claims (CSV ``id,dataset,text``) become the target ``<dataset>:incoming``.

    They are calibrated by the lineages of their dataset named in ``lineages`` (default: the
    first by name); the same file ingested twice adds nothing.
    """
    name = str(path)
    _, records = read_rows(Path(path), ("id", "dataset", "text"), None)
    rows = []
    for line, rec in records:
        require_filled(name, line, rec, ("id", "dataset", "text"))
        rows.append(store.NewClaim(rec["dataset"].strip(), "incoming", rec["id"].strip(), rec["text"]))
    out: dict[str, list[int]] = {}
    with engine.begin() as conn:
        ids = store.upsert_claims(conn, rows)
        for dataset in sorted({r.dataset for r in rows}):
            mine = [i for i, r in zip(ids, rows) if r.dataset == dataset]
            target = f"{dataset}:incoming"
            for lineage in lineages_for_dataset(conn, dataset, lineages):
                register_target(conn, target, lineage, mine)
            out[target] = mine
    return out
