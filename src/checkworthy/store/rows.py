"""Writes and reads of claims, labels, models, prompts and predictions (thin SQL adapters).

Every write is idempotent: texts, claims, models and predictions are inserted with
``ON CONFLICT DO NOTHING`` and read back; a label is appended only when it differs from the
claim's current label. Callers own the transaction (pass a connection from ``engine.begin()``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike
from sqlalchemy import Connection, text

from checkworthy.errors import DataError
from checkworthy.scorers.base import Score


def sha256_text(value: str) -> str:
    """The key of a text in ``texts``: sha256 of its UTF-8 bytes."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def bigint_array(ids: ArrayLike) -> str:
    """A ``bigint[]`` literal (bind it and ``CAST(... AS bigint[])``): psycopg adapts a list element
    by element (~1 µs each), while one string of 100k ids is built and parsed in milliseconds."""
    return "{" + ",".join(map(str, np.asarray(ids, dtype=np.int64).tolist())) + "}"


def params_hash(params: Mapping[str, Any]) -> str:
    """A stable hash of generation parameters (sorted-key JSON)."""
    return sha256_text(json.dumps(params, sort_keys=True, separators=(",", ":")))


@dataclass(frozen=True)
class NewClaim:
    """A claim to store: where it comes from, its text, optionally its gold label."""

    dataset: str
    split: str
    source_id: str
    text: str
    label: int | None = None


def upsert_claims(conn: Connection, claims: Sequence[NewClaim]) -> list[int]:
    """Store claims (and their texts) once; return their ids in input order.

    A stored claim whose text differs from the incoming one is an error, not an update:
    the same (dataset, source id) must always mean the same sentence.
    """
    if not claims:
        return []
    hashes = [sha256_text(c.text) for c in claims]
    conn.execute(
        text("INSERT INTO texts (text_hash, text) VALUES (:h, :t) ON CONFLICT DO NOTHING"),
        [{"h": h, "t": c.text} for h, c in zip(hashes, claims)],
    )
    conn.execute(
        text(
            "INSERT INTO claims (dataset, split, source_id, text_hash) VALUES (:d, :s, :i, :h) "
            "ON CONFLICT (dataset, source_id) DO NOTHING"
        ),
        [
            {"d": c.dataset, "s": c.split, "i": c.source_id, "h": h}
            for h, c in zip(hashes, claims)
        ],
    )
    rows = conn.execute(
        text(
            """SELECT c.id, c.text_hash, u.ord FROM unnest(CAST(:d AS text[]), CAST(:i AS text[]))
               WITH ORDINALITY AS u(dataset, source_id, ord)
               JOIN claims c ON c.dataset = u.dataset AND c.source_id = u.source_id
               ORDER BY u.ord"""
        ),
        {"d": [c.dataset for c in claims], "i": [c.source_id for c in claims]},
    ).all()
    for row, h, c in zip(rows, hashes, claims):
        if row.text_hash != h:
            raise DataError(
                c.dataset, None, "text",
                f"claim id {c.source_id!r} is already stored with another text",
            )
    return [row.id for row in rows]


def append_labels(
    conn: Connection, claim_ids: Sequence[int], labels: Sequence[int], source: str,
    flow_run_id: str | None = None,
) -> int:
    """Append each label that differs from the claim's current label; return how many."""
    if not claim_ids:
        return 0
    result = conn.execute(
        text(
            """INSERT INTO labels (claim_id, label, source, flow_run_id)
               SELECT u.claim_id, u.label, :src, :fr
               FROM unnest(CAST(:c AS bigint[]), CAST(:l AS smallint[])) AS u(claim_id, label)
               LEFT JOIN current_labels cl ON cl.claim_id = u.claim_id
               WHERE cl.label IS DISTINCT FROM u.label"""
        ),
        {"c": list(map(int, claim_ids)), "l": list(map(int, labels)), "src": source,
         "fr": flow_run_id},
    )
    return result.rowcount


