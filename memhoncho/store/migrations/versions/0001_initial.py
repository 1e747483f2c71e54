"""The store's first schema: conversations (seq clock and ledger), outbox, forks, dead letters.

Revision ID: 0001
Revises:
Create Date: 2026-12-03
"""

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    # One row per conversation: the capture clock (``last_seq``, bumped under the row lock by
    # every capture) and the ledger, with the columns the census and pending reads need.
    op.execute(
        """
        CREATE TABLE memhoncho_conversations (
            key text PRIMARY KEY,
            conversation_id text,
            last_seq bigint NOT NULL DEFAULT 0,
            delivered_seq bigint NOT NULL DEFAULT 0,
            ledger jsonb,
            has_session boolean NOT NULL DEFAULT false,
            last_delivered_at double precision
        )
        """
    )
    op.execute(
        "CREATE INDEX memhoncho_conversations_sessions ON memhoncho_conversations (key)"
        " WHERE has_session"
    )
    op.execute(
        "CREATE INDEX memhoncho_conversations_delivered_at"
        " ON memhoncho_conversations (last_delivered_at) WHERE last_delivered_at IS NOT NULL"
    )
    # The outbox: delivered records stay (flagged) until the sweep compacts them, so the
    # pending reads and counts go through partial indexes that hold pending records only.
    op.execute(
        """
        CREATE TABLE memhoncho_outbox (
            key text NOT NULL,
            seq bigint NOT NULL,
            batch_id text NOT NULL,
            captured_at double precision,
            messages integer NOT NULL DEFAULT 0,
            record jsonb NOT NULL,
            delivered boolean NOT NULL DEFAULT false,
            PRIMARY KEY (key, seq)
        )
        """
    )
    op.execute("CREATE UNIQUE INDEX memhoncho_outbox_batch ON memhoncho_outbox (key, batch_id)")
    op.execute(
        "CREATE INDEX memhoncho_outbox_pending ON memhoncho_outbox (key, seq)"
        " INCLUDE (messages, captured_at) WHERE NOT delivered"
    )
    op.execute(
        "CREATE INDEX memhoncho_outbox_pending_age ON memhoncho_outbox (captured_at)"
        " WHERE NOT delivered"
    )
    op.execute(
        """
        CREATE TABLE memhoncho_forks (
            child_key text PRIMARY KEY,
            record jsonb NOT NULL,
            created_at double precision NOT NULL
        )
        """
    )
    op.execute(
        """
        CREATE TABLE memhoncho_fork_decisions (
            child_key text PRIMARY KEY,
            decision jsonb NOT NULL,
            decided_at double precision
        )
        """
    )
    op.execute(
        "CREATE TABLE memhoncho_clone_markers (parent_key text PRIMARY KEY, marker jsonb NOT NULL)"
    )
    op.execute(
        """
        CREATE TABLE memhoncho_dead (
            id bigserial PRIMARY KEY,
            key text NOT NULL,
            dead_at double precision,
            record jsonb NOT NULL
        )
        """
    )
    op.execute("CREATE INDEX memhoncho_dead_key ON memhoncho_dead (key, id)")
    op.execute(
        """
        CREATE TABLE memhoncho_quarantine (
            id bigserial PRIMARY KEY,
            key text NOT NULL,
            entry jsonb NOT NULL
        )
        """
    )
    op.execute("CREATE INDEX memhoncho_quarantine_key ON memhoncho_quarantine (key)")
    op.execute(
        "CREATE TABLE memhoncho_departures (peer_id text PRIMARY KEY, departure jsonb NOT NULL)"
    )
    op.execute("CREATE TABLE memhoncho_markers (name text PRIMARY KEY, value jsonb NOT NULL)")


def downgrade() -> None:
    for table in (
        "memhoncho_markers",
        "memhoncho_departures",
        "memhoncho_quarantine",
        "memhoncho_dead",
        "memhoncho_clone_markers",
        "memhoncho_fork_decisions",
        "memhoncho_forks",
        "memhoncho_outbox",
        "memhoncho_conversations",
    ):
        op.execute(f"DROP TABLE IF EXISTS {table}")
