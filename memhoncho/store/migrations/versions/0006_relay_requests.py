"""Relay requests every machine sees, and the capture function's say in them.

- ``memhoncho_append`` is now the careful path only: the usual capture is one statement of the
  store's own (``store/postgres/records.py``, ``APPEND_SQL``: an UPDATE and an INSERT, no
  function call), which measured cheaper than 0005's five statements of PL/pgSQL; the function
  takes what that statement leaves (a first capture, a duplicate, an outbox that may be full).
- ``p_hint`` replaces ``p_claim``: ``publish`` claims the mark for a caller that publishes;
  ``request`` (a capture that publishes nothing: ``memhoncho capture``, no API key yet, a
  broker known to be down) leaves a row in ``memhoncho_relay_requests`` when no hint waits, so
  the outbox relay of any machine publishes it within a poll, not the sweep in 15 minutes.
- ``memhoncho_relay_requests``: the ``state/relay/<key>`` files of the file store.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

OLD_SIGNATURE = (
    "memhoncho_append(text, text, text, double precision, integer, jsonb, bigint,"
    " double precision, boolean)"
)
NEW_SIGNATURE = (
    "memhoncho_append(text, text, text, double precision, integer, jsonb, bigint,"
    " double precision, text)"
)

APPEND_FUNCTION = """
CREATE FUNCTION memhoncho_append(
    p_key text, p_conversation_id text, p_batch_id text, p_captured_at double precision,
    p_messages integer, p_record jsonb, p_max_pending bigint, p_stale double precision,
    p_hint text,
    OUT status text, OUT seq bigint, OUT known_digest text, OUT pending bigint,
    OUT hint boolean)
LANGUAGE plpgsql AS $$
DECLARE
    conv memhoncho_conversations%ROWTYPE;
    -- The server's clock: marks claimed from every machine are aged by one clock.
    now_s double precision := extract(epoch FROM clock_timestamp());
    waits boolean;  -- a hint is waiting (a mark not yet stale) before this capture
BEGIN
    -- The conversation's row, locked: captures of one conversation commit in seq order.
    INSERT INTO memhoncho_conversations (key, conversation_id) VALUES (p_key, p_conversation_id)
        ON CONFLICT (key) DO NOTHING;
    SELECT * INTO conv FROM memhoncho_conversations WHERE key = p_key FOR UPDATE;
    IF coalesce(conv.ledger -> 'delivered_batches' ? p_batch_id, false) THEN
        status := 'duplicate';
        known_digest := conv.ledger -> 'delivered_digests' ->> p_batch_id;
        RETURN;
    END IF;
    SELECT o.record ->> 'digest' INTO known_digest FROM memhoncho_outbox o
        WHERE o.key = p_key AND o.batch_id = p_batch_id;
    IF FOUND THEN
        status := 'duplicate';
        RETURN;
    END IF;
    IF conv.last_seq + 1 - conv.delivered_seq > p_max_pending THEN
        SELECT count(*) INTO pending FROM memhoncho_outbox o
            WHERE o.key = p_key AND NOT o.delivered;
        IF pending >= p_max_pending THEN
            status := 'full';
            RETURN;
        END IF;
    END IF;
    waits := conv.hint_at IS NOT NULL AND conv.hint_at >= now_s - p_stale;
    hint := NOT waits AND p_hint IN ('publish', 'request');
    UPDATE memhoncho_conversations SET last_seq = last_seq + 1,
        pending_batches = pending_batches + 1, pending_messages = pending_messages + p_messages,
        conversation_id = coalesce(conversation_id, p_conversation_id),
        hint_at = CASE WHEN hint AND p_hint = 'publish' THEN now_s ELSE hint_at END
        WHERE key = p_key RETURNING last_seq INTO seq;
    INSERT INTO memhoncho_outbox (key, seq, batch_id, captured_at, messages, record)
        VALUES (p_key, seq, p_batch_id, p_captured_at, p_messages, p_record);
    IF hint AND p_hint = 'request' THEN
        INSERT INTO memhoncho_relay_requests (key, conversation_id, requested_at)
            VALUES (p_key, p_conversation_id, now_s) ON CONFLICT (key) DO NOTHING;
    END IF;
    status := 'captured';
END
$$
"""


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE memhoncho_relay_requests (
            key text PRIMARY KEY,
            conversation_id text NOT NULL,
            requested_at double precision NOT NULL
        )
        """
    )
    op.execute(f"DROP FUNCTION IF EXISTS {OLD_SIGNATURE}")
    op.execute(APPEND_FUNCTION)


def downgrade() -> None:
    from importlib import import_module

    previous = import_module(
        "memhoncho.store.migrations.versions.0005_append_function_hints_results"
    )
    op.execute(f"DROP FUNCTION IF EXISTS {NEW_SIGNATURE}")
    op.execute(previous.APPEND_FUNCTION)
    op.execute("DROP TABLE IF EXISTS memhoncho_relay_requests")
