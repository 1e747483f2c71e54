"""Per-conversation pending counters, so the status census sums conversations, not records.

Kept by the store in the transactions that change pending records (capture adds, a ledger
write that delivers subtracts, a rewrite that removes pending records subtracts); backfilled
here from the outbox.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE memhoncho_conversations"
        " ADD COLUMN pending_batches bigint NOT NULL DEFAULT 0,"
        " ADD COLUMN pending_messages bigint NOT NULL DEFAULT 0"
    )
    op.execute(
        """
        UPDATE memhoncho_conversations c
        SET pending_batches = p.batches, pending_messages = p.messages
        FROM (
            SELECT key, count(*) AS batches, coalesce(sum(messages), 0) AS messages
            FROM memhoncho_outbox WHERE NOT delivered GROUP BY key
        ) p
        WHERE p.key = c.key
        """
    )
    op.execute(
        "CREATE INDEX memhoncho_conversations_pending ON memhoncho_conversations (key)"
        " INCLUDE (pending_batches, pending_messages) WHERE pending_batches > 0"
    )


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS memhoncho_conversations_pending")
    op.execute(
        "ALTER TABLE memhoncho_conversations DROP COLUMN pending_batches,"
        " DROP COLUMN pending_messages"
    )
