"""Where each durable file lives in the data directory (shared by host, workers and beat)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def keys_in(directory: Path, suffix: str) -> list[str]:
    """The keys of the ``<key><suffix>`` files in ``directory``, sorted; [] when it does not
    exist. A dot file (an atomic write's temporary) is no key."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    cut = len(suffix)
    return sorted(n[:-cut] for n in names if n.endswith(suffix) and not n.startswith("."))


@dataclass(frozen=True)
class Layout:
    """Paths under one data directory. Keys come from ``ids.conversation_key`` only."""

    root: Path

    @property
    def outbox_dir(self) -> Path:
        return self.root / "data" / "outbox"

    @property
    def dead_dir(self) -> Path:
        return self.root / "data" / "dead"

    @property
    def quarantine_dir(self) -> Path:
        return self.root / "data" / "quarantine"

    @property
    def ledger_dir(self) -> Path:
        return self.root / "state" / "ledger"

    @property
    def pending_forks_dir(self) -> Path:
        return self.root / "state" / "forks" / "pending"

    @property
    def lock_dir(self) -> Path:
        return self.root / "state" / "locks"

    @property
    def last_delivery(self) -> Path:
        return self.root / "state" / "last-delivery.json"

    def relay_heartbeat(self, hostname: str) -> Path:
        """Touched by the outbox relay on ``hostname`` while it runs (its healthcheck reads it)."""
        return self.root / "state" / "heartbeats" / f"relay-{hostname}"

    @property
    def departures_dir(self) -> Path:
        return self.root / "state" / "departures"

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache" / "representations"

    @property
    def broker_dir(self) -> Path:
        return self.root / "broker"

    def outbox(self, key: str) -> Path:
        return self.outbox_dir / f"{key}.jsonl"

    def dead(self, key: str) -> Path:
        return self.dead_dir / f"{key}.jsonl"

    def quarantine(self, key: str) -> Path:
        return self.quarantine_dir / f"{key}.jsonl"

    def ledger(self, key: str) -> Path:
        return self.ledger_dir / f"{key}.json"

    def pending_fork(self, key: str) -> Path:
        return self.pending_forks_dir / f"{key}.json"

    def cache(self, key: str) -> Path:
        return self.cache_dir / f"{key}.json"

    def outbox_lock(self, key: str) -> Path:
        """Held for one append or one rewrite of the outbox file; never across a network call."""
        return self.lock_dir / f"{key}.outbox.lock"

    def conversation_lock(self, key: str) -> Path:
        """Held by the one worker delivering or resolving a fork for this conversation."""
        return self.lock_dir / f"{key}.deliver.lock"

    def conversation_keys(self) -> list[str]:
        """Every conversation with an outbox file, sorted."""
        return keys_in(self.outbox_dir, ".jsonl")
