"""Task results and heartbeats in the store (``results.postgres_store``), beside the state.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One row per task name: the ``TaskResult`` fields as JSON, counters bumped in place.
    op.execute("CREATE TABLE memhoncho_task_results (name text PRIMARY KEY, fields jsonb NOT NULL)")
    # Beat and worker heartbeats: kind is "beat" or "worker"; stale rows are ignored, then
    # pruned by the next heartbeat of the same kind.
    op.execute(
        """
        CREATE TABLE memhoncho_heartbeats (
            kind text NOT NULL,
            id text NOT NULL,
            at double precision NOT NULL,
            queues jsonb,
            PRIMARY KEY (kind, id)
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS memhoncho_heartbeats")
    op.execute("DROP TABLE IF EXISTS memhoncho_task_results")