def store_claims_with_labels(
    conn: Connection, claims: Sequence[NewClaim], source: str
) -> list[int]:
    """Store claims, append the labels that are given, return the claim ids."""
    ids = upsert_claims(conn, claims)
    labelled = [(i, c.label) for i, c in zip(ids, claims) if c.label is not None]
    append_labels(conn, [i for i, _ in labelled], [lab for _, lab in labelled], source)
    return ids


def current_labels(conn: Connection, claim_ids: Sequence[int]) -> dict[int, int]:
    """The newest label of each claim that has one."""
    rows = conn.execute(
        text("SELECT claim_id, label FROM current_labels WHERE claim_id = ANY(:c)"),
        {"c": list(map(int, claim_ids))},
    ).all()
    return {r.claim_id: r.label for r in rows}


def create_label_set(
    conn: Connection, name: str, claim_ids: Sequence[int], data_version_id: int | None = None
) -> int:
    """Freeze the current labels of ``claim_ids`` as a label set; same content, same set.

    The fingerprint is a sha256 over the sorted (text hash, label) pairs, so an unchanged
    labelled set maps to the existing row and a single corrected label makes a new one.
    """
    rows = conn.execute(
        text(
            """SELECT c.id, c.text_hash, cl.label, cl.label_id FROM claims c
               JOIN current_labels cl ON cl.claim_id = c.id WHERE c.id = ANY(:c)"""
        ),
        {"c": list(map(int, claim_ids))},
    ).all()
    if len(rows) != len(set(claim_ids)):
        raise ValueError(f"label set {name!r}: {len(set(claim_ids)) - len(rows)} claims have no label")
    pairs = sorted(f"{r.id}:{r.text_hash}:{r.label}" for r in rows)
    fingerprint = sha256_text("\n".join(pairs))
    conn.execute(
        text(
            """INSERT INTO label_sets (name, fingerprint, n_items, n_positive, data_version_id)
               VALUES (:n, :f, :ni, :np, :dv) ON CONFLICT (name, fingerprint) DO NOTHING"""
        ),
        {"n": name, "f": fingerprint, "ni": len(rows), "np": sum(r.label for r in rows),
         "dv": data_version_id},
    )
    set_id: int = conn.execute(
        text("SELECT id FROM label_sets WHERE name = :n AND fingerprint = :f"),
        {"n": name, "f": fingerprint},
    ).scalar_one()
    conn.execute(
        text(
            """INSERT INTO label_set_items (label_set_id, claim_id, label_id, label)
               SELECT :s, u.c, u.lid, u.l FROM unnest(CAST(:c AS bigint[]), CAST(:lid AS bigint[]),
               CAST(:l AS smallint[])) AS u(c, lid, l) ON CONFLICT DO NOTHING"""
        ),
        {"s": set_id, "c": [r.id for r in rows], "lid": [r.label_id for r in rows],
         "l": [r.label for r in rows]},
    )
    return set_id


def label_set_claims(conn: Connection, label_set_id: int) -> list[int]:
    """The claim ids of a label set, sorted."""
    return list(
        conn.execute(
            text("SELECT claim_id FROM label_set_items WHERE label_set_id = :s ORDER BY claim_id"),
            {"s": label_set_id},
        ).scalars()
    )


def label_set_texts(conn: Connection, label_set_id: int) -> list[tuple[str, int]]:
    """The (text, label) of each item of a label set, by claim id."""
    rows = conn.execute(
        text(
            """SELECT t.text, i.label FROM label_set_items i JOIN claims c ON c.id = i.claim_id
               JOIN texts t ON t.text_hash = c.text_hash WHERE i.label_set_id = :s ORDER BY i.claim_id"""
        ),
        {"s": label_set_id},
    ).all()
    return [(r.text, int(r.label)) for r in rows]


def label_set_fingerprint(conn: Connection, label_set_id: int) -> str:
    """The fingerprint of a label set (what identifies its labels, whatever its row id)."""
    return cast(str, conn.execute(
        text("SELECT fingerprint FROM label_sets WHERE id = :i"), {"i": label_set_id}
    ).scalar_one())


