"""Label-set lineages and calibration targets.

A lineage (a label-set name, e.g. ``clef2024:calibration:seed=2026``) evolves by versions:
``label_set_versions`` is an append-only log of the set in force, its newest row is the head.
A target (``calibration_targets`` / ``target_claims``) names the claims a lineage calibrates.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Connection, text
from sqlalchemy.exc import OperationalError

from checkworthy.errors import StoreBusy

#: the target of a dataset's newly arrived claims (``<dataset>:incoming``): production claims, not a
#: held-out split, so a person's label for one joins the lineage (the review queue's loop)
INCOMING = ":incoming"
LABELS_LOCK = 7_2024_0003  # one label update at a time (DVC and the version log)
#: how long a label update waits for that lock (another update takes seconds); env overrides
LOCK_WAIT = os.environ.get("CHECKWORTHY_LOCK_TIMEOUT", "60s")


def lock_labels(conn: Connection) -> None:
    """Hold the label-update lock until the transaction ends; raise :class:`StoreBusy` (naming
    the holder) after ``LOCK_WAIT`` rather than wait forever on a session that never lets go."""
    before = conn.execute(text("SELECT current_setting('lock_timeout')")).scalar_one()
    conn.execute(text("SELECT set_config('lock_timeout', :t, true)"), {"t": LOCK_WAIT})
    try:
        with conn.begin_nested():
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": LABELS_LOCK})
    except OperationalError as exc:
        conn.execute(text("SELECT set_config('lock_timeout', :t, true)"), {"t": before})
        if getattr(exc.orig, "sqlstate", None) != "55P03":  # lock_not_available
            raise
        holder = conn.execute(text(
            """SELECT l.pid, a.usename FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
               WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                 AND ((l.classid::bigint << 32) | l.objid::bigint) = :k"""), {"k": LABELS_LOCK}).first()
        who = f"session {holder.pid} of {holder.usename}" if holder else "another session"
        raise StoreBusy(f"the label-update lock has been held by {who} for over {LOCK_WAIT}; nothing "
                        "was written: end that session and try again") from None
    conn.execute(text("SELECT set_config('lock_timeout', :t, true)"), {"t": before})


def label_set_name(conn: Connection, label_set_id: int) -> str:
    """The lineage a label set belongs to."""
    return cast(str, conn.execute(text("SELECT name FROM label_sets WHERE id = :i"),
                                  {"i": label_set_id}).scalar_one())


def lineage_head(conn: Connection, name: str) -> int | None:
    """The label set in force for a lineage (None before its first version)."""
    return conn.execute(
        text("SELECT label_set_id FROM label_set_versions WHERE name = :n ORDER BY id DESC LIMIT 1"),
        {"n": name},
    ).scalar()


def label_set_in_force(conn: Connection, name: str) -> int | None:
    """The label set a lineage calibrates with now: its head, else (a lineage of a user's file,
    never versioned) its newest label set; None for an unknown lineage."""
    head = lineage_head(conn, name)
    if head is not None:
        return head
    return conn.execute(text("SELECT id FROM label_sets WHERE name = :n ORDER BY id DESC LIMIT 1"),
                        {"n": name}).scalar()


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

    The main job re-creates its sampled calibration set on every run, and ``predict``,
    ``calibrate`` and ``adapt`` freeze their file's labels on every call (a lineage is of one
    file: its name is the file's hash, or a ``--name`` checked to be of no other file); once a
    lineage has versions, the data team's updates define it, so the existing head stays in force.
    """
    lock_labels(conn)
    name = label_set_name(conn, label_set_id)
    head = lineage_head(conn, name)
    if head is None:
        set_head(conn, name, label_set_id, "initial", data_version_id=data_version_id)
        return label_set_id
    return head


def heads(conn: Connection) -> dict[str, int]:
    """Every lineage and its head label set."""
    rows = conn.execute(
        text("SELECT DISTINCT ON (name) name, label_set_id FROM label_set_versions ORDER BY name, id DESC")
    ).all()
    return {r.name: r.label_set_id for r in rows}


def version_log(conn: Connection, name: str) -> list[Mapping[str, Any]]:
    """A lineage's versions, oldest first: which set, why, from which update and data version."""
    return cast(list[Mapping[str, Any]], list(conn.execute(
        text(
            """SELECT v.*, ls.fingerprint, ls.n_items, ls.n_positive, dv.dvc_hash, dv.git_rev
               FROM label_set_versions v JOIN label_sets ls ON ls.id = v.label_set_id
               LEFT JOIN data_versions dv ON dv.id = v.data_version_id WHERE v.name = :n ORDER BY v.id"""
        ),
        {"n": name},
    ).mappings()))


