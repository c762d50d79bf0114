"""Label updates from the data team, and newly arrived claims.

- A label file (:mod:`checkworthy.data.label_files`) corrects claims already in a lineage's
  head or adds claims of the head's dataset to it; a label for a claim of a held-out target the
  lineage calibrates is stored as gold only, never added to the calibration set. A newly arrived
  claim (target ``<dataset>:incoming``) is no held-out claim: its label joins the set.
- Before anything is written, the candidate set each touched lineage would become goes through
  the Great Expectations suite (:mod:`checkworthy.data.validation`). A failing suite rejects the
  whole update: the file and the failed expectations are recorded, no label is appended, the
  head and the calibration in force stay as they are.
- A file of new claims becomes the target ``<dataset>:incoming`` of its dataset's lineages.

Versioning the file itself with DVC is :mod:`checkworthy.data.versioning`; the tables are
written by :mod:`checkworthy.store.lineages` and :mod:`checkworthy.store.label_updates`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine

from checkworthy.config import ROOT
from checkworthy.data import validation
from checkworthy.data.datasets import load_dataset
from checkworthy.data.hashing import sha256_file
from checkworthy.data.label_files import LabelRow, label_files_in, read_claims_csv, read_label_csv, set_aside
from checkworthy.errors import DataError
from checkworthy.runs.label_gate import lineage_bounds
from checkworthy.store import label_updates as history
from checkworthy.store import lineages as lineage_store
from checkworthy.store import review_queue, validations
from checkworthy.store import rows as store


@dataclass
class Candidate:
    """What one lineage would become: its rows (for validation) and its claims after the update."""

    name: str
    head_id: int
    rows: list[dict[str, Any]]
    changed_keys: set[tuple[str, str]] = field(default_factory=set)


@dataclass(frozen=True)
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
    claims, _ = load_dataset(dataset)
    return {c.source_id: c for c in claims}


def _resolve(conn: Connection, path: Path, rows: Sequence[LabelRow]) -> dict[tuple[str, str], dict[str, Any]]:
    """Each row's claim: the stored one, else its text from the row or from the raw dataset."""
    out = history.stored_claims(conn, sorted({(r.dataset, r.id) for r in rows}))
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
        try:
            raw = _raw_claims(r.dataset) if r.dataset in ("claimbuster", "clef2024") else {}
        except FileNotFoundError as exc:  # a clone whose data/ has not been pulled yet
            raise DataError(path, r.line, "dataset",
                            f"claim {r.id!r} has no text here and the raw data of {r.dataset!r} is not "
                            f"there ({exc.filename}): pull it (`dvc pull`) or give its text in a 'text' "
                            "column") from None
        if r.id not in raw:
            raise DataError(path, r.line, "id",
                            f"unknown claim {r.id!r} of {r.dataset!r}: give its text in a 'text' column")
        out[key] = {"claim_id": None, "split": raw[r.id].split, "text": raw[r.id].text}
    return out


def plan_update(
    conn: Connection, path: Path, rows: Sequence[LabelRow]
) -> tuple[list[Candidate], dict[tuple[str, str], dict[str, Any]]]:
    """The candidate set of every lineage the rows touch, and each row's claim.

    A row touches a lineage when its claim is in the lineage's head, is one of the team's own
    claims the lineage calibrates (a target that is not held out: a ``predict`` batch, the API's
    claims, newly arrived ones), or is of a dataset of the head and in none of its held-out
    targets (whose labels are gold only).
    """
    resolved = _resolve(conn, path, rows)
    known = [v["claim_id"] for v in resolved.values() if v["claim_id"] is not None]
    candidates = []
    for name, head_id in sorted(lineage_store.heads(conn).items()):
        base = validations.label_set_rows(conn, head_id)
        in_head = {(r["dataset"], r["source_id"]) for r in base}
        datasets = {r["dataset"] for r in base}
        held_out = lineage_store.held_out_claim_ids(conn, name)
        own = lineage_store.own_claim_ids(conn, name, known)
        mine = [r for r in rows
                if (r.dataset, r.id) in in_head or resolved[(r.dataset, r.id)]["claim_id"] in own
                or (r.dataset in datasets and resolved[(r.dataset, r.id)]["claim_id"] not in held_out)]
        if not mine:
            continue
        touched = {(r.dataset, r.id) for r in mine}
        cand = [b for b in base if (b["dataset"], b["source_id"]) not in touched]
        cand += [{"claim_id": resolved[(r.dataset, r.id)]["claim_id"], "dataset": r.dataset,
                  "source_id": r.id, "text": resolved[(r.dataset, r.id)]["text"], "label": r.label,
                  "line": r.line} for r in mine]
        candidates.append(Candidate(name, head_id, cand, touched))
    return candidates, resolved


def check_label_file(
    conn: Connection, path: Path, rows: Sequence[LabelRow] | None = None,
) -> tuple[list[Candidate], dict[tuple[str, str], dict[str, Any]]]:
    """What can be known of a label file before it is versioned or applied: its rows parse, each
    names a known claim (stored, in a raw dataset, or with its text) with the text it is stored
    with, and a row outside every lineage has a label of 0 or 1. Raises :class:`DataError`
    naming the file, line and field; returns the update's plan (see :func:`plan_update`)."""
    rows = read_label_csv(path) if rows is None else rows
    candidates, resolved = plan_update(conn, path, rows)
    in_lineage = {key for c in candidates for key in c.changed_keys}
    for r in rows:  # gold-only rows never reach a label set, but must still be labels
        if (r.dataset, r.id) not in in_lineage and r.label not in (0, 1):
            raise DataError(path, r.line, "label", f"must be 0 or 1, got {r.label!r}")
    return candidates, resolved


