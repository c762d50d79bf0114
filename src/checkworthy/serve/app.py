"""The FastAPI application: score texts, explain stored claims, health, readiness and metrics.

Every route but health, metrics and the OpenAPI document needs an API key (``X-API-Key``): a
scorer key submits texts and reads explanations, an auditor key only reads. The key is checked
from the headers before a byte of the body is read, and the body is read within the size limit
whether it comes with a Content-Length or chunked (:class:`~checkworthy.serve.refusals.Guard`).
Input is checked completely before anything is stored (empty or over-long text, too many
sentences, NUL characters or lone surrogates, ids beyond the store's integers, wrong types), and
every refusal, even an unexpected failure (500), is one JSON object ``{"error": {"code",
"message", "field"}}``. The routes are in :mod:`checkworthy.serve.routers`; what they share is
one :class:`~checkworthy.serve.state.ApiState`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI
from sqlalchemy import Engine

from checkworthy.serve.inputs import Limits
from checkworthy.serve.keys import KeyFirst
from checkworthy.serve.ports import EventSink
from checkworthy.serve.prometheus import ApiMetrics
from checkworthy.serve.refusals import Guard, json_errors
from checkworthy.serve.routers import explanation, health, scoring
from checkworthy.serve.served import CurrentRun, Selection
from checkworthy.serve.state import ApiState

DEFAULT_LIMITS = Limits()


def create_app(engine: Engine, selection: Selection, params: Mapping[str, Any],
               limits: Limits = DEFAULT_LIMITS, *, events: EventSink) -> FastAPI:
    """The API over the runs ``selection`` names (:class:`CurrentRun`), on ``engine``'s store;
    drift is announced to ``events``."""
    app = FastAPI(title="checkworthy", version="1",
                  description="Calibrated check-worthiness decisions (NN-PPI over a stored calibration run).")
    current = CurrentRun(engine, selection, params)
    open_paths = {"/health", "/health/ready", "/metrics", app.docs_url, app.redoc_url, app.openapi_url,
                  app.swagger_ui_oauth2_redirect_url}
    # inside the metrics' middleware
    app.add_middleware(Guard, max_body=limits.max_body, check=KeyFirst(engine, open_paths))
    app.state.api = ApiState(engine, current, limits, ApiMetrics(app), events)
    app.router.on_shutdown.append(current.close)  # the open window's run is completed
    json_errors(app)
    for router in (scoring.router, explanation.router, health.router):
        app.include_router(router)
    return app