def lineage_datasets(conn: Connection, name: str) -> list[str]:
    """The datasets of the claims in a lineage's label sets, every version's, but for the team's
    own claims it calibrates and labelled since (a batch, the API's): a user's file's lineage
    holds its file's dataset only (none for a name not in use)."""
    return list(conn.execute(
        text(
            """SELECT DISTINCT c.dataset FROM label_sets ls JOIN label_set_items i ON i.label_set_id = ls.id
               JOIN claims c ON c.id = i.claim_id
               WHERE ls.name = :n AND NOT EXISTS (
                 SELECT 1 FROM calibration_targets t JOIN target_claims tc ON tc.target = t.name
                 WHERE t.label_set_name = :n AND NOT t.held_out AND tc.claim_id = c.id)
               ORDER BY c.dataset"""
        ),
        {"n": name},
    ).scalars())


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


# --------------------------------------------------------------------------- targets


def register_target(conn: Connection, target: str, label_set_name: str, claim_ids: Sequence[int],
                    held_out: bool | None = None) -> None:
    """Name the claims a lineage calibrates (needed by the leakage check and by recalibration).

    ``held_out``: a split the lineage is measured on, whose labels are gold only; False for the
    team's own claims (a batch, the API's, newly arrived ones), whose labels join the lineage.
    None: held out unless the target is a dataset's newly arrived claims (:data:`INCOMING`).
    """
    if held_out is None:
        held_out = not target.endswith(INCOMING)
    conn.execute(
        text(
            """INSERT INTO calibration_targets (name, label_set_name, held_out) VALUES (:t, :n, :h)
               ON CONFLICT DO NOTHING"""
        ),
        {"t": target, "n": label_set_name, "h": held_out},
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


def held_out_claim_ids(conn: Connection, label_set_name: str) -> set[int]:
    """The claims of a lineage's held-out targets: a label for one is gold only."""
    return set(conn.execute(
        text(
            """SELECT tc.claim_id FROM calibration_targets t JOIN target_claims tc ON tc.target = t.name
               WHERE t.label_set_name = :n AND t.held_out"""
        ),
        {"n": label_set_name},
    ).scalars())


def own_claim_ids(conn: Connection, label_set_name: str, claim_ids: Sequence[int]) -> set[int]:
    """Those of ``claim_ids`` in a target of the lineage that is not held out (the team's own
    claims: a label for one joins the lineage)."""
    return set(conn.execute(
        text(
            """SELECT DISTINCT tc.claim_id FROM calibration_targets t
               JOIN target_claims tc ON tc.target = t.name WHERE t.label_set_name = :n AND NOT t.held_out
                 AND tc.claim_id = ANY(:c)"""
        ),
        {"n": label_set_name, "c": list(map(int, claim_ids))},
    ).scalars())


def measured_lineages(conn: Connection) -> set[str]:
    """The lineages with a held-out target (the main job's: measured on a held-out split)."""
    return set(conn.execute(text("SELECT DISTINCT label_set_name FROM calibration_targets WHERE held_out"))
               .scalars())


def claims_of_lineage(conn: Connection, name: str, keys: Sequence[tuple[str, str]]
                      ) -> dict[tuple[str, str], int]:
    """The claims among ``(dataset, source_id)`` keys that lineage ``name`` holds (its head) or
    calibrates (its targets), by key: the claims a person labels for it."""
    rows = conn.execute(
        text(
            """SELECT c.id, c.dataset, c.source_id FROM unnest(CAST(:d AS text[]), CAST(:i AS text[]))
                 AS u(dataset, source_id)
               JOIN claims c ON c.dataset = u.dataset AND c.source_id = u.source_id
               WHERE EXISTS (SELECT 1 FROM label_set_items i WHERE i.claim_id = c.id AND i.label_set_id =
                             (SELECT v.label_set_id FROM label_set_versions v WHERE v.name = :n
                              ORDER BY v.id DESC LIMIT 1))
                  OR EXISTS (SELECT 1 FROM calibration_targets t JOIN target_claims tc ON tc.target = t.name
                             WHERE t.label_set_name = :n AND tc.claim_id = c.id)"""
        ),
        {"n": name, "d": [k[0] for k in keys], "i": [k[1] for k in keys]},
    ).all()
    return {(r.dataset, r.source_id): r.id for r in rows}


def lineage_space(conn: Connection, name: str) -> str | None:
    """The embedding model a lineage calibrates in (``lineage_spaces``, migration 0022); None for a
    lineage that has recorded none yet (its first run or :func:`record_space` records it)."""
    return conn.execute(text("SELECT model FROM lineage_spaces WHERE name = :n"), {"n": name}).scalar()


def record_space(conn: Connection, name: str, model: str) -> str:
    """Record ``model`` as the lineage's space unless it has one; return the space it is in (the
    one recorded first: a lineage never changes space)."""
    conn.execute(text("INSERT INTO lineage_spaces (name, model) VALUES (:n, :m) ON CONFLICT DO NOTHING"),
                 {"n": name, "m": model})
    return cast(str, conn.execute(text("SELECT model FROM lineage_spaces WHERE name = :n"),
                                  {"n": name}).scalar_one())
