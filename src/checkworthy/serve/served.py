"""The run the server answers with: the newest complete run of its lineage that matches its
selection, looked up on every request (a recalibration is served from the next request on) and
loaded once per run (model, label set, fitted calibration). Moving to a newer run, or shutting
down, completes the open window of the run served until then (docs/api.md, "How served requests
are recorded")."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from checkworthy.config import serving_window
from checkworthy.runs.served_run import ServedRun, matching_scorer
from checkworthy.scorers.base import Scorer
from checkworthy.scorers.registry import PromptInfo
from checkworthy.store.served_runs import newest_run


class NotReady(Exception):
    """No run can be served (yet): the lineage has no complete run matching the selection."""


@dataclass(frozen=True)
class Selection:
    """Which runs a server may serve: a lineage, optionally pinned to a model, score kind, k,
    correction or interval (:data:`checkworthy.store.served_runs.SELECTORS`), or to one run."""

    lineage: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    run_id: int | None = None

    def describe(self) -> str:
        pinned = ", ".join(f"{k}={v}" for k, v in self.fields.items() if v is not None)
        return f"lineage {self.lineage!r}" + (f" ({pinned})" if pinned else "")


class CurrentRun:
    """The :class:`ServedRun` in force for a :class:`Selection`; thread-safe."""

    def __init__(self, engine: Engine, selection: Selection, params: Mapping[str, Any]) -> None:
        """Serve ``selection`` from ``engine``'s store, with the models and the window
        (``serving: window_seconds:``) ``params`` configure."""
        self.engine, self.selection, self.params = engine, selection, params
        self.window_seconds = serving_window(dict(params))
        self._lock = threading.Lock()
        self._served: ServedRun | None = None
        self._scorers: dict[tuple[str, str], tuple[Scorer, PromptInfo]] = {}

    def newest_id(self) -> int:
        """The id of the run to serve now; :class:`NotReady` when there is none."""
        sel = self.selection
        with self.engine.connect() as conn:
            run_id = newest_run(conn, sel.lineage, sel.fields, sel.run_id)
        if run_id is None and sel.run_id is not None:
            raise NotReady(f"run {sel.run_id} is no complete calibration run of {sel.describe()}")
        if run_id is None:
            raise NotReady(f"no complete calibration run of {sel.describe()}: run the main job "
                           "or `checkworthy predict` first, or choose another lineage")
        return run_id

    def get(self) -> ServedRun:
        """The served run, loading (and fitting) a newer one when the lineage has one."""
        run_id = self.newest_id()
        served = self._served
        if served is not None and served.run_id == run_id:
            return served
        with self._lock:
            if self._served is None or self._served.run_id != run_id:
                before, self._served = self._served, ServedRun(self.engine, run_id, self._scorer_for,
                                                               self.window_seconds)
                if before is not None:
                    before.close()
            return self._served

    def close(self) -> None:
        """Complete the open window of the run served (the server shuts down)."""
        with self._lock:
            if self._served is not None:
                self._served.close()

    def _scorer_for(self, spec: str, params_hash: str, prompt_version: str) -> tuple[Scorer, PromptInfo]:
        key = (spec, params_hash)
        if key not in self._scorers:
            self._scorers[key] = matching_scorer(self.params, spec, params_hash, prompt_version)
        return self._scorers[key]
