"""What the API's routes share, as one typed object on the application (``app.state.api``) that
a route asks for as a dependency (:data:`Api`).

Annotations are evaluated (no ``from __future__ import annotations``): FastAPI reads the
dependency's signature.
"""

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine

from checkworthy.serve.inputs import Limits
from checkworthy.serve.ports import EventSink
from checkworthy.serve.prometheus import ApiMetrics
from checkworthy.serve.served import CurrentRun


@dataclass(frozen=True)
class ApiState:
    """The store, the run in force, what a request may hold, the metrics and where events go."""

    engine: Engine
    current: CurrentRun
    limits: Limits
    metrics: ApiMetrics
    events: EventSink


async def api_state(request: Request) -> ApiState:
    """The application's :class:`ApiState` (set by :func:`checkworthy.serve.app.create_app`)."""
    state: ApiState = request.app.state.api
    return state


Api = Annotated[ApiState, Depends(api_state)]
