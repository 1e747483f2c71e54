"""The database's own identity, which every delivery hint of a PostgreSQL deployment carries.

A data directory has one (``deployment.json``); a database had none, so a worker could not
tell a hint from a host on another database, or from a host still on its files, from one of
its own (``worker/foreign.py``). One row, made here, read once per process: every machine
reaching the database, by whatever name, reads the same id.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # 32 hex digits, as a data directory's id; ``one`` keeps the table to a single row.
    op.execute(
        """
        CREATE TABLE memhoncho_deployment (
            one boolean PRIMARY KEY DEFAULT true CHECK (one),
            deployment_id text NOT NULL,
            created_at double precision NOT NULL
        )
        """
    )
    op.execute(
        "INSERT INTO memhoncho_deployment (deployment_id, created_at)"
        " VALUES (md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text),"
        " extract(epoch FROM clock_timestamp()))"
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS memhoncho_deployment")
