"""What the Honcho stand-in knows of a peer: conclusions, the representation made of them,
and the chat that answers from them (deterministic: the stored conclusions, plainly).

A conclusion needs embeddings: without them (``embeddings=False``) it is refused with 422, as
by a server without an OpenAI key.
"""

from __future__ import annotations

import copy
from typing import Any

from memhoncho.testing import standin_state as state
from memhoncho.testing.standin_state import (
    CONCLUSION_FILTER_FIELDS,
    DEFAULT_MAX_CONCLUSIONS,
    MAX_CHAT_QUERY_CHARS,
    MAX_CONCLUSION_CHARS,
    MAX_CONCLUSIONS_PER_CALL,
    ApiError,
    Holdings,
)

NO_LLM_CONCLUSIONS = "OpenAI API key is required to embed conclusions"


class PeerMemory(Holdings):
    """The conclusion, representation and chat routes."""

    def create_conclusions(self, ws: str, body: dict[str, Any], *, embeddings: bool) -> Any:
        raw = body.get("conclusions")
        if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_CONCLUSIONS_PER_CALL:
            raise state.invalid(
                ["conclusions"], f"List should have 1..{MAX_CONCLUSIONS_PER_CALL} items", "too_long"
            )
        workspace = self.workspace(ws)
        drafts = []
        for i, item in enumerate(raw):
            item = state.check_dict(item, ["conclusions", i])
            content = item.get("content")
            if not isinstance(content, str) or not 1 <= len(content) <= MAX_CONCLUSION_CHARS:
                raise state.invalid(
                    ["conclusions", i, "content"],
                    f"String should have 1..{MAX_CONCLUSION_CHARS} characters",
                    "string_too_long",
                )
            observer = state.check_id(item.get("observer_id"), ["conclusions", i, "observer_id"])
            observed = state.check_id(item.get("observed_id"), ["conclusions", i, "observed_id"])
            session_id = item.get("session_id")
            if session_id is not None:
                self.session(ws, session_id)
            drafts.append((content, observer, observed, session_id))
        if not embeddings:
            raise ApiError(422, NO_LLM_CONCLUSIONS)
        created = []
        for content, observer, observed, session_id in drafts:
            self._ensure_peer(workspace, observer)
            self._ensure_peer(workspace, observed)
            conclusion = {
                "id": state.new_id(),
                "content": content,
                "observer_id": observer,
                "observed_id": observed,
                "session_id": session_id,
                "workspace_id": ws,
                "level": "explicit",
                "source_ids": None,
                "times_derived": 1,
                "created_at": state.now_iso(),
            }
            workspace.conclusions.append(conclusion)
            created.append(copy.deepcopy(conclusion))
        return created

    def list_conclusions(self, ws: str, query: dict[str, str], body: Any) -> Any:
        page, size, reverse = state.check_page(query)
        filters = (body or {}).get("filters")
        items = [
            c
            for c in self.workspace(ws).conclusions
            if state.matches(c, filters, CONCLUSION_FILTER_FIELDS)
        ]
        return state.paginate(copy.deepcopy(items[::-1] if reverse else items), page, size)

    def delete_conclusion(self, ws: str, cid: str) -> None:
        workspace = self.workspace(ws)
        before = len(workspace.conclusions)
        workspace.conclusions = [c for c in workspace.conclusions if c["id"] != cid]
        if len(workspace.conclusions) == before:
            raise state.not_found("Conclusion")

    def _conclusions_about(
        self, ws: str, observer: str, observed: str, session_id: str | None
    ) -> list[dict[str, Any]]:
        return [
            c
            for c in self.workspace(ws).conclusions
            if c["observer_id"] == observer
            and c["observed_id"] == observed
            and (session_id is None or c["session_id"] == session_id)
        ]

    def _representation(
        self,
        ws: str,
        observer: str,
        observed: str,
        session_id: str | None,
        limit: int | None = None,
    ) -> str:
        found = self._conclusions_about(ws, observer, observed, session_id)
        return "\n".join(c["content"] for c in found[-(limit or DEFAULT_MAX_CONCLUSIONS) :])

    def representation(self, ws: str, pid: str, body: dict[str, Any]) -> dict[str, Any]:
        self.workspace(ws)
        limit = body.get("max_conclusions")
        target = body.get("target") or pid
        return {
            "representation": self._representation(ws, pid, target, body.get("session_id"), limit)
        }

    def chat_answer(self, ws: str, pid: str, body: dict[str, Any]) -> str:
        """The deterministic 'dialectic' answer: the stored conclusions, plainly."""
        self.workspace(ws)
        query = body.get("query")
        if not isinstance(query, str) or not 1 <= len(query) <= MAX_CHAT_QUERY_CHARS:
            raise state.invalid(
                ["query"],
                f"String should have 1..{MAX_CHAT_QUERY_CHARS} characters",
                "string_too_long",
            )
        target = body.get("target") or pid
        found = self._conclusions_about(ws, pid, target, body.get("session_id"))
        if not found:
            return f"Nothing is known about {target} yet."
        return f"What {pid} knows about {target}: " + "; ".join(c["content"] for c in found)
