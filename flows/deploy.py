"""Serve checkworthy's deployments from one process (no work pool needed):
``python -m checkworthy.flows.deploy``.

Schedules and triggers (override the intervals with the environment variables named):

- ``checkworthy-pipeline/daily``           cron ``CHECKWORTHY_PIPELINE_CRON`` (default 02:00 UTC)
- ``score-new-claims/hourly``              every ``CHECKWORTHY_NEW_CLAIMS_INTERVAL`` s (3600)
- ``watch-changes/watch``                  every ``CHECKWORTHY_WATCH_INTERVAL`` s (300): label files
                                           dropped in data/labels/, guideline edits
- ``recalibrate/on-label-change``          on the event ``checkworthy.labels.updated``
- ``adapt/on-label-growth``                on the same event and daily (cron ``CHECKWORTHY_ADAPT_CRON``,
                                           default 03:00 UTC): a lineage grown by ``adapt.every_n_labels``
                                           labels trains its model again
- ``rescore/on-guideline-change``          on the event ``checkworthy.guidelines.updated``

The same deployments for a worker and a work pool are in ``prefect.yaml`` (``prefect deploy --all``).
See docs/operations.md.
"""

from __future__ import annotations

import os

from prefect import serve
from prefect.events import DeploymentEventTrigger

from checkworthy.flows.events import GUIDELINES_UPDATED, LABELS_UPDATED
from checkworthy.flows.pipeline import (
    adapt_flow,
    pipeline_flow,
    recalibrate_flow,
    rescore_flow,
    score_new_claims_flow,
    watch_flow,
)


def _seconds(var: str, default: int) -> int:
    return int(os.environ.get(var, default))


def deployments() -> list:
    """The runner deployments (schedules and event triggers) of the project."""
    tags = ["checkworthy"]
    return [
        pipeline_flow.to_deployment(
            "daily", cron=os.environ.get("CHECKWORTHY_PIPELINE_CRON", "0 2 * * *"),
            parameters={"report": {"prefix": "daily"}}, concurrency_limit=1, tags=tags,
            description="The main job: data version, validation, embed, score, calibrate, evaluate."),
        score_new_claims_flow.to_deployment(
            "hourly", interval=_seconds("CHECKWORTHY_NEW_CLAIMS_INTERVAL", 3600), concurrency_limit=1,
            tags=tags, description="Ingest data/incoming/*.csv, score and calibrate what is new."),
        watch_flow.to_deployment(
            "watch", interval=_seconds("CHECKWORTHY_WATCH_INTERVAL", 300), concurrency_limit=1, tags=tags,
            description="Version label files dropped in data/labels/ and guideline edits; emit events."),
        recalibrate_flow.to_deployment(
            "on-label-change", concurrency_limit=1, tags=tags,
            triggers=[DeploymentEventTrigger(
                name="labels updated", expect={LABELS_UPDATED},
                match={"prefect.resource.id": "checkworthy.labels.*"}, parameters={"reason": "labels"})],
            description="Validate the new label-set versions and recalibrate incrementally."),
        adapt_flow.to_deployment(
            "on-label-growth", cron=os.environ.get("CHECKWORTHY_ADAPT_CRON", "0 3 * * *"),
            concurrency_limit=1, tags=tags,
            triggers=[DeploymentEventTrigger(
                name="labels updated", expect={LABELS_UPDATED},
                match={"prefect.resource.id": "checkworthy.labels.*"}, parameters={})],
            description="Train each lineage's model again once its labels have grown, promote or not, "
                        "recalibrate."),
        rescore_flow.to_deployment(
            "on-guideline-change", concurrency_limit=1, tags=tags,
            triggers=[DeploymentEventTrigger(
                name="guidelines updated", expect={GUIDELINES_UPDATED},
                match={"prefect.resource.id": "checkworthy.guidelines.*"},
                parameters={"guidelines": "{{ event.payload.path }}"})],
            description="Rescore every claim under the new guidelines and recalibrate."),
    ]


if __name__ == "__main__":
    serve(*deployments(), limit=_seconds("CHECKWORTHY_SERVE_LIMIT", 1))
