"""Alembic environment: online migrations only, serialised by an advisory lock."""

from alembic import context
from sqlalchemy import create_engine, text

MIGRATION_LOCK = 7_2024_0001  # any two processes migrating at once: the second waits


def run_migrations_online() -> None:
    url = context.config.get_main_option("sqlalchemy.url")
    engine = create_engine(url)
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK})
        conn.commit()
        try:
            context.configure(connection=conn, transactional_ddl=True)
            with context.begin_transaction():
                context.run_migrations()
            conn.commit()
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK})
            conn.commit()
    engine.dispose()


run_migrations_online()
