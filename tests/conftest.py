"""One embedded Postgres (real, with pgvector) per test session, migrated by Alembic."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from checkworthy.config import ROOT, VAR_DIR, quiet_offline_env

quiet_offline_env()


def _prefect_logging_for_the_session() -> None:
    """Bind Prefect's console handler to the session's stderr now: configured lazily inside a test
    that uses capsys, it would keep writing to that test's closed capture in every later flow."""
    from prefect.logging.configuration import setup_logging

    setup_logging()


_prefect_logging_for_the_session()

SHARED = ROOT.parent / "shared" / "datasets"


def raw_path(*parts: str) -> Path:
    """A raw dataset file: the project's copy under data/raw, else ../shared/datasets."""
    own = ROOT / "data" / "raw" / Path(*parts)
    return own if own.exists() else SHARED / Path(*parts)


@pytest.fixture(scope="session")
def db_url() -> str:
    """A fresh cluster per session under var/ (the server runs as its own OS user when we are
    root, so it must be able to reach its folder; pytest's 0700 tmp dirs would lock it out)."""
    from checkworthy.store.engine import embedded_url

    if os.environ.get("TEST_DATABASE_URL"):
        return os.environ["TEST_DATABASE_URL"]
    pgdata = VAR_DIR / f"pg-test-{os.getpid()}"
    return embedded_url(pgdata, database="checkworthy_test", cleanup_mode="delete")


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


#: tables that record an attempt itself (a label file's update, its validation, the data version
#: it was judged on, the flow run): a refused label update writes these, and only these
ATTEMPT_RECORDS = ("label_updates", "validation_runs", "validation_results", "data_versions", "flow_runs",
                   "flow_run_data_versions", "change_events")


def table_counts(engine, ignore: tuple[str, ...] = ()) -> dict[str, int]:
    """Row counts of every table of the schema but ``ignore``, to show that a failed command
    wrote nothing."""
    from sqlalchemy import text

    with engine.connect() as conn:
        tables = conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                                   "ORDER BY tablename")).scalars().all()
        return {t: conn.execute(text(f'SELECT count(*) FROM "{t}"')).scalar_one()
                for t in tables if t not in ignore}
