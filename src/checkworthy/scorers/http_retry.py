"""Retries and bounded concurrency for the scorers that call a model service over HTTP.

A failing call is retried with exponential backoff, or after the wait the server asks for
(``Retry-After``), which then holds back every worker (a shared :class:`Gate`); once retries are
spent, :class:`BackendError` aborts the chunk so nothing is stored and a rerun resumes. Which
failures are transient is the calling backend's decision (its ``classify`` function). No client
library is imported here, so the registry can build a :class:`RetryPolicy` without loading one.
"""

from __future__ import annotations

import email.utils
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


class BackendError(RuntimeError):
    """The service kept failing after all retries: nothing is stored for the chunk (worth retrying
    later; the flows' ``retry_model`` retries a ``RuntimeError``)."""


class BackendConfigError(BackendError, ValueError):
    """The service refuses the request itself (unknown model, bad key, unsupported option): retrying
    cannot help, so it is also a ``ValueError`` (which the flows do not retry)."""


class Incomplete(Exception):
    """A response that ended or stalled before it was complete (worth retrying)."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a failing service call.

    Exponential backoff ``backoff * 2**attempt`` (halved at random, capped at ``backoff_max``)
    unless the server says how long to wait (``Retry-After``); a wait longer than
    ``max_retry_after`` (a spent daily quota, say) is not waited for: the call fails.
    """

    max_retries: int = 4
    backoff: float = 0.5
    backoff_max: float = 30.0
    max_retry_after: float = 120.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return max(0.0, retry_after)
        base = min(self.backoff_max, self.backoff * 2**attempt)
        return base * random.uniform(0.5, 1.0)


@dataclass(frozen=True)
class Retry:
    """A retryable failure and the wait the server asked for, if any."""

    reason: str
    retry_after: float | None = None


class Gate:
    """A pause shared by all workers: one 429 with ``Retry-After`` holds back every request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until = 0.0

    def hold(self, seconds: float) -> None:
        with self._lock:
            self._until = max(self._until, time.monotonic() + seconds)

    def wait(self) -> None:
        while (left := self._until - time.monotonic()) > 0:
            time.sleep(left)


def call_with_retries(
    fn: Callable[[], T],
    classify: Callable[[BaseException], Retry | None],
    policy: RetryPolicy,
    gate: Gate,
    what: str,
) -> tuple[T, int]:
    """``fn()`` and the number of attempts it took; :class:`BackendError` once retries are spent.

    ``classify`` maps an exception to a :class:`Retry` (transient) or ``None`` (re-raised as is).
    """
    for attempt in range(policy.max_retries + 1):
        gate.wait()
        try:
            return fn(), attempt + 1
        except Exception as exc:  # noqa: BLE001 - classify decides
            retry = classify(exc)
            if retry is None:
                raise
            if retry.retry_after is not None and retry.retry_after > policy.max_retry_after:
                raise BackendError(f"{what}: {retry.reason}; server asks to wait "
                                   f"{retry.retry_after:.0f} s (> {policy.max_retry_after:.0f} s)") from exc
            if attempt == policy.max_retries:
                raise BackendError(f"{what}: {retry.reason} (gave up after {attempt + 1} attempts)") from exc
            wait = policy.delay(attempt, retry.retry_after)
            if retry.retry_after is not None:
                gate.hold(wait)
            else:
                time.sleep(wait)
    raise AssertionError("unreachable")


def parse_retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms``, ``retry-after`` (seconds or an HTTP date)."""
    if headers is None:
        return None
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return float(value) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def run_bounded(fn: Callable[[Any], T], items: Sequence[Any], concurrency: int) -> list[T]:
    """``[fn(x) for x in items]`` with at most ``concurrency`` calls in flight, order kept.

    The first exception cancels the calls not yet started and is raised.
    """
    if concurrency <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(concurrency, len(items)), thread_name_prefix="scorer") as pool:
        futures = [pool.submit(fn, x) for x in items]
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise
