"""The API's keys: a known key is required from the headers before a byte of the body is read
(:class:`KeyFirst`, :class:`~checkworthy.serve.refusals.Guard`'s check), and each route asks for
the roles it allows (:data:`ScorerKey`, :data:`ReaderKey`).

Annotations are evaluated (no ``from __future__ import annotations``): FastAPI reads the
dependencies' signatures.
"""

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader
from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import Scope

from checkworthy.serve.refusals import ApiError
from checkworthy.store.api_keys import ApiKey, key_for

KEY_NAME = "X-API-Key"
KEY_HEADER = APIKeyHeader(name=KEY_NAME, auto_error=False, description="an API key "
                          "(`checkworthy keys create`)")


@dataclass(frozen=True)
class KeyFirst:
    """:class:`~checkworthy.serve.refusals.Guard`'s check: every path but the open ones needs a
    known key, checked before the body is read; the routes check its role (:func:`key_with`)."""

    engine: Engine
    open_paths: Collection[str | None]

    def authenticate(self, secret: str | None) -> ApiKey:
        if not secret:
            raise ApiError(401, "missing_key", "send an API key in the X-API-Key header", "X-API-Key")
        with self.engine.connect() as conn:
            key = key_for(conn, secret)
        if key is None:
            raise ApiError(401, "invalid_key", "unknown or revoked API key", "X-API-Key")
        return key

    async def __call__(self, scope: Scope) -> None:
        if scope["path"] not in self.open_paths:
            key = await run_in_threadpool(self.authenticate, Headers(scope=scope).get(KEY_NAME))
            scope.setdefault("state", {})["api_key"] = key


def key_with(*roles: str) -> Callable[..., ApiKey]:
    """A dependency: the key :class:`KeyFirst` found, when its role is one of ``roles`` (else 403)."""

    def check(request: Request, _: Annotated[str | None, Security(KEY_HEADER)]) -> ApiKey:
        """The role of the key :class:`Guard` found (the header is declared for the OpenAPI
        document)."""
        key: ApiKey = request.state.api_key
        if key.role not in roles:
            raise ApiError(403, "forbidden",
                           f"a {key.role} key cannot do this (needs {' or '.join(roles)})", "X-API-Key")
        return key
    return check


ScorerKey = Annotated[ApiKey, Depends(key_with("scorer"))]
ReaderKey = Annotated[ApiKey, Depends(key_with("scorer", "auditor"))]
