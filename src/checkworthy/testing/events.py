"""Whether an event reached the Prefect server."""

from __future__ import annotations

import time

from prefect.client.orchestration import get_client
from prefect.events.worker import EventsWorker


def event_stored(event_id: str) -> bool:
    """The event reached the Prefect server (it is persisted asynchronously: poll briefly)."""
    EventsWorker.drain_all()
    for _ in range(30):
        with get_client(sync_client=True) as client:
            got = client._client.post("/events/filter", json={
                "filter": {"event": {"prefix": ["checkworthy."]}}, "limit": 50}).json()
        if event_id in {e["id"] for e in got.get("events", [])}:
            return True
        time.sleep(0.5)
    return False