def ensure_model(conn: Connection, spec: str, kind: str, details: Mapping[str, Any] | None = None) -> int:
    """The id of a model spec, creating its row on first use."""
    conn.execute(
        text(
            "INSERT INTO models (spec, kind, details) VALUES (:s, :k, CAST(:d AS jsonb)) "
            "ON CONFLICT (spec) DO NOTHING"
        ),
        {"s": spec, "k": kind, "d": json.dumps(details or {})},
    )
    return cast(int, conn.execute(text("SELECT id FROM models WHERE spec = :s"), {"s": spec}).scalar_one())


def model_spec(conn: Connection, model_id: int) -> str:
    """The spec of a stored model."""
    return cast(str, conn.execute(text("SELECT spec FROM models WHERE id = :m"),
                                  {"m": model_id}).scalar_one())


def ensure_prompt_version(conn: Connection, version: str, guidelines: str, template: str) -> str:
    """Store a prompt version (the guidelines text it was built from) once."""
    conn.execute(
        text(
            "INSERT INTO prompt_versions (id, guidelines, template_version) VALUES (:i, :g, :t) "
            "ON CONFLICT (id) DO NOTHING"
        ),
        {"i": version, "g": guidelines, "t": template},
    )
    return version


def unscored_texts(
    conn: Connection, text_hashes: Iterable[str], model_id: int, prompt_version: str,
    params_hash_: str, score_kinds: Sequence[str],
) -> list[tuple[str, str]]:
    """(hash, text) of texts lacking a stored prediction of any of ``score_kinds``.

    A parse failure is a stored prediction too: it is not retried under the same key.
    """
    rows = conn.execute(
        text(
            """SELECT t.text_hash, t.text FROM texts t WHERE t.text_hash = ANY(:h)
               AND (SELECT count(DISTINCT p.score_kind) FROM predictions p
                    WHERE p.text_hash = t.text_hash AND p.model_id = :m
                      AND p.prompt_version = :pv AND p.params_hash = :ph
                      AND p.score_kind = ANY(:kinds)) < :nk
               ORDER BY t.text_hash"""
        ),
        {"h": sorted(set(text_hashes)), "m": model_id, "pv": prompt_version, "ph": params_hash_,
         "kinds": list(score_kinds), "nk": len(score_kinds)},
    ).all()
    return [(r.text_hash, r.text) for r in rows]


def insert_predictions(
    conn: Connection, model_id: int, prompt_version: str, params: Mapping[str, Any],
    results: Sequence[tuple[str, Mapping[str, Score]]], flow_run_id: str | None = None,
) -> int:
    """Store scorer outputs ``[(text_hash, {kind: Score})]``; existing keys are left as they are."""
    ph = params_hash(params)
    payload = [
        {"h": h, "m": model_id, "pv": prompt_version, "p": json.dumps(params, sort_keys=True),
         "ph": ph, "k": kind, "s": sc.score, "raw": sc.raw, "st": sc.status,
         "u": json.dumps(sc.usage), "fr": flow_run_id}
        for h, by_kind in results
        for kind, sc in by_kind.items()
    ]
    if not payload:
        return 0
    conn.execute(
        text(
            """INSERT INTO predictions (text_hash, model_id, prompt_version, params, params_hash,
               score_kind, score, raw_output, parse_status, usage, flow_run_id)
               VALUES (:h, :m, :pv, CAST(:p AS jsonb), :ph, :k, :s, :raw, :st, CAST(:u AS jsonb), :fr)
               ON CONFLICT DO NOTHING"""
        ),
        payload,
    )
    return len(payload)


