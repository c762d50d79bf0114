"""Flow tasks retry transient faults and only those (flows/pipeline.py ``DB``/``MODEL``/``DVC`` options).

Each task below carries the options the project's tasks carry (only the delay is shortened) and
meets a real fault: a database that is not there (psycopg's OperationalError), a model runtime
that refuses the connection, a failing ``dvc`` command. A transient fault is retried and the
second attempt, against the session's real Postgres, succeeds; bad data and configuration
errors fail at once.
"""

from __future__ import annotations

import socket
import subprocess

import pytest
from prefect import flow, task
from sqlalchemy import create_engine, text

from checkworthy.data import versioning
from checkworthy.errors import DataError


@pytest.fixture(scope="module")
def fp(harness):
    import checkworthy.flows.retries as fp

    return fp


def run_task(options: dict, body, n_attempts: list[int]):
    """Run ``body(attempt)`` as a Prefect task with ``options`` (no delay) inside a flow."""
    @task(**(options | {"retry_delay_seconds": 0}))
    def step() -> str:
        n_attempts.append(1)
        return body(len(n_attempts))

    @flow
    def wrapper() -> str:
        return step()

    return wrapper()


def unreachable_db_url(tmp_path) -> str:
    return f"postgresql+psycopg://nobody@/nothing?host={tmp_path}/no-server-here"


def test_a_lost_database_is_retried_and_the_next_attempt_succeeds(fp, engine, db_url, tmp_path):
    attempts: list[int] = []

    def body(attempt: int) -> str:
        url = unreachable_db_url(tmp_path) if attempt == 1 else db_url
        eng = create_engine(url)
        try:
            with eng.connect() as conn:
                return conn.execute(text("SELECT 'stored'")).scalar_one()
        finally:
            eng.dispose()

    assert run_task(fp.DB, body, attempts) == "stored"
    assert len(attempts) == 2


@pytest.mark.parametrize("options", ["DB", "MODEL", "DVC"])
def test_bad_data_is_never_retried(fp, options):
    attempts: list[int] = []

    def body(attempt: int) -> str:
        raise DataError("claims.csv", 3, "label", "'2' is not 0 or 1")

    with pytest.raises(DataError):
        run_task(getattr(fp, options), body, attempts)
    assert len(attempts) == 1


def test_a_refused_model_runtime_is_retried_a_configuration_error_is_not(fp):
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    attempts: list[int] = []

    def refused(attempt: int) -> str:
        if attempt < 3:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()  # ConnectionRefusedError
        return "scored"

    assert run_task(fp.MODEL, refused, attempts) == "scored"
    assert len(attempts) == 3
    attempts.clear()

    def misconfigured(attempt: int) -> str:
        raise ValueError("model 'gemma3:270m' is not on the server")

    with pytest.raises(ValueError):
        run_task(fp.MODEL, misconfigured, attempts)
    assert len(attempts) == 1
    attempts.clear()
    with pytest.raises(TypeError):  # a bug is not a transient fault under any options
        run_task(fp.DB, lambda a: len(None), attempts)
    assert len(attempts) == 1


def test_a_failing_dvc_command_is_retried(fp, tmp_path):
    attempts: list[int] = []

    def body(attempt: int) -> str:
        repo = tmp_path / "repo"
        if attempt == 2:  # the repository appears (as when another process released it)
            repo.mkdir()
            subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
            versioning.dvc_in(repo, "init", "-q")
        return versioning.dvc_in(repo if repo.exists() else tmp_path, "status", "-q").stdout  # 1st: not a DVC repo

    run_task(fp.DVC, body, attempts)
    assert len(attempts) == 2
