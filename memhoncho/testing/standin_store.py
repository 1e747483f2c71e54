"""The Honcho stand-in's operations, one method per route, on the in-memory model.

Each method takes the decoded path ids, query and JSON body and returns the JSON the route
answers, or raises ``ApiError``. Behaviour follows HONCHO.md: get-or-create, sticky session
peer config, insertion order, clone's quirks. Not thread-safe by itself: the server holds
one lock around every call.
"""

from __future__ import annotations

import copy
from typing import Any

from memhoncho.testing.standin_memory import PeerMemory
from memhoncho.testing.standin_state import (
    MAX_CONTENT_CHARS,
    MAX_MESSAGES_PER_CALL,
    MAX_SEARCH_LIMIT,
    MESSAGE_FILTER_FIELDS,
    SESSION_FILTER_FIELDS,
    ApiError,
    Session,
    check_created_at,
    check_dict,
    check_id,
    check_metadata,
    check_page,
    invalid,
    matches,
    new_id,
    not_found,
    now_iso,
    paginate,
    token_count,
)


class HonchoStore(PeerMemory):
    """What each route does to workspaces, peers, sessions and messages (the routes about what
    is known of a peer are ``PeerMemory``'s)."""

    # ------------------------------------------------------------- workspaces

    def get_or_create_workspace(self, body: dict[str, Any]) -> dict[str, Any]:
        ws = check_id(body.get("id"), ["id"])
        metadata = check_metadata(body.get("metadata"), ["metadata"])
        configuration = check_dict(body.get("configuration"), ["configuration"])
        workspace = self._ensure_workspace(ws)
        if body.get("metadata") is not None:
            workspace.metadata = metadata
        workspace.configuration.update(configuration)
        return workspace.wire()

    def update_workspace(self, ws: str, body: dict[str, Any]) -> dict[str, Any]:
        workspace = self._ensure_workspace(check_id(ws, ["workspace_id"]))
        if body.get("metadata") is not None:
            workspace.metadata = check_metadata(body["metadata"], ["metadata"])
        workspace.configuration.update(check_dict(body.get("configuration"), ["configuration"]))
        return workspace.wire()

    # ------------------------------------------------------------------ peers

    def get_or_create_peer(self, ws: str, body: dict[str, Any]) -> dict[str, Any]:
        workspace = self.workspace(ws)
        pid = check_id(body.get("id"), ["id"])
        peer = self._ensure_peer(workspace, pid)
        if body.get("metadata") is not None:
            peer.metadata = check_metadata(body["metadata"], ["metadata"])
        peer.configuration.update(check_dict(body.get("configuration"), ["configuration"]))
        return peer.wire()

    def get_card(self, ws: str, pid: str, query: dict[str, str]) -> dict[str, Any]:
        peer = self.workspace(ws).peers.get(pid)
        if peer is None:
            raise not_found("Peer")
        return {"peer_card": peer.cards.get(query.get("target") or pid)}

    def set_card(self, ws: str, pid: str, query: dict[str, str], body: dict[str, Any]) -> Any:
        card = body.get("peer_card")
        if not isinstance(card, list) or not all(isinstance(x, str) for x in card):
            raise invalid(["peer_card"], "Input should be a list of strings", "list_type")
        peer = self._ensure_peer(self.workspace(ws), check_id(pid, ["peer_id"]))
        peer.cards[query.get("target") or pid] = list(card)
        return {"peer_card": list(card)}

    # --------------------------------------------------------------- sessions

    def get_or_create_session(self, ws: str, body: dict[str, Any]) -> dict[str, Any]:
        sid = check_id(body.get("id"), ["id"])
        metadata = check_metadata(body.get("metadata"), ["metadata"])
        configuration = check_dict(body.get("configuration"), ["configuration"])
        peers = check_dict(body.get("peers"), ["peers"])
        if (ws, sid) in self.deleted_sessions:
            raise ApiError(404, f"Session {sid} not found in workspace {ws}")
        workspace = self._ensure_workspace(check_id(ws, ["workspace_id"]))
        session = workspace.sessions.get(sid)
        if session is None:
            session = Session(
                id=sid,
                workspace_id=ws,
                created_at=now_iso(),
                metadata=metadata,
                configuration=dict(configuration),
            )
            workspace.sessions[sid] = session
        else:
            if body.get("metadata") is not None:
                session.metadata = metadata
            session.configuration = {**session.configuration, **configuration}
        self._join(workspace, session, peers)
        return session.wire()

    def update_session(self, ws: str, sid: str, body: dict[str, Any]) -> dict[str, Any]:
        self.get_or_create_session(ws, {"id": sid})
        session = self.session(ws, sid)
        if body.get("metadata") is not None:
            session.metadata = check_metadata(body["metadata"], ["metadata"])
        session.configuration.update(check_dict(body.get("configuration"), ["configuration"]))
        return session.wire()

    def delete_session(self, ws: str, sid: str) -> dict[str, Any]:
        session = self.session(ws, sid)
        session.is_active = False
        del self.workspace(ws).sessions[sid]
        self.deleted_sessions.add((ws, sid))
        return {"message": "Session deleted"}

    def list_sessions(self, ws: str, query: dict[str, str], body: dict[str, Any]) -> Any:
        page, size, reverse = check_page(query)
        items = [s.wire() for s in self.workspace(ws).sessions.values() if s.is_active]
        items = [s for s in items if matches(s, body.get("filters"), SESSION_FILTER_FIELDS)]
        return paginate(items[::-1] if reverse else items, page, size)

    def add_session_peers(self, ws: str, sid: str, body: Any) -> dict[str, Any]:
        session = self.session(ws, sid)
        self._join(self.workspace(ws), session, check_dict(body, []))
        return session.wire()

    def set_session_peers(self, ws: str, sid: str, body: Any) -> dict[str, Any]:
        session = self.session(ws, sid)
        wanted = check_dict(body, [])
        session.peers = {p: c for p, c in session.peers.items() if p in wanted}
        self._join(self.workspace(ws), session, wanted)
        return session.wire()

    def remove_session_peers(self, ws: str, sid: str, body: Any) -> dict[str, Any]:
        session = self.session(ws, sid)
        for pid in body or []:
            session.peers.pop(pid, None)
        return session.wire()

    def list_session_peers(self, ws: str, sid: str) -> dict[str, Any]:
        workspace, session = self.workspace(ws), self.session(ws, sid)
        items = [workspace.peers[p].wire() for p in session.peers]
        return paginate(items, 1, max(len(items), 1))

    def get_peer_config(self, ws: str, sid: str, pid: str) -> dict[str, Any]:
        config = self.session(ws, sid).peers.get(pid)
        if config is None:
            raise not_found("Session peer")
        return {
            "observe_me": config.get("observe_me"),
            "observe_others": config.get("observe_others"),
        }

    def set_peer_config(self, ws: str, sid: str, pid: str, body: Any) -> None:
        session = self.session(ws, sid)
        if pid not in session.peers:
            raise not_found("Session peer")
        for key, value in check_dict(body, []).items():
            if key not in ("observe_me", "observe_others"):
                raise invalid([key], "Extra inputs are not permitted", "extra_forbidden")
            if value is not None:
                session.peers[pid][key] = bool(value)

    def clone_session(self, ws: str, sid: str, query: dict[str, str]) -> dict[str, Any]:
        # The real server looks the cutoff message and the messages up by session name
        # alone, across workspaces (HONCHO.md, "Clone"): same-named sessions answer 500.
        original = self.session(ws, sid)
        namesakes = [w.sessions[sid] for w in self.workspaces.values() if sid in w.sessions]
        if len(namesakes) > 1:
            raise ApiError(500, "Internal Server Error")
        messages = original.messages
        cutoff = query.get("message_id")
        if cutoff is not None:
            index = next((i for i, m in enumerate(messages) if m["id"] == cutoff), None)
            if index is None:
                raise ApiError(404, "Session not found")
            messages = messages[: index + 1]
        clone = Session(
            id=new_id(),
            workspace_id=ws,
            created_at=now_iso(),
            metadata=copy.deepcopy(original.metadata),
            configuration=copy.deepcopy(original.configuration),
        )
        if not messages:
            return clone.wire()  # never saved: the phantom id
        clone.peers = copy.deepcopy(original.peers)
        for message in messages:
            clone.messages.append(
                {
                    **copy.deepcopy(message),
                    "id": new_id(),
                    "session_id": clone.id,
                    "created_at": now_iso(),
                    "token_count": 0,
                }
            )
        self.workspace(ws).sessions[clone.id] = clone
        return clone.wire()

    def session_context(self, ws: str, sid: str, query: dict[str, str]) -> dict[str, Any]:
        session = self.session(ws, sid)
        budget = int(query["tokens"]) if query.get("tokens") else None
        chosen: list[dict[str, Any]] = []
        used = 0
        for message in reversed(session.messages):
            if budget is not None and used + message["token_count"] > budget:
                break
            used += message["token_count"]
            chosen.append(message)
        target = query.get("peer_target")
        representation: str | None = None
        card: list[str] | None = None
        if target:
            observer = query.get("peer_perspective") or target
            limit = query.get("limit_to_session", "false").lower() == "true"
            representation = self._representation(ws, observer, target, sid if limit else None)
            peer = self.workspace(ws).peers.get(observer)
            card = peer.cards.get(target) if peer else None
        want_summary = query.get("summary", "true").lower() == "true"
        return {
            "id": sid,
            "messages": chosen[::-1],
            "summary": session.summary if want_summary else None,
            "peer_representation": representation,
            "peer_card": card,
        }

    # --------------------------------------------------------------- messages

    def add_messages(self, ws: str, sid: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        raw = body.get("messages")
        if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_MESSAGES_PER_CALL:
            raise invalid(
                ["messages"],
                f"List should have 1..{MAX_MESSAGES_PER_CALL} items",
                "too_long" if isinstance(raw, list) and raw else "too_short",
            )
        drafts = []
        for i, item in enumerate(raw):
            item = check_dict(item, ["messages", i])
            content = item.get("content")
            if not isinstance(content, str):
                raise invalid(["messages", i, "content"], "Input should be a string", "string_type")
            if len(content) > MAX_CONTENT_CHARS:
                raise invalid(
                    ["messages", i, "content"],
                    f"String should have at most {MAX_CONTENT_CHARS} characters",
                    "string_too_long",
                    content,
                )
            peer_id = check_id(item.get("peer_id"), ["messages", i, "peer_id"])
            metadata = check_metadata(item.get("metadata"), ["messages", i, "metadata"])
            created_at = check_created_at(item.get("created_at"), ["messages", i, "created_at"])
            drafts.append((content.replace("\x00", ""), peer_id, metadata, created_at))
        self.get_or_create_session(ws, {"id": sid})
        workspace, session = self.workspace(ws), self.session(ws, sid)
        stored = []
        for content, peer_id, metadata, created_at in drafts:
            self._join(workspace, session, {peer_id: {}})
            message = {
                "id": new_id(),
                "content": content,
                "peer_id": peer_id,
                "session_id": sid,
                "workspace_id": ws,
                "metadata": copy.deepcopy(metadata),
                "created_at": created_at or now_iso(),
                "token_count": token_count(content),
            }
            session.messages.append(message)
            stored.append(copy.deepcopy(message))
        return stored

    def list_messages(self, ws: str, sid: str, query: dict[str, str], body: Any) -> Any:
        page, size, reverse = check_page(query)
        filters = (body or {}).get("filters")
        items = [
            m for m in self.session(ws, sid).messages if matches(m, filters, MESSAGE_FILTER_FIELDS)
        ]
        return paginate(copy.deepcopy(items[::-1] if reverse else items), page, size)

    def get_message(self, ws: str, sid: str, mid: str) -> dict[str, Any]:
        for message in self.session(ws, sid).messages:
            if message["id"] == mid:
                return copy.deepcopy(message)
        raise not_found("Message")

    def update_message(self, ws: str, sid: str, mid: str, body: dict[str, Any]) -> Any:
        for message in self.session(ws, sid).messages:
            if message["id"] == mid:
                message["metadata"] = check_metadata(body.get("metadata"), ["metadata"])
                return copy.deepcopy(message)
        raise not_found("Message")

    def search(self, ws: str, body: dict[str, Any], *, author: str | None = None) -> Any:
        """Lexical search: every query term, case-insensitive, newest first."""
        query = body.get("query")
        if not isinstance(query, str) or not query.strip():
            raise invalid(["query"], "String should have at least 1 character", "string_too_short")
        limit = body.get("limit", 10)
        if not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
            raise invalid(["limit"], f"Input should be 1..{MAX_SEARCH_LIMIT}", "less_than_equal")
        terms = query.lower().split()
        found = []
        for session in self.workspace(ws).sessions.values():
            for message in session.messages:
                if author is not None and message["peer_id"] != author:
                    continue
                text = message["content"].lower()
                if all(t in text for t in terms) and matches(
                    message, body.get("filters"), MESSAGE_FILTER_FIELDS
                ):
                    found.append(message)
        found.sort(key=lambda m: m["created_at"], reverse=True)
        return copy.deepcopy(found[:limit])

    # ------------------------------------------------------------- inspection

    def set_summary(self, ws: str, sid: str, content: str) -> None:
        session = self.session(ws, sid)
        last = session.messages[-1]["id"] if session.messages else ""
        session.summary = {
            "content": content,
            "message_id": last,
            "summary_type": "short",
            "created_at": now_iso(),
            "token_count": token_count(content),
        }

    def message_count(self, ws: str, sid: str | None = None) -> int:
        """The messages the workspace holds (or its session ``sid``), copying nothing."""
        workspace = self.workspaces.get(ws)
        if workspace is None:
            return 0
        return sum(
            len(s.messages) for key, s in workspace.sessions.items() if sid is None or key == sid
        )

    def dump(self, only: str | None = None) -> dict[str, Any]:
        """Every workspace (or only the workspace ``only``) as plain data, deep copies."""
        return {
            ws_id: {
                "metadata": copy.deepcopy(ws.metadata),
                "peers": sorted(ws.peers),
                "conclusions": copy.deepcopy(ws.conclusions),
                "sessions": {
                    sid: {
                        **s.wire(),
                        "peers": copy.deepcopy(s.peers),
                        "messages": copy.deepcopy(s.messages),
                        "summary": copy.deepcopy(s.summary),
                    }
                    for sid, s in ws.sessions.items()
                },
            }
            for ws_id, ws in self.workspaces.items()
            if only is None or ws_id == only
        }
