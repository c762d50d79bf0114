"""Liveness and readiness, open to all (no key). The Prometheus metrics (``/metrics``, also open)
are exposed by :class:`checkworthy.serve.prometheus.ApiMetrics`.

Annotations are evaluated (no ``from __future__ import annotations``): FastAPI reads the route
signatures.
"""

from typing import Any

from fastapi import APIRouter

from checkworthy.serve.schemas import ErrorOut
from checkworthy.serve.state import Api
from checkworthy.store.engine import ping

router = APIRouter()


@router.get("/health", tags=["health"])
def health() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


@router.get("/health/ready", responses={503: {"model": ErrorOut}}, tags=["health"])
def ready(api: Api) -> dict[str, Any]:
    """Readiness: the store answers and a run is loaded for the selection."""
    ping(api.engine)
    return {"status": "ready", "served_run": api.current.get().provenance}
