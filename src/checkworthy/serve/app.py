"""The FastAPI application: score texts, explain stored claims, health, readiness and metrics.

Every route but health and metrics needs an API key (``X-API-Key``): a scorer key submits texts
and reads explanations, an auditor key only reads. Input is checked completely before anything is
stored (empty or over-long text, too many sentences, a body over the size limit, wrong types), and
every refusal is one JSON object ``{"error": {"code", "message", "field"}}``.

Annotations are evaluated (no ``from __future__ import annotations``): FastAPI reads the route
signatures, whose key types are defined inside :func:`create_app`.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request, Security
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from sqlalchemy import Engine
from starlette.exceptions import HTTPException

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

KEY_HEADER = APIKeyHeader(name="X-API-Key", auto_error=False, description="an API key "
                          "(`checkworthy keys create`)")
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorOut} for code in (401, 403, 413, 422, 503)}


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


def error_response(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, "field": field}}, status_code=status)


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
        if len(s) > limits.max_chars:
            raise ApiError(422, "too_long", f"{len(s)} characters; at most {limits.max_chars}", where)
        if "\x00" in s:
            raise ApiError(422, "bad_text", "the text holds a NUL character", where)
        out.append(s)
    return out


def sentence_out(r: Any) -> SentenceOut:
    score = None if r.theta is None else min(1.0, max(0.0, r.theta))
    return SentenceOut(text=r.text, index=r.position, score=score, model_score=r.score, theta=r.theta,
                       ci_low=r.ci_low, ci_high=r.ci_high, decision=r.decision, review=r.review,
                       reason=r.reason, far=r.far, claim_id=r.claim_id, source_id=r.source_id,
                       neighbours=[{"claim_id": n.claim_id, "source_id": n.source_id, "distance": n.distance}
                                   for n in r.neighbours])


def json_errors(app: FastAPI) -> None:
    """Every refusal of ``app`` as one JSON object ``{"error": {"code", "message", "field"}}``:
    an :class:`ApiError`, no run to serve (503), invalid input (422), any other HTTP error."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.field)

    @app.exception_handler(NotReady)
    async def not_ready(_: Request, exc: NotReady) -> JSONResponse:
        return error_response(503, "not_ready", str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        field = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc).lstrip(".") or "body"
        return error_response(422, "invalid", str(first.get("msg", "invalid input")), field)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, "http", str(exc.detail))


def create_app(engine: Engine, selection: Selection, params: Mapping[str, Any], limits: Limits = Limits(),
               ) -> FastAPI:
    """The API over the runs ``selection`` names (:class:`CurrentRun`), on ``engine``'s store."""
    app = FastAPI(title="checkworthy", version="1",
                  description="Calibrated check-worthiness decisions (NN-PPI over a stored calibration run).")
    current = CurrentRun(engine, selection, params)
    metrics = ApiMetrics(app)
    app.state.current, app.state.metrics = current, metrics
    app.router.on_shutdown.append(current.close)  # the open window's run is completed

    @app.middleware("http")
    async def body_limit(request: Request, call_next: Callable) -> Any:
        size = request.headers.get("content-length")
        if size is not None and (not size.isdigit() or int(size) > limits.max_body):
            return error_response(413, "too_large", f"request body over {limits.max_body} bytes", "body")
        return await call_next(request)

    json_errors(app)

    def key_with(*roles: str) -> Callable[..., ApiKey]:
        def check(secret: Annotated[str | None, Security(KEY_HEADER)]) -> ApiKey:
            if not secret:
                raise ApiError(401, "missing_key", "send an API key in the X-API-Key header", "X-API-Key")
            with engine.connect() as conn:
                key = key_for(conn, secret)
            if key is None:
                raise ApiError(401, "invalid_key", "unknown or revoked API key", "X-API-Key")
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
        if not body.text.strip():
            raise ApiError(422, "empty", "empty text", "text")
        if len(body.text) > limits.max_chars * limits.max_batch:
            raise ApiError(422, "too_long", f"{len(body.text)} characters; at most "
                           f"{limits.max_chars * limits.max_batch}", "text")
        return answer(check_texts(split_sentences(body.text), limits, "text"), key, "paragraph")

    @app.get("/claims/{claim}/explanation", responses=ERRORS | {404: {"model": ErrorOut}}, tags=["audit"])
    def explanation(claim: str, key: ReaderKey, dataset: Annotated[str | None, Query()] = None,
                    run: Annotated[int | None, Query()] = None) -> dict[str, Any]:
        """Why a stored claim got its decisions (source id, or ``id:<claim id>``): the lineage
        ``checkworthy explain`` prints, as JSON, with that text beside it."""
        if claim.startswith("id:") and not claim[3:].isdigit():
            raise ApiError(422, "invalid", "id:<claim id> needs a number", "claim")
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
