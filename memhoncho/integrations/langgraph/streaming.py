"""``graph.stream`` / ``astream`` in any ``stream_mode``, with the graph's final state seen:
the graph is streamed with ``"values"`` added to the caller's modes, and every chunk is handed
back in the shape the caller's own ``stream_mode`` gives (a bare chunk for one mode, ``(mode,
chunk)`` for a list, a namespace first with ``subgraphs=True``). The added ``"values"`` chunks
the caller did not ask for are kept back; the last one of the root graph is the final state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

VALUES = "values"


@dataclass
class Modes:
    """The caller's ``stream_mode`` and ``subgraphs``, and the final state as chunks pass."""

    asked: str | list[str] | None
    subgraphs: bool = False
    final: Any = field(default=None, init=False)

    @classmethod
    def of(cls, kwargs: dict[str, Any]) -> Modes:
        """The modes from the caller's keywords (``stream_mode`` taken out of them)."""
        return cls(kwargs.pop("stream_mode", None), bool(kwargs.get("subgraphs", False)))

    def streamed(self, default: str) -> list[str]:
        """The modes the graph streams: the caller's (or the graph's ``default``), and values."""
        asked = self.asked if self.asked is not None else default
        modes = [asked] if isinstance(asked, str) else list(asked)
        return modes if VALUES in modes else [*modes, VALUES]

    def hand_back(self, chunk: Any, default: str) -> tuple[bool, Any]:
        """Whether the caller asked for ``chunk``, and the chunk in the caller's shape."""
        if self.subgraphs:
            namespace, mode, data = chunk
        else:
            namespace, (mode, data) = (), chunk
        if mode == VALUES and not namespace:
            self.final = data
        asked = self.asked if self.asked is not None else default
        if isinstance(asked, str):
            if mode != asked:
                return False, None
            return True, (namespace, data) if self.subgraphs else data
        if mode not in asked:
            return False, None
        return True, (namespace, mode, data) if self.subgraphs else (mode, data)