def refuse_label_file(engine: Engine, path: Path, repo: Path, reason: str,
                      data_version_id: int | None = None) -> Path:
    """Record a refused label file (status 'rejected', with the reason) and move it out of
    ``data/labels/`` so the watch deployment never tries it again; return where it went."""
    path = Path(path)
    sha = sha256_file(path)
    with path.open("rb") as fh:  # physical lines: the file may not parse at all
        n_rows = max(0, sum(1 for _ in fh) - 1)
    with engine.begin() as conn:
        lineage_store.lock_labels(conn)
        if history.find_update(conn, sha) is None:
            history.insert_update(conn, sha, str(path), f"file:{path.name}", "rejected", n_rows, 0,
                                  data_version_id, reason)
    return set_aside(path, repo)


def apply_label_file(
    engine: Engine, path: Path, bounds: validation.Bounds | None = None, data_version_id: int | None = None,
    source: str | None = None,
) -> LabelUpdateOutcome:
    """Validate and apply one label file in one transaction; the same bytes are considered once."""
    path = Path(path)
    rows = read_label_csv(path)
    sha = sha256_file(path)
    bounds = bounds or validation.Bounds()
    source = source or f"file:{path.name}"
    with engine.begin() as conn:
        lineage_store.lock_labels(conn)
        done = history.find_update(conn, sha)
        if done is not None:
            return _outcome_of(conn, done)
        candidates, resolved = check_label_file(conn, path, rows)
        outcomes = [validation.run_suite(
            validation.build_frame(c.rows, validations.target_texts(conn, c.name)),
            lineage_bounds(conn, c.name, bounds)) for c in candidates]
        ok = all(o.success for o in outcomes)
        n_new = _count_new_labels(conn, rows, resolved) if ok else 0
        update_id = history.insert_update(conn, sha, str(path), source, "applied" if ok else "rejected",
                                          len(rows), n_new, data_version_id)
        vids = [validations.store_outcome(conn, o, c.name, None, update_id, data_version_id)
                for c, o in zip(candidates, outcomes)]
        new_heads: dict[str, int] = {}
        if ok:
            appended = _append(conn, rows, resolved, source, update_id)
            if appended != n_new:
                raise RuntimeError(f"appended {appended} labels, expected {n_new}")
            # a person's label closes the claim's review-queue entries, in the same transaction
            review_queue.close_answered(conn, update_id, {
                resolved[(r.dataset, r.id)]["claim_id"]: int(r.label) for r in rows})
            for c in candidates:
                ids = [r["claim_id"] if r["claim_id"] is not None
                       else resolved[(r["dataset"], r["source_id"])]["claim_id"] for r in c.rows]
                new_id = store.create_label_set(conn, c.name, ids, data_version_id)
                if lineage_store.set_head(conn, c.name, new_id, "labels", update_id, data_version_id):
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
        n += history.append_label(conn, resolved[(r.dataset, r.id)]["claim_id"], int(r.label),
                                  r.source or default_source, update_id)
    return n


def _outcome_of(conn: Connection, row: Mapping[str, Any]) -> LabelUpdateOutcome:
    """The outcome of an update applied (or rejected) before."""
    return LabelUpdateOutcome(row["id"], row["status"], True, row["n_rows"], row["n_appended"],
                              history.heads_set_by(conn, row["id"]),
                              validations.runs_of_update(conn, row["id"]), row["data_version_id"])


def pending_label_files(conn: Connection, repo: Path = ROOT) -> list[Path]:
    """CSV files under data/labels/ not yet considered (by content), oldest first."""
    files = label_files_in(repo)
    if not files:
        return []
    shas = {p: sha256_file(p) for p in files}
    seen = history.known_update_files(conn, list(shas.values()))
    return [p for p in files if shas[p] not in seen]


def store_file_claims(conn: Connection, claims: Sequence[store.NewClaim], source: str) -> list[int]:
    """Store a dataset file's claims and labels without reverting later label corrections."""
    ids = store.upsert_claims(conn, claims)
    labelled = [(i, c.label) for i, c in zip(ids, claims) if c.label is not None]
    history.append_file_labels(conn, [i for i, _ in labelled], [lab for _, lab in labelled], source)
    return ids


def ingest_claims(
    engine: Engine, path: Path, lineages: Sequence[str] | None = None
) -> dict[str, list[int]]:
    """Newly arrived claims (CSV ``id,dataset,text``) become the target ``<dataset>:incoming``.

    They are calibrated by the lineages of their dataset named in ``lineages`` (default: the
    first by name); the same file ingested twice adds nothing.
    """
    rows = [store.NewClaim(r.dataset, "incoming", r.id, r.text) for r in read_claims_csv(Path(path))]
    out: dict[str, list[int]] = {}
    with engine.begin() as conn:
        ids = store.upsert_claims(conn, rows)
        for dataset in sorted({r.dataset for r in rows}):
            mine = [i for i, r in zip(ids, rows) if r.dataset == dataset]
            target = f"{dataset}{lineage_store.INCOMING}"
            for lineage in lineage_store.lineages_for_dataset(conn, dataset, lineages):
                lineage_store.register_target(conn, target, lineage, mine)
            out[target] = mine
    return out
