"""A capture in one round trip, the hint marks every machine sees, and Celery's results.

- ``memhoncho_append``: the whole capture (order, dedup, capacity, the record, the hint mark)
  as one server-side function, so a capture is one statement in autocommit: one round trip,
  as cheap as a bare ``INSERT``, and still one transaction (it commits whole or not at all).
- ``memhoncho_conversations.hint_at``: when the conversation's delivery hint was published
  and not yet taken (``store/hint_marks.py``'s file, shared by every machine); NULL: none waits.
- ``memhoncho_celery_results``: the Celery result backend where the broker keeps none
  (RabbitMQ), read by a host waiting on a recall run by a worker (``results/celery_store.py``).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

APPEND_FUNCTION = """
CREATE FUNCTION memhoncho_append(
    p_key text, p_conversation_id text, p_batch_id text, p_captured_at double precision,
    p_messages integer, p_record jsonb, p_max_pending bigint, p_stale double precision,
    p_claim boolean,
    OUT status text, OUT seq bigint, OUT known_digest text, OUT pending bigint,
    OUT hint boolean)
LANGUAGE plpgsql AS $$
DECLARE
    conv memhoncho_conversations%ROWTYPE;
    -- The server's clock: marks claimed from every machine are aged by one clock.
    now_s double precision := extract(epoch FROM clock_timestamp());
BEGIN
    -- The conversation's row, locked: captures of one conversation commit in seq order.
    INSERT INTO memhoncho_conversations (key, conversation_id) VALUES (p_key, p_conversation_id)
        ON CONFLICT (key) DO NOTHING;
    SELECT * INTO conv FROM memhoncho_conversations WHERE key = p_key FOR UPDATE;
    hint := false;
    -- Delivered within the ledger's window, or still in the outbox: a duplicate.
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
    -- Pending records have distinct seqs in (delivered_seq, last_seq]: count them only when
    -- there may be too many.
    IF conv.last_seq + 1 - conv.delivered_seq > p_max_pending THEN
        SELECT count(*) INTO pending FROM memhoncho_outbox o
            WHERE o.key = p_key AND NOT o.delivered;
        IF pending >= p_max_pending THEN
            status := 'full';
            RETURN;
        END IF;
    END IF;
    -- Claim the hint mark when none waits (or the one waiting is presumed lost).
    hint := p_claim AND (conv.hint_at IS NULL OR conv.hint_at < now_s - p_stale);
    UPDATE memhoncho_conversations SET last_seq = last_seq + 1,
        pending_batches = pending_batches + 1, pending_messages = pending_messages + p_messages,
        conversation_id = coalesce(conversation_id, p_conversation_id),
        hint_at = CASE WHEN hint THEN now_s ELSE hint_at END
        WHERE key = p_key RETURNING last_seq INTO seq;
    INSERT INTO memhoncho_outbox (key, seq, batch_id, captured_at, messages, record)
        VALUES (p_key, seq, p_batch_id, p_captured_at, p_messages, p_record);
    status := 'captured';
END
$$
"""


def upgrade() -> None:
    op.execute("ALTER TABLE memhoncho_conversations ADD COLUMN hint_at double precision")
    op.execute(APPEND_FUNCTION)
    op.execute(
        """
        CREATE TABLE memhoncho_celery_results (
            key text PRIMARY KEY,
            value bytea NOT NULL,
            expires_at double precision NOT NULL
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS memhoncho_celery_results")
    op.execute(
        "DROP FUNCTION IF EXISTS memhoncho_append(text, text, text, double precision, integer,"
        " jsonb, bigint, double precision, boolean)"
    )
    op.execute("ALTER TABLE memhoncho_conversations DROP COLUMN IF EXISTS hint_at")
