"""When a flow task retries: transient faults (a lost database, a crashed model runtime, a DVC lock)
are retried with backoff; bad data, configuration errors and bugs fail at once.

``DB``, ``MODEL`` and ``DVC`` are the keyword sets the tasks of :mod:`checkworthy.flows.tasks` pass
to ``@task``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any, TypedDict

from prefect.cache_policies import NO_CACHE, CachePolicy
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from checkworthy.errors import DataError


def _exception(state: Any) -> BaseException | None:
    try:
        value = state.result(raise_on_failure=False)
    except BaseException as exc:  # noqa: BLE001 - the state may re-raise its own exception
        return exc
    return value if isinstance(value, BaseException) else None


def _db_transient(exc: BaseException | None) -> bool:
    if isinstance(exc, OperationalError | InterfaceError | PoolTimeout | ConnectionError | TimeoutError):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def retry_db(task: Any, task_run: Any, state: Any) -> bool:
    """Retry on a lost or refused database connection, never on bad data or a bug."""
    return _db_transient(_exception(state))


def retry_model(task: Any, task_run: Any, state: Any) -> bool:
    """Retry database faults and model-runtime faults (a crashed runtime, a timeout, OOM)."""
    exc = _exception(state)
    if isinstance(exc, DataError | ValueError | KeyError | TypeError):
        return False
    return _db_transient(exc) or isinstance(exc, RuntimeError | OSError | MemoryError)


def retry_dvc(task: Any, task_run: Any, state: Any) -> bool:
    """Retry database faults and DVC failures (another process holding the repo lock)."""
    exc = _exception(state)
    return _db_transient(exc) or isinstance(exc, subprocess.CalledProcessError)


class TaskOptions(TypedDict):
    """The keywords of ``@task`` a keyword set gives (typed, so the type checker sees the call)."""

    retries: int
    retry_delay_seconds: list[float]
    retry_condition_fn: Callable[[Any, Any, Any], bool]
    cache_policy: CachePolicy


DB: TaskOptions = {"retries": 3, "retry_delay_seconds": [2, 10, 30], "retry_condition_fn": retry_db,
                   "cache_policy": NO_CACHE}
MODEL: TaskOptions = DB | {"retry_condition_fn": retry_model}
DVC: TaskOptions = DB | {"retry_condition_fn": retry_dvc}
