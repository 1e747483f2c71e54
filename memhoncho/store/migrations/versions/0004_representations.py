"""Representation snapshots in the store (``memory``), so every machine's host reads the
refresh a worker on any machine wrote.

Nothing to backfill: the snapshots are disposable, the next refresh writes them (``memhoncho
store migrate`` copies a file store's).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One row per conversation: the snapshot as ``memory.Snapshot`` JSON, and its fetch time
    # beside it so beat's due list reads one narrow column, not every document.
    op.execute(
        """
        CREATE TABLE memhoncho_representations (
            key text PRIMARY KEY,
            snapshot jsonb NOT NULL,
            fetched_at double precision NOT NULL
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS memhoncho_representations")