def claim_scores(
    conn: Connection, claim_ids: Sequence[int], model_id: int, prompt_version: str,
    params_hash_: str, score_kind: str,
) -> dict[int, float | None]:
    """The stored score of each claim under one score key (None: stored as a parse failure)."""
    rows = conn.execute(
        text(
            """SELECT c.id, p.score FROM claims c JOIN predictions p ON p.text_hash = c.text_hash
               WHERE c.id = ANY(:c) AND p.model_id = :m AND p.prompt_version = :pv
                 AND p.params_hash = :ph AND p.score_kind = :k"""
        ),
        {"c": list(map(int, claim_ids)), "m": model_id, "pv": prompt_version,
         "ph": params_hash_, "k": score_kind},
    ).all()
    return {r.id: r.score for r in rows}


def claim_source_ids(conn: Connection, claim_ids: Sequence[int]) -> dict[int, str]:
    """The source id of each claim."""
    rows = conn.execute(
        text("SELECT id, source_id FROM claims WHERE id = ANY(:c)"), {"c": list(map(int, claim_ids))}
    ).all()
    return {r.id: r.source_id for r in rows}


def max_claims_per_text(conn: Connection, claim_ids: Sequence[int]) -> int:
    """The most claims among ``claim_ids`` that share one text (1 when there are none)."""
    return int(conn.execute(text(
        "SELECT coalesce(max(n), 1) FROM (SELECT count(*) AS n FROM claims WHERE id = ANY(:c) "
        "GROUP BY text_hash) d"), {"c": list(map(int, claim_ids))}).scalar_one())


def claim_text_hashes(conn: Connection, claim_ids: Sequence[int]) -> list[str]:
    """Text hashes of claims (input order not kept; for embedding/scoring work lists)."""
    return list(
        conn.execute(
            text("SELECT DISTINCT text_hash FROM claims WHERE id = ANY(:c)"),
            {"c": list(map(int, claim_ids))},
        ).scalars()
    )



@dataclass(frozen=True)
class ScoreKey:
    """Which stored scores to use: a model, a prompt version, generation parameters, a kind."""

    model_id: int
    prompt_version: str
    params_hash: str
    score_kind: str


def label_set_claims_without_score(conn: Connection, label_set_id: int, key: ScoreKey) -> list[int]:
    """The claims of a label set with no stored prediction under ``key`` (a parse failure counts as
    stored)."""
    return list(conn.execute(
        text(
            """SELECT i.claim_id FROM label_set_items i JOIN claims c ON c.id = i.claim_id
               WHERE i.label_set_id = :ls AND NOT EXISTS (
                 SELECT 1 FROM predictions p WHERE p.text_hash = c.text_hash AND p.model_id = :m
                   AND p.prompt_version = :pv AND p.params_hash = :ph AND p.score_kind = :sk)"""
        ),
        {"ls": label_set_id, "m": key.model_id, "pv": key.prompt_version, "ph": key.params_hash,
         "sk": key.score_kind},
    ).scalars().all())


def store_texts(conn: Connection, texts: Sequence[str]) -> list[str]:
    """Store each distinct text once (like claims, without a dataset); return their hashes."""
    hashes = [sha256_text(t) for t in texts]
    unique = dict(zip(hashes, texts))
    conn.execute(text("INSERT INTO texts (text_hash, text) VALUES (:h, :t) ON CONFLICT DO NOTHING"),
                 [{"h": h, "t": t} for h, t in unique.items()])
    return hashes


def stored_predictions(conn: Connection, keys: Mapping[str, ScoreKey], hashes: Sequence[str]
                       ) -> dict[tuple[str, str], Any]:
    """Stored predictions ``(text_hash, kind) -> row`` under the given keys (one per score kind)."""
    out: dict[tuple[str, str], Any] = {}
    for kind, key in keys.items():
        rows = conn.execute(
            text("""SELECT text_hash, score, parse_status, raw_output, usage FROM predictions
                    WHERE model_id = :m AND prompt_version = :pv AND params_hash = :ph
                      AND score_kind = :k AND text_hash = ANY(:h)"""),
            {"m": key.model_id, "pv": key.prompt_version, "ph": key.params_hash, "k": kind,
             "h": sorted(set(hashes))}).all()
        out.update({(r.text_hash.strip(), kind): r for r in rows})
    return out
