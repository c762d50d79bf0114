"""API keys: a name, a role, and the sha256 of the secret; revoked by adding a row.

The secret is random (256 bits), shown once when the key is created and never stored, so a fast
hash is enough to keep a stolen table useless (no dictionary to try). Every request looks its
key up here, so a revocation holds from the next request on.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection, text

#: who may do what: a scorer submits texts and reads explanations, an auditor only reads
ROLES = ("scorer", "auditor")
PREFIX = "cwk_"
NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass(frozen=True)
class ApiKey:
    """A key in force."""

    id: int
    name: str
    role: str


def key_hash(secret: str) -> str:
    """The stored form of a secret."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def check_new_key(conn: Connection, name: str, role: str) -> None:
    """Refuse a bad name or role, or a name already taken, before anything is written."""
    if not NAME.match(name):
        raise ValueError(f"key name {name!r}: use 1-64 letters, digits, '.', '_' or '-'")
    if role not in ROLES:
        raise ValueError(f"role {role!r}: choose from {list(ROLES)}")
    if conn.execute(text("SELECT 1 FROM api_keys WHERE name = :n"), {"n": name}).first():
        raise ValueError(f"a key named {name!r} exists already (names are never reused)")


def create_key(conn: Connection, name: str, role: str) -> tuple[ApiKey, str]:
    """Store a new key; return it with its secret (the only time the secret is seen)."""
    check_new_key(conn, name, role)
    secret = PREFIX + secrets.token_urlsafe(32)
    key_id = conn.execute(
        text("INSERT INTO api_keys (name, role, key_prefix, key_hash) VALUES (:n, :r, :p, :h) RETURNING id"),
        {"n": name, "r": role, "p": secret[: len(PREFIX) + 6], "h": key_hash(secret)},
    ).scalar_one()
    return ApiKey(key_id, name, role), secret


def revoke_key(conn: Connection, name: str) -> bool:
    """Revoke the key named ``name``; False if it was revoked already. LookupError if unknown."""
    key_id = conn.execute(text("SELECT id FROM api_keys WHERE name = :n"), {"n": name}).scalar()
    if key_id is None:
        raise LookupError(f"no key named {name!r}")
    return conn.execute(
        text("INSERT INTO api_key_revocations (key_id) VALUES (:k) ON CONFLICT DO NOTHING"), {"k": key_id}
    ).rowcount == 1


def key_for(conn: Connection, secret: str) -> ApiKey | None:
    """The key in force whose secret this is; None for an unknown or revoked one."""
    row = conn.execute(
        text("""SELECT k.id, k.name, k.role FROM api_keys k WHERE k.key_hash = :h
                AND NOT EXISTS (SELECT 1 FROM api_key_revocations r WHERE r.key_id = k.id)"""),
        {"h": key_hash(secret)},
    ).first()
    return None if row is None else ApiKey(row.id, row.name, row.role)


def list_keys(conn: Connection) -> list[Mapping[str, Any]]:
    """Every key (never its secret or hash), oldest first, with when it was revoked."""
    return cast(list[Mapping[str, Any]], list(conn.execute(text(
        """SELECT k.id, k.name, k.role, k.key_prefix, k.created_at, r.revoked_at
           FROM api_keys k LEFT JOIN api_key_revocations r ON r.key_id = k.id ORDER BY k.id""")).mappings()))
