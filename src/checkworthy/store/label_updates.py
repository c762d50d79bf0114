"""Label history in the store: the append-only ``labels`` table and the ``label_updates`` log.

Labels are appended, never overwritten (each row keeps its source, time and the update that
brought it), so any earlier label set can be rebuilt from the history.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, text

from checkworthy.store import rows as store


def find_update(conn: Connection, file_sha256: str) -> Mapping[str, Any] | None:
    """The label update of a file with these bytes, if it was considered before."""
    return cast("Mapping[str, Any] | None", conn.execute(
        text("SELECT * FROM label_updates WHERE file_sha256 = :h"), {"h": file_sha256}).mappings().first())


def known_update_files(conn: Connection, file_sha256s: Sequence[str]) -> set[str]:
    """Those of the file hashes that some label update already considered."""
    return set(conn.execute(text("SELECT file_sha256 FROM label_updates WHERE file_sha256 = ANY(:h)"),
                            {"h": list(file_sha256s)}).scalars())


def insert_update(
    conn: Connection, file_sha256: str, path: str, source: str, status: str, n_rows: int, n_appended: int,
    data_version_id: int | None, reason: str | None = None,
) -> int:
    """Log a label update (applied or rejected, with the reason of a refusal); return its id."""
    return cast(int, conn.execute(
        text(
            """INSERT INTO label_updates (file_sha256, path, source, status, n_rows, n_appended,
               data_version_id, reason) VALUES (:h, :p, :s, :st, :n, :na, :dv, :r) RETURNING id"""
        ),
        {"h": file_sha256, "p": path, "s": source, "st": status, "n": n_rows, "na": n_appended,
         "dv": data_version_id, "r": reason},
    ).scalar_one())


def heads_set_by(conn: Connection, update_id: int) -> dict[str, int]:
    """The lineage heads a label update set, by lineage name."""
    rows = conn.execute(
        text("SELECT name, label_set_id FROM label_set_versions WHERE update_id = :u ORDER BY id"),
        {"u": update_id},
    ).all()
    return {r.name: r.label_set_id for r in rows}


def stored_claims(conn: Connection, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The stored claims among ``(dataset, source_id)`` keys: claim id, split and text by key."""
    found = conn.execute(
        text(
            """SELECT c.id, c.dataset, c.source_id, c.split, t.text FROM unnest(CAST(:d AS text[]),
               CAST(:i AS text[])) AS u(dataset, source_id)
               JOIN claims c ON c.dataset = u.dataset AND c.source_id = u.source_id
               JOIN texts t ON t.text_hash = c.text_hash"""
        ),
        {"d": [k[0] for k in keys], "i": [k[1] for k in keys]},
    ).all()
    return {(r.dataset, r.source_id): {"claim_id": r.id, "split": r.split, "text": r.text} for r in found}


def append_label(conn: Connection, claim_id: int, label: int, source: str, update_id: int) -> int:
    """Append a label of an update unless it equals the claim's current one; return 1 or 0."""
    return conn.execute(
        text(
            """INSERT INTO labels (claim_id, label, source, update_id)
               SELECT :c, :l, :s, :u WHERE (SELECT label FROM current_labels WHERE claim_id = :c)
               IS DISTINCT FROM CAST(:l AS smallint)"""
        ),
        {"c": claim_id, "l": int(label), "s": source, "u": update_id},
    ).rowcount


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
    return cast(list[Mapping[str, Any]], list(conn.execute(
        text("SELECT id, label, source, created_at, update_id, flow_run_id FROM labels "
             "WHERE claim_id = :c ORDER BY id"), {"c": claim_id}).mappings()))


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
