"""Fault injection for the Honcho stand-in: a thread-safe plan of what to break, and when.

A fault matches a request by method, path substring and path ending, fires with a probability
(seeded, so a run repeats) and at most ``count`` times. The server asks
``plan.pick(method, path)`` once per request and acts on the fault it gets back.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

#: Kinds of fault and what each does to a matching request. With ``after_commit=True`` the
#: status and drop faults strike after the request was applied: a gateway answering 429 or
#: 5xx for a request the server committed, a response lost on its way back.
KINDS = {
    "http_500": "answer 500 before doing anything (after_commit: apply it, then answer 500)",
    "http_503": "answer 503 before doing anything (after_commit: apply it, then answer 503)",
    "http_429": "answer 429 with Retry-After before doing anything (after_commit: apply it first)",
    "timeout_before_commit": "sleep past the client's timeout, change nothing, answer nothing",
    "timeout_after_commit": "apply the request, sleep past the client's timeout, answer nothing",
    "late_commit": "hold the request for sleep_s (past the client's timeout), then apply it",
    "drop_connection": "close the socket without an answer, before or after applying the request",
    "latency_ms": "wait this long, then handle the request normally",
    "trickle": "apply the request, then send the answer's body a byte at a time over sleep_s",
}
#: The kinds ``after_commit`` applies to.
AFTER_COMMIT_KINDS = frozenset({"http_500", "http_503", "http_429", "drop_connection"})
DEFAULT_SLEEP_S = 2.0  # seconds a timeout fault holds the request
DEFAULT_RETRY_AFTER_S = 1.0  # seconds sent in Retry-After
TRICKLE_PIECES = 20  # a trickled body goes out in this many parts, sleep_s spread between them


@dataclass
class Fault:
    """One planned fault. ``count=None`` means every matching request."""

    kind: str
    count: int | None = 1
    path_contains: str | None = None
    path_endswith: str | None = None  #: e.g. "/messages": the writes, not "/messages/list"
    method: str | None = None
    probability: float = 1.0
    seed: int | None = None
    retry_after_s: float = DEFAULT_RETRY_AFTER_S
    sleep_s: float = DEFAULT_SLEEP_S
    latency_ms: float = 0.0
    after_commit: bool = False  # AFTER_COMMIT_KINDS only
    id: int = 0
    fired: int = 0
    _rng: random.Random = field(default_factory=random.Random, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; expected one of {sorted(KINDS)}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError("probability must be within 0..1")
        if self.count is not None and self.count < 1:
            raise ValueError("count must be at least 1, or None for every request")
        if self.after_commit and self.kind not in AFTER_COMMIT_KINDS:
            raise ValueError(f"after_commit applies to {sorted(AFTER_COMMIT_KINDS)} only")
        self._rng = random.Random(self.seed)

    @property
    def commits(self) -> bool:
        """Whether the request is applied before the fault strikes (a late commit is not:
        it is applied after the fault's hold)."""
        return self.kind == "timeout_after_commit" or (
            self.kind in AFTER_COMMIT_KINDS and self.after_commit
        )

    def matches(self, method: str, path: str) -> bool:
        if self.method is not None and self.method.upper() != method.upper():
            return False
        if self.path_endswith is not None and not path.rstrip("/").endswith(self.path_endswith):
            return False
        return self.path_contains is None or self.path_contains in path

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("_rng", None)
        return data


class FaultPlan:
    """The faults planned on one stand-in. Safe to call from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._next_id = 1

    def add(self, kind: str, **options: Any) -> Fault:
        """Plan a fault; see ``KINDS``. Returns it (its ``fired`` count updates live)."""
        with self._lock:
            fault = Fault(kind=kind, id=self._next_id, **options)
            self._next_id += 1
            self._faults.append(fault)
            return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def remove(self, fault_id: int) -> None:
        with self._lock:
            self._faults = [f for f in self._faults if f.id != fault_id]

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            return [f.as_dict() for f in self._faults]

    def pick(self, method: str, path: str) -> tuple[float, Fault | None]:
        """For one request: the added latency (seconds) and the fault to act on, if any."""
        latency_s = 0.0
        chosen: Fault | None = None
        with self._lock:
            for fault in list(self._faults):
                if not fault.matches(method, path):
                    continue
                if fault.kind == "latency_ms":
                    if fault._rng.random() < fault.probability:
                        latency_s += fault.latency_ms / 1000.0
                        self._spend(fault)
                    continue
                if chosen is None and fault._rng.random() < fault.probability:
                    chosen = fault
                    self._spend(fault)
        return latency_s, chosen

    def _spend(self, fault: Fault) -> None:
        fault.fired += 1
        if fault.count is not None and fault.fired >= fault.count:
            self._faults.remove(fault)


def write_trickled(
    write: Callable[[bytes], object], raw: bytes, total_s: float, wait: Callable[[float], object]
) -> None:
    """Write ``raw`` in ``TRICKLE_PIECES`` parts with ``total_s`` spread between them, so no
    gap is long while the whole is (``wait`` sleeps, returning early when the server stops)."""
    if not total_s or len(raw) < 2:
        write(raw)
        return
    pieces = min(TRICKLE_PIECES, len(raw))
    size = -(-len(raw) // pieces)  # ceiling division
    for start in range(0, len(raw), size):
        if start:
            wait(total_s / pieces)
        write(raw[start : start + size])
