"""Put a conversation into Honcho (or the stand-in) and the ledger, as delivery leaves them.

For tests of what reads memory (recall tools, sections) without running delivery first: the
session is made with memhoncho's config and members, the messages are stored through the
adapter, and the ledger names the session.
"""

from __future__ import annotations

from collections.abc import Sequence

from memhoncho import ids
from memhoncho.deployment import Deployment
from memhoncho.honcho import adapter
from memhoncho.models import OUTBOX_ID_KEY, Ledger
from memhoncho.store.ledger import write_ledger


def seed_conversation(
    deployment: Deployment,
    conversation_id: str,
    owner: str | None,
    user_texts: Sequence[str],
    agent_texts: Sequence[str] = (),
    *,
    session_id: str | None = None,
) -> str:
    """Store the texts (user's, then agent's) in the conversation's session; its session id.

    ``session_id`` stands for a session whose id memhoncho did not choose (a fork's clone):
    only the ledger then ties it to the conversation.
    """
    current = deployment.settings()
    client = adapter.write_client(deployment.honcho_target())
    sid = session_id or ids.session_id(current.workspace_id, conversation_id)
    user = ids.peer_id(owner)
    adapter.ensure_session(client, sid, user, current.agent_peer_id)
    key = ids.conversation_key(conversation_id)
    messages = [
        adapter.OutgoingMessage(user, text, {OUTBOX_ID_KEY: f"{key}:u{i}"})
        for i, text in enumerate(user_texts)
    ] + [
        adapter.OutgoingMessage(current.agent_peer_id, text, {OUTBOX_ID_KEY: f"{key}:a{i}"})
        for i, text in enumerate(agent_texts)
    ]
    message_ids: list[str] = []
    for start in range(0, len(messages), adapter.MAX_MESSAGES_PER_CALL):
        chunk = messages[start : start + adapter.MAX_MESSAGES_PER_CALL]
        message_ids += adapter.add_messages(client, sid, chunk)
    ledger = Ledger(
        conversation_id=conversation_id,
        owner=owner,
        session_id=sid,
        messages_delivered=len(message_ids),
    )
    write_ledger(deployment.layout, key, ledger)
    return sid
