"""The serve layer's port (:class:`checkworthy.serve.ports.EventSink`) implemented by the flows:
drift as a Prefect event, an annotation's label file through the label-update flow. The command
line builds it and hands it to the API and the Label Studio backend."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from checkworthy.config import PARAMS_FILE, ROOT
from checkworthy.flows.events import emit_drift
from checkworthy.flows.pipeline import label_update_flow
from checkworthy.method.drift import Drift


@dataclass(frozen=True)
class FlowEvents:
    """Where the label-update flow works: the data project (DVC), its params file and the store
    (None: ``DATABASE_URL``)."""

    repo: Path = ROOT
    params_path: Path = PARAMS_FILE
    db_url: str | None = None

    def drift_detected(self, run_id: int, target: str, drift: Drift, message: str) -> str | None:
        """The drift event of the run (:func:`checkworthy.flows.events.emit_drift`)."""
        return emit_drift(run_id, target, drift, message)

    def labels_annotated(self, path: Path) -> list[str]:
        """The label-update flow on one checked file, recalibrating at once; a line per update
        and per refusal."""
        out = label_update_flow(files=[str(path)], repo=str(self.repo), db_url=self.db_url,
                                params_path=str(self.params_path), recalibrate_now=True)
        return ([f"{u.status}, {u.n_appended} labels appended, new heads {u.new_heads}, event {u.event_id}"
                 for u in out.updates]
                + [f"refused: {r.reason}" for r in out.refused])
