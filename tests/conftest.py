"""One embedded Postgres (real, with pgvector) per test session, migrated by Alembic."""

from __future__ import annotations

import os

import pytest

from checkworthy.config import VAR_DIR, quiet_offline_env

quiet_offline_env()


def _prefect_logging_for_the_session() -> None:
    """Bind Prefect's console handler to the session's stderr now: configured lazily inside a test
    that uses capsys, it would keep writing to that test's closed capture in every later flow."""
    from prefect.logging.configuration import setup_logging

    setup_logging()


_prefect_logging_for_the_session()


@pytest.fixture(scope="session")
def owner_url() -> str:
    """The superuser of a fresh cluster per session under var/, unmigrated: for what only the owner
    does (create databases, provision logins, migrate). The server runs as its own OS user when we
    are root, so it must be able to reach its folder; pytest's 0700 tmp dirs would lock it out.
    ``TEST_DATABASE_URL``, if set, names the owner of another server (trusting local logins)."""
    from checkworthy.store.engine import embedded_url

    if os.environ.get("TEST_DATABASE_URL"):
        return os.environ["TEST_DATABASE_URL"]
    pgdata = VAR_DIR / f"pg-test-{os.getpid()}"
    return embedded_url(pgdata, database="checkworthy_test", cleanup_mode="delete", owner=True)


@pytest.fixture(scope="session")
def db_url(owner_url) -> str:
    """The application's login, exactly as ``checkworthy`` connects to the embedded server: a
    member of the pipeline role, after the owner migrated."""
    from checkworthy.store.engine import application_url

    return application_url(owner_url)


@pytest.fixture(scope="session")
def harness():
    """Prefect's test harness (a temporary API), once per session: it takes 12-20 s to start."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def engine(db_url):
    from checkworthy.store.engine import get_engine

    eng = get_engine(db_url)
    yield eng
    eng.dispose()


@pytest.fixture(scope="session")
def owner_engine(owner_url, engine):
    """The migrating owner (the cluster's superuser), for tests of what only it may do or of what
    binds even it (the append-only triggers)."""
    from sqlalchemy import create_engine

    eng = create_engine(owner_url)
    yield eng
    eng.dispose()


@pytest.fixture(scope="session", autouse=True)
def project_data() -> None:
    """A fresh clone has no data/: pull it with real DVC from the project's own remote."""
    from checkworthy.data.versioning import ensure_data

    ensure_data()


@pytest.fixture()
def use_db(db_url, engine, monkeypatch):
    """Point the CLI (which reads DATABASE_URL) at the test database."""
    monkeypatch.setenv("DATABASE_URL", db_url)
    return engine


@pytest.fixture
def last_run_and_scores(use_db):
    """A function of a model spec: the newest calibration run's (model spec, label set id) and the
    spec's stored ``p_positive`` score by text (what a predict with that champion stored)."""
    from sqlalchemy import text

    def read(spec: str) -> tuple[tuple[str, int], dict[str, float]]:
        with use_db.connect() as conn:
            run = conn.execute(text("SELECT m.spec, r.label_set_id FROM calibration_runs r JOIN models m "
                                    "ON m.id = r.model_id ORDER BY r.id DESC LIMIT 1")).one()
            stored = dict(conn.execute(text(
                "SELECT t.text, p.score FROM predictions p JOIN texts t ON t.text_hash = p.text_hash "
                "JOIN models m ON m.id = p.model_id WHERE m.spec = :s AND p.score_kind = 'p_positive'"),
                {"s": spec}).all())
        return (run.spec, run.label_set_id), stored
    return read

