"""Where a flow's tasks run: threads in this process, or a Dask cluster (prefect-dask).

params.yaml ``scale_out.dask`` (or ``$CHECKWORTHY_DASK_ADDRESS``, which wins): empty for threads
in this process; ``local`` for a local cluster of ``scale_out.workers`` worker processes (one
thread each: each holds its own model); ``tcp://host:8786`` for a running cluster (the
docker-compose stack's scheduler and workers, docs/operations.md). Dask rather than Ray: the
fan-out is a bag of independent chunk tasks, which Dask's scheduler reschedules when a worker
dies, its local cluster starts in seconds on two cores, and prefect-dask is Prefect's own runner.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

#: Dask's nanny starts each worker with ``MALLOC_TRIM_THRESHOLD_=65536`` (to hand freed memory back
#: to the system), which also stops glibc adapting its mmap threshold: torch's tensors are then
#: mapped and unmapped on every forward pass, and the embedded Gemma scored 1.7x slower in a worker
#: than in this process (docs/scale.md). Our workers hold one model each and a steady footprint,
#: so they start without it.
WORKER_ENVIRON = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


def dask_address(params: Mapping[str, Any]) -> str | None:
    """The configured cluster: ``local``, a scheduler address, or None (threads)."""
    return os.environ.get("CHECKWORTHY_DASK_ADDRESS") or (params.get("scale_out") or {}).get("dask") or None


def share_api_with_workers() -> None:
    """Dask workers are other processes: give them the Prefect API this process uses (the temporary
    server when none is configured), through the environment they inherit when they start."""
    if "PREFECT_API_URL" in os.environ:
        return
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:  # starts the temporary server if there is none
        os.environ["PREFECT_API_URL"] = str(client.api_url)


def task_runner(params: Mapping[str, Any]) -> TaskRunner[Any]:
    """The task runner params.yaml (or the environment) asks for."""
    address = dask_address(params)
    if address is None:
        return ThreadPoolTaskRunner(max_workers=1)
    import dask
    from prefect_dask import DaskTaskRunner  # start-up: dask and distributed, only when asked for

    if address == "local":
        dask.config.set(WORKER_ENVIRON)  # for every nanny this process starts
        workers = int((params.get("scale_out") or {}).get("workers", 2))
        return DaskTaskRunner(cluster_kwargs={"n_workers": workers, "threads_per_worker": 1,
                                              "processes": True, "dashboard_address": None})
    return DaskTaskRunner(address=address)
