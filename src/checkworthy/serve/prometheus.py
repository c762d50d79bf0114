"""Prometheus metrics of the API: requests and latency per route (prometheus-fastapi-instrumentator),
and what was decided: claims scored, claims sent to a person (of them, those sent for drift), the
last batch's drift figure and its line for a person (``checkworthy_api_drift_info{notice=...}``)."""

from __future__ import annotations

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter, Gauge, Info
from prometheus_fastapi_instrumentator import Instrumentator

from checkworthy.method.drift import another_kind
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
        self.review_drift = Counter(
            "checkworthy_api_claims_review_drift", "Claims sent to a person because their batch drifted from "
            "the labelled set: label some of those beyond its radius (checkworthy review export)",
            ["endpoint"], registry=self.registry)
        self.drift_notice = Info(
            "checkworthy_api_drift", "The last batch's drift in a line: the share beyond the labelled set's "
            "radius, what was done, what to do", registry=self.registry)

    def record(self, endpoint: str, sub: Submission, notice: str | None) -> None:
        """Count a submission's claims, its review flags (those drift holds back apart: :func:`checkworthy.
        method.drift.drift_status`) and its drift figure; ``notice`` is its drift line (None: no alert)."""
        self.claims.labels(endpoint).inc(len(sub.results))
        self.review.labels(endpoint).inc(sum(r.review for r in sub.results))
        figure = sub.drift
        held = [r for r in sub.results if r.far or (r.review and another_kind(figure))]
        self.review_drift.labels(endpoint).inc(len(held))
        if figure is not None:
            self.drift_share.set(float(figure.share))
            calm = (f"no drift: {figure.share:.0%} of the last batch lies beyond the labelled set's "
                    "radius, as expected of claims like its own")
            self.drift_notice.info({"notice": notice or calm})
        if figure is not None and figure.alert:
            self.drift_alerts.inc()
