"""alembic's environment for the store: online migrations only, over the URL the command gave.

Imported by alembic alone (``memhoncho db upgrade``), never by a host or a worker.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

url = context.config.get_main_option("sqlalchemy.url")
assert url, "memhoncho db upgrade sets the database URL"
engine = create_engine(url, poolclass=pool.NullPool)
with engine.connect() as connection:
    context.configure(connection=connection, transactional_ddl=True)
    with context.begin_transaction():
        # One upgrade at a time, whoever else runs it (two machines starting together).
        connection.exec_driver_sql(
            "SELECT pg_advisory_xact_lock(hashtextextended('memhoncho-schema', 0))"
        )
        context.run_migrations()
engine.dispose()
