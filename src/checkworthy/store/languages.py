"""Stored languages of texts (``text_languages``, migration 0021): which texts lack one, storing
what :func:`checkworthy.data.language.detect` says, and reading them by claim or label set.

Each distinct text is identified once, like its embedding: :func:`ensure_languages` detects only
the texts that have no stored language. A claim's language is its text's.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import version

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sqlalchemy import Connection, text

from checkworthy.data.language import detect
from checkworthy.method.drift import Drift, drift_status


def detector() -> str:
    """The detector recorded with each language: py3langid and its version."""
    return f"py3langid {version('py3langid')}"


def ensure_languages(conn: Connection, text_hashes: Sequence[str]) -> int:
    """Detect and store the language of every text in ``text_hashes`` that has none stored yet;
    return how many were detected."""
    missing = conn.execute(
        text("""SELECT t.text_hash, t.text FROM texts t
                WHERE t.text_hash = ANY(:h)
                  AND NOT EXISTS (SELECT 1 FROM text_languages l WHERE l.text_hash = t.text_hash)
                ORDER BY t.text_hash"""),
        {"h": list(set(text_hashes))},
    ).all()
    if not missing:
        return 0
    name = detector()
    conn.execute(
        text("INSERT INTO text_languages (text_hash, language, confidence, reason, detector) "
             "VALUES (:h, :l, :c, :r, :d) ON CONFLICT DO NOTHING"),
        [{"h": row.text_hash, "l": got.code, "c": got.confidence, "r": got.reason, "d": name}
         for row, got in zip(missing, detect(row.text for row in missing))],
    )
    return len(missing)


def claim_languages(conn: Connection, claim_ids: Sequence[int]) -> dict[int, str]:
    """Each claim's stored language by claim id (a claim whose text has none stored is absent)."""
    rows = conn.execute(
        text("""SELECT c.id, l.language FROM claims c JOIN text_languages l ON l.text_hash = c.text_hash
                WHERE c.id = ANY(:c)"""),
        {"c": [int(i) for i in claim_ids]},
    ).all()
    return {int(r.id): r.language for r in rows}


def languages_of(conn: Connection, claim_ids: Sequence[int]) -> list[str | None]:
    """Each claim's stored language in the order of ``claim_ids`` (None where its text has none)."""
    langs = claim_languages(conn, claim_ids)
    return [langs.get(int(i)) for i in claim_ids]


def drift_status_of(conn: Connection, claim_ids: Sequence[int], nearest: ArrayLike,
                    figure: Drift | None) -> NDArray[np.int8]:
    """Each of a run's claims' drift status as the run held it back (:func:`drift_status` with the
    claims' stored languages): a claim in a language its figure names is never automatic."""
    return drift_status(nearest, figure, languages_of(conn, claim_ids))


def label_set_languages(conn: Connection, label_set_id: int) -> dict[str, int]:
    """How many of a label set's claims are in each language (stored ones; ``und`` included)."""
    rows = conn.execute(
        text("""SELECT l.language, count(*) AS n FROM label_set_items i
                JOIN claims c ON c.id = i.claim_id
                JOIN text_languages l ON l.text_hash = c.text_hash
                WHERE i.label_set_id = :s GROUP BY l.language ORDER BY l.language"""),
        {"s": label_set_id},
    ).all()
    return {r.language: int(r.n) for r in rows}

