"""Prefect's side of provenance: the flow run we are in, and the events that announce changes.

A stored change (:class:`checkworthy.store.provenance.Change`) is emitted as
``checkworthy.labels.updated`` or ``checkworthy.guidelines.updated``; deployment triggers turn
these into validation, rescoring and recalibration (see prefect.yaml). A calibration run whose
claims have drifted from its labelled set emits ``checkworthy.drift.detected`` (an automation can
notify the team or route the claims to review).
"""

from __future__ import annotations

import uuid

from prefect.events import emit_event
from prefect.runtime import flow_run

from checkworthy.method.drift import Drift
from checkworthy.store.provenance import Change

LABELS_UPDATED = "checkworthy.labels.updated"
GUIDELINES_UPDATED = "checkworthy.guidelines.updated"
DRIFT_DETECTED = "checkworthy.drift.detected"


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


def emit_drift(run_id: int, target: str, drift: Drift, message: str) -> str | None:
    """Emit the drift event of a run, its figure and ``message`` (the line a person reads: share
    beyond, what was done, what to do) in the payload; one id per run, so a repeat is the same
    event. None when Prefect is not emitting events."""
    ev = emit_event(
        event=DRIFT_DETECTED,
        resource={"prefect.resource.id": f"checkworthy.target.{target}", "checkworthy.run-id": str(run_id)},
        payload={"run_id": run_id, "target": target, "message": message} | drift.as_dict(),
        id=uuid.uuid5(uuid.NAMESPACE_URL, f"checkworthy:drift:run:{run_id}"),
    )
    return None if ev is None else str(ev.id)
