"""Drive a Honcho stand-in over HTTP, from another process: faults, state, reset, config.

Workers under test and ``memhoncho stand-in --port N`` run the stand-in elsewhere; this
client speaks its ``/_standin/*`` control endpoints with the standard library only.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any
from urllib.parse import urlencode

CONTROL_PREFIX = "/_standin"


class StandInControl:
    """Drive a stand-in running in another process (a worker's, or ``memhoncho stand-in``)."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _call(
        self, method: str, action: str, body: Any = None, query: dict[str, str] | None = None
    ) -> Any:
        target = f"{self.url}{CONTROL_PREFIX}/{action}"
        if query:
            target += "?" + urlencode(query)
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            target, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310
            return json.loads(response.read() or b"null")

    def add_fault(self, kind: str, **options: Any) -> dict[str, Any]:
        return dict(self._call("POST", "faults", {"kind": kind, **options})["fault"])

    def clear_faults(self) -> None:
        self._call("DELETE", "faults")

    def reset(self) -> None:
        self._call("POST", "reset", {})

    def configure(self, **settings: Any) -> dict[str, Any]:
        return dict(self._call("POST", "config", settings))

    def state(self) -> dict[str, Any]:
        return dict(self._call("GET", "state"))

    def messages(self, workspace: str, session_id: str) -> list[dict[str, Any]]:
        sessions = self.state()["workspaces"].get(workspace, {}).get("sessions", {})
        return list(sessions.get(session_id, {}).get("messages", []))

    def request_count(self, path_contains: str | None = None, method: str | None = None) -> int:
        query = {k: v for k, v in {"path_contains": path_contains, "method": method}.items() if v}
        return int(self._call("GET", "requests", query=query)["count"])
