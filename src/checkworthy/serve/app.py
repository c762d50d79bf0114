"""The FastAPI application: score texts, explain stored claims, health, readiness and metrics.

Every route but health, metrics and the OpenAPI document needs an API key (``X-API-Key``): a
scorer key submits texts and reads explanations, an auditor key only reads. The key is checked
from the headers before a byte of the body is read, and the body is read within the size limit
whether it comes with a Content-Length or chunked (:class:`Guard`). Input is checked completely
before anything is stored (empty or over-long text, too many sentences, NUL characters or lone
surrogates, ids beyond the store's integers, wrong types), and every refusal, even an unexpected
failure (500), is one JSON object ``{"error": {"code", "message", "field"}}``.

Annotations are evaluated (no ``from __future__ import annotations``): FastAPI reads the route
signatures, whose key types are defined inside :func:`create_app`.
"""

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request, Security
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from checkworthy.data.language import EMPTY_AFTER_NORMALISATION, visible
from checkworthy.data.sentences import split_sentences
from checkworthy.flows.events import emit_drift
from checkworthy.report.drift import drift_line
from checkworthy.report.explanation import format_decision
from checkworthy.runs.served_run import ServedRun, Submission
from checkworthy.serve.prometheus import ApiMetrics
from checkworthy.serve.schemas import ErrorOut, ScoreOut, SentenceOut, SentencesIn, TextIn
from checkworthy.serve.served import CurrentRun, NotReady, Selection
from checkworthy.store.api_keys import ApiKey, key_for
from checkworthy.store.audit import explain, find_claims
from checkworthy.store.engine import ping

KEY_NAME = "X-API-Key"
KEY_HEADER = APIKeyHeader(name=KEY_NAME, auto_error=False, description="an API key "
                          "(`checkworthy keys create`)")
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorOut} for code in (401, 403, 413, 422, 503)}
BIGINT_MAX = 2**63 - 1  # the store's ids and run ids are Postgres bigints


@dataclass(frozen=True)
class Limits:
    """What one request may hold."""

    max_chars: int = 2000  # per text, after stripping
    max_batch: int = 100  # texts per request (a paragraph's sentences included)
    max_body: int = 1_000_000  # bytes of request body


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


def text_problem(value: str) -> str | None:
    """Why the store cannot hold ``value`` (None when it can): Postgres text refuses NUL, and a
    lone surrogate (JSON's ``"\\ud800"``) is not UTF-8."""
    if "\x00" in value:
        return "holds a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone surrogate (not UTF-8 text)"
    return None


def check_param(value: str, field: str) -> str:
    """``value`` when the store can hold it, else :class:`ApiError` (422) naming ``field``."""
    problem = text_problem(value)
    if problem:
        raise ApiError(422, "bad_text", f"the value {problem}", field)
    return value


def check_strings(body: Any) -> None:
    """Every string (and key) of a parsed JSON ``body`` one the store can hold, else
    :class:`ApiError` (422) naming the first at fault by its path (``task.data.source_id``;
    ``body`` for the whole); walked without recursion."""
    todo: list[tuple[str, Any]] = [("", body)]
    while todo:
        where, value = todo.pop()
        if isinstance(value, str):
            check_param(value, where or "body")
        elif isinstance(value, Mapping):
            for k, v in value.items():
                check_param(str(k), where or "body")
                todo.append((f"{where}.{k}" if where else str(k), v))
        elif isinstance(value, list):
            todo.extend((f"{where}[{i}]", v) for i, v in enumerate(value))


def ascii_id(value: str) -> int | None:
    """``value`` as a positive id of the store (ASCII digits within a bigint), else None: ``"²"``
    is a digit to ``str.isdigit`` but not to ``int``, and 25 digits overflow Postgres."""
    if not (value.isascii() and value.isdigit()):
        return None
    n = int(value)
    return n if 0 < n <= BIGINT_MAX else None


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


def check_texts(texts: list[str], limits: Limits, field: str) -> list[str]:
    """The texts stripped, or :class:`ApiError` naming the first one at fault."""
    if not texts:
        raise ApiError(422, "empty", "no text to score", field)
    if len(texts) > limits.max_batch:
        raise ApiError(422, "too_many", f"at most {limits.max_batch} texts per request, got {len(texts)}",
                       field)
    out = []
    for i, t in enumerate(texts):
        where = f"{field}[{i}]" if field == "sentences" else field
        s = t.strip()
        if not s:
            raise ApiError(422, "empty", "empty text", where)
        if not visible(s):
            raise ApiError(422, "empty", EMPTY_AFTER_NORMALISATION, where)
        if len(s) > limits.max_chars:
            raise ApiError(422, "too_long", f"{len(s)} characters; at most {limits.max_chars}", where)
        problem = text_problem(s)
        if problem:
            raise ApiError(422, "bad_text", f"the text {problem}", where)
        out.append(s)
    return out


def sentence_out(r: Any) -> SentenceOut:
    score = None if r.theta is None else min(1.0, max(0.0, r.theta))
    return SentenceOut(text=r.text, index=r.position, score=score, model_score=r.score, theta=r.theta,
                       ci_low=r.ci_low, ci_high=r.ci_high, decision=r.decision, review=r.review,
                       reason=r.reason, far=r.far, language=r.language, claim_id=r.claim_id,
                       source_id=r.source_id,
                       neighbours=[{"claim_id": n.claim_id, "source_id": n.source_id, "distance": n.distance}
                                   for n in r.neighbours])


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


