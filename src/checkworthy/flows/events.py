"""Prefect's side of provenance: the flow run we are in, and the events that announce changes.

A stored change (:class:`checkworthy.store.provenance.Change`) is emitted as
``checkworthy.labels.updated`` or ``checkworthy.guidelines.updated``; deployment triggers turn
these into validation, rescoring and recalibration (see prefect.yaml).
"""

from __future__ import annotations

import uuid

from prefect.events import emit_event
from prefect.runtime import flow_run

from checkworthy.store.provenance import Change

LABELS_UPDATED = "checkworthy.labels.updated"
GUIDELINES_UPDATED = "checkworthy.guidelines.updated"


def current_flow_run_id() -> str | None:
    """The id of the Prefect flow run we are in, if any (None outside Prefect)."""
    value = flow_run.get_id()
    return str(value) if value else None


def emit(change: Change) -> str | None:
    """Emit the Prefect event of a stored change; None when Prefect is not emitting events."""
    name = LABELS_UPDATED if change.kind == "labels" else GUIDELINES_UPDATED
    ev = emit_event(
        event=name,
        resource={"prefect.resource.id": f"checkworthy.{change.kind}.{change.key}",
                  "checkworthy.change-id": str(change.id)},
        payload=change.payload | {"change_id": change.id},
        id=uuid.UUID(change.event_id),
    )
    return None if ev is None else str(ev.id)
