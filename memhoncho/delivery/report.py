"""What one delivery did: its end state and counts, for the task's answer and the status view."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class DeliveryState(StrEnum):
    """How one delivery ended (failures raise instead)."""

    IDLE = "idle"  #: nothing was pending
    DELIVERED = "delivered"  #: everything pending at the start is in Honcho now
    MORE = "more"  #: the call budget ran out with messages still pending: deliver again


@dataclass
class DeliveryReport:
    """What one ``deliver_conversation`` did."""

    conversation_id: str
    state: DeliveryState = DeliveryState.IDLE
    delivered_messages: int = 0  #: sent and acknowledged in this run
    recovered_messages: int = 0  #: found already in Honcho after an unclear send
    calls: int = 0  #: Honcho requests made (session setup, finds and sends)
    session_id: str | None = None
    first_delivery: bool = False  #: this run delivered the conversation's first messages


def joined(first: DeliveryReport, then: DeliveryReport) -> DeliveryReport:
    """Two runs of one delivery as one report (the later run's state, unless it found nothing)."""
    return DeliveryReport(
        conversation_id=first.conversation_id,
        state=first.state if then.state == DeliveryState.IDLE else then.state,
        delivered_messages=first.delivered_messages + then.delivered_messages,
        recovered_messages=first.recovered_messages + then.recovered_messages,
        calls=first.calls + then.calls,
        session_id=then.session_id or first.session_id,
        first_delivery=first.first_delivery or then.first_delivery,
    )
