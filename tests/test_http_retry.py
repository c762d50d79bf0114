"""Retry machinery of the HTTP backends: Retry-After, the shared gate, giving up."""

from __future__ import annotations

import time

import pytest

from checkworthy.scorers.http_retry import (
    BackendError,
    Gate,
    Retry,
    RetryPolicy,
    call_with_retries,
    parse_retry_after,
)

FAST = RetryPolicy(max_retries=3, backoff=0.01, backoff_max=0.05)


def test_retry_after_and_shared_gate():
    """Retry-After (seconds, milliseconds, HTTP date) sets the wait; the gate holds every worker; a
    wait longer than max_retry_after is not waited for."""
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 < parse_retry_after({"retry-after": date}) <= 30
    assert parse_retry_after({}) is None
    gate = Gate()
    gate.hold(0.3)
    t0 = time.monotonic()
    gate.wait()
    assert time.monotonic() - t0 >= 0.29
    calls = []

    def flaky():
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RuntimeError("429")
        return "ok"

    result, attempts = call_with_retries(flaky, lambda e: Retry("429", 0.2), FAST, Gate(), "test")
    assert (result, attempts) == ("ok", 2) and calls[1] - calls[0] >= 0.19

    def limited():
        raise RuntimeError("429")

    with pytest.raises(BackendError, match="server asks to wait"):
        call_with_retries(limited, lambda e: Retry("429", 3600.0), FAST, Gate(), "test")
