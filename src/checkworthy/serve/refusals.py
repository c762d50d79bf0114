"""Every refusal as one JSON object ``{"error": {"code", "message", "field"}}``, and the ASGI
guard that judges a request by its headers before its body is read (:class:`Guard`). The API and
the Label Studio backend both sit behind them."""

import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from checkworthy.serve.served import NotReady


class ApiError(Exception):
    """A refusal: HTTP status, a code, a one-line message, the field at fault."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field


class AsciiJSONResponse(JSONResponse):
    """JSON escaped to ASCII: a refusal may quote input holding a lone surrogate, which UTF-8
    cannot encode (Starlette's own rendering would fail with a 500)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


def error_response(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
    return AsciiJSONResponse({"error": {"code": code, "message": message, "field": field}},
                             status_code=status)


Check = Callable[[Scope], Awaitable[None]]


class Guard:
    """Pure ASGI middleware, ahead of FastAPI's body parsing: ``check`` judges a request by its
    method, path and headers before a byte of its body is read (raising :class:`ApiError`), then
    the body is read whole but never beyond ``max_body`` bytes, whether announced by
    Content-Length or chunked (413 at the first byte over), and handed to the app. A refusal
    closes the connection, so a client still sending stops and reads it."""

    def __init__(self, app: ASGIApp, max_body: int, check: Check) -> None:
        self.app, self.max_body, self.check = app, max_body, check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            await self.check(scope)
            body = await self.read_body(receive, Headers(scope=scope))
        except ApiError as exc:
            response = error_response(exc.status, exc.code, exc.message, exc.field)
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        if body is None:  # the client left
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def read_body(self, receive: Receive, headers: Headers) -> bytes | None:
        """The body, at most ``max_body`` bytes; None when the client disconnects first."""
        size = headers.get("content-length")
        too_large = ApiError(413, "too_large", f"request body over {self.max_body} bytes", "body")
        if size is not None and (not (size.isascii() and size.isdigit()) or int(size) > self.max_body):
            raise too_large
        chunks, n = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            n += len(chunk)
            if n > self.max_body:
                raise too_large
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def json_errors(app: FastAPI) -> None:
    """Every refusal of ``app`` as one JSON object ``{"error": {"code", "message", "field"}}``:
    an :class:`ApiError`, no run to serve (503), invalid input (422), any other HTTP error, and
    any unexpected failure (500, no traceback in the answer; the server's log has it)."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.field)

    @app.exception_handler(NotReady)
    async def not_ready(_: Request, exc: NotReady) -> JSONResponse:
        return error_response(503, "not_ready", str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        loc = [str(p) for p in first.get("loc", ())]
        loc = loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc
        field = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc).lstrip(".") or "body"
        return error_response(422, "invalid", str(first.get("msg", "invalid input")), field)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, "http", str(exc.detail))

    @app.exception_handler(Exception)
    async def failure(_: Request, exc: Exception) -> JSONResponse:
        return error_response(500, "internal", f"the server failed ({type(exc).__name__}); its log has the "
                              "details")