def create_app(engine: Engine, selection: Selection, params: Mapping[str, Any], limits: Limits = Limits(),
               ) -> FastAPI:
    """The API over the runs ``selection`` names (:class:`CurrentRun`), on ``engine``'s store."""
    app = FastAPI(title="checkworthy", version="1",
                  description="Calibrated check-worthiness decisions (NN-PPI over a stored calibration run).")
    current = CurrentRun(engine, selection, params)
    open_paths = {"/health", "/health/ready", "/metrics", app.docs_url, app.redoc_url, app.openapi_url,
                  app.swagger_ui_oauth2_redirect_url}

    def authenticate(secret: str | None) -> ApiKey:
        if not secret:
            raise ApiError(401, "missing_key", "send an API key in the X-API-Key header", "X-API-Key")
        with engine.connect() as conn:
            key = key_for(conn, secret)
        if key is None:
            raise ApiError(401, "invalid_key", "unknown or revoked API key", "X-API-Key")
        return key

    async def key_first(scope: Scope) -> None:
        """Every path but the open ones needs a known key, checked before the body is read; the
        routes check its role (:func:`key_with`)."""
        if scope["path"] not in open_paths:
            key = await run_in_threadpool(authenticate, Headers(scope=scope).get(KEY_NAME))
            scope.setdefault("state", {})["api_key"] = key

    app.add_middleware(Guard, max_body=limits.max_body, check=key_first)  # inside the metrics' middleware
    metrics = ApiMetrics(app)
    app.state.current, app.state.metrics = current, metrics
    app.router.on_shutdown.append(current.close)  # the open window's run is completed

    json_errors(app)

    def key_with(*roles: str) -> Callable[..., ApiKey]:
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

    def answer(texts: list[str], key: ApiKey, endpoint: str) -> ScoreOut:
        served: ServedRun = current.get()
        sub: Submission = served.submit(texts, key.id, endpoint)
        notice = drift_line(sub.drift)
        metrics.record(endpoint, sub, notice)
        if notice and sub.run_id is not None:
            emit_drift(sub.run_id, f"api:{sub.request_uid}", dict(sub.drift or {}), notice)
        return ScoreOut(request_id=str(sub.request_uid), run_id=sub.run_id, served_run=served.provenance,
                        drift=sub.drift, drift_notice=notice, results=[sentence_out(r) for r in sub.results])

    @app.post("/score/text", response_model=ScoreOut, responses=ERRORS, tags=["score"])
    def score_text(body: TextIn, key: ScorerKey) -> ScoreOut:
        """Score one text as one claim."""
        return answer(check_texts([body.text], limits, "text"), key, "text")

    @app.get("/score/text/{input_text}", response_model=ScoreOut, responses=ERRORS, tags=["score"])
    def score_text_path(input_text: str, key: ScorerKey) -> ScoreOut:
        """ClaimBuster's form: the text in the path."""
        return answer(check_texts([input_text], limits, "input_text"), key, "text")

    @app.post("/score/sentences", response_model=ScoreOut, responses=ERRORS, tags=["score"])
    def score_sentences(body: SentencesIn, key: ScorerKey) -> ScoreOut:
        """Score a batch of sentences, each as a claim (at most ``max_batch``)."""
        return answer(check_texts(body.sentences, limits, "sentences"), key, "sentences")

    @app.post("/score/paragraph", response_model=ScoreOut, responses=ERRORS, tags=["score"])
    def score_paragraph(body: TextIn, key: ScorerKey) -> ScoreOut:
        """Split a paragraph into sentences (pysbd, rule-based) and score each as a claim."""
        if not check_param(body.text, "text").strip():
            raise ApiError(422, "empty", "empty text", "text")
        if len(body.text) > limits.max_chars * limits.max_batch:
            raise ApiError(422, "too_long", f"{len(body.text)} characters; at most "
                           f"{limits.max_chars * limits.max_batch}", "text")
        return answer(check_texts(split_sentences(body.text), limits, "text"), key, "paragraph")

    @app.get("/claims/{claim}/explanation", responses=ERRORS | {404: {"model": ErrorOut}}, tags=["audit"])
    def explanation(claim: str, key: ReaderKey, dataset: Annotated[str | None, Query()] = None,
                    run: Annotated[int | None, Query(ge=1, le=BIGINT_MAX)] = None) -> dict[str, Any]:
        """Why a stored claim got its decisions (source id, or ``id:<claim id>``): the lineage
        ``checkworthy explain`` prints, as JSON, with that text beside it."""
        check_param(claim, "claim")
        if dataset is not None:
            check_param(dataset, "dataset")
        if claim.startswith("id:") and ascii_id(claim[3:]) is None:
            raise ApiError(422, "invalid", f"id:<claim id> needs a number from 1 to {BIGINT_MAX}", "claim")
        with engine.connect() as conn:
            ids = find_claims(conn, claim, dataset)
            decisions = explain(conn, ids, run) if ids else []
        if not decisions:
            raise ApiError(404, "not_found", f"no calibrated decision for claim {claim!r}", "claim")
        return {"claim": claim, "decisions": [jsonable_encoder(
            dict(d.row) | {"neighbours": [dict(n) for n in d.neighbours], "review_rule": d.review,
                           "queued": None if d.queued is None else dict(d.queued),
                           "answers": [dict(a) for a in d.answers], "explanation": format_decision(d)})
            for d in decisions]}

    @app.get("/health", tags=["health"])
    def health() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/health/ready", responses={503: {"model": ErrorOut}}, tags=["health"])
    def ready() -> dict[str, Any]:
        """Readiness: the store answers and a run is loaded for the selection."""
        ping(engine)
        return {"status": "ready", "served_run": current.get().provenance}

    return app
