"""Delivery: get a conversation's outbox into Honcho in order, exactly once (``engine``), fold
what Honcho stored into the ledger (``fold``), and start a forked child's session (``forks``,
``clone``)."""
