"""Prometheus metrics of the API: requests and latency per route (prometheus-fastapi-instrumentator),
and what was decided: claims scored, claims sent to a person, the last batch's drift figure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_fastapi_instrumentator import Instrumentator

from checkworthy.runs.served_run import Submission


class ApiMetrics:
    """The API's own counters, in a registry of the app's (two apps in one process never clash)."""

    def __init__(self, app: FastAPI) -> None:
        self.registry = CollectorRegistry()
        Instrumentator(registry=self.registry, excluded_handlers=["/metrics"]).instrument(app).expose(
            app, endpoint="/metrics", include_in_schema=False)
        self.claims = Counter("checkworthy_api_claims", "Claims scored and calibrated", ["endpoint"],
                              registry=self.registry)
        self.review = Counter("checkworthy_api_claims_review", "Claims sent to a person (review flag)",
                              ["endpoint"], registry=self.registry)
        self.drift_share = Gauge("checkworthy_api_drift_share", "Share of the last batch's claims beyond the "
                                 "labelled set's radius", registry=self.registry)
        self.drift_alerts = Counter("checkworthy_api_drift_alerts", "Batches whose claims drifted from the "
                                    "labelled set", registry=self.registry)

    def record(self, endpoint: str, sub: Submission) -> None:
        """Count a submission's claims, its review flags and its drift figure."""
        self.claims.labels(endpoint).inc(len(sub.results))
        self.review.labels(endpoint).inc(sum(r.review for r in sub.results))
        figure: Mapping[str, Any] = sub.drift or {}
        if figure.get("share") is not None:
            self.drift_share.set(float(figure["share"]))
        if figure.get("alert"):
            self.drift_alerts.inc()
