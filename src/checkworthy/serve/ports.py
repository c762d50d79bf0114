"""What the API and the Label Studio backend announce, as a port: the flows implement it
(``FlowEvents`` in flows/api_events.py) and the command line hands it in, so that the serve layer
imports no flow and needs no Prefect to import."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from checkworthy.method.drift import Drift


class EventSink(Protocol):
    """Where the served requests' events go."""

    def drift_detected(self, run_id: int, target: str, drift: Drift, message: str) -> str | None:
        """Announce that a submission drifted from its run's labelled set (``checkworthy.drift.detected``);
        ``message`` is the line a person reads. The event's id, or None when none is emitted."""
        ...

    def labels_annotated(self, path: Path) -> list[str]:
        """Apply a checked label file as ``checkworthy review import`` does (the label update, its
        event ``checkworthy.labels.updated``, recalibration); a line per update or refusal."""
        ...
