"""A local test double for Honcho's HTTP API, so the real ``honcho-ai`` SDK runs in tests.

``HonchoStandIn`` is not Honcho. It is a small in-memory HTTP server speaking the subset of
Honcho's v3 API that memhoncho uses through SDK 2.7.0, behaving as HONCHO.md describes
(limits, sticky peer config, clone's quirks, no LLM unless asked), with faults to inject.
Drive it from Python (``honcho.faults.add(...)``) or, from another process, over
``/_standin/*`` (see ``StandInControl``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from memhoncho.testing.standin_control import CONTROL_PREFIX, StandInControl
from memhoncho.testing.standin_faults import Fault, FaultPlan
from memhoncho.testing.standin_http import Answer, Handler, Server, routes
from memhoncho.testing.standin_state import ApiError
from memhoncho.testing.standin_store import HonchoStore

__all__ = ["HonchoStandIn", "StandInControl", "serve"]

DEFAULT_CHAT_DELAY_S = 0.05  # seconds before a no-LLM chat answers 500 (the real one: ~8 s)
SHUTDOWN_POLL_S = 0.02  # seconds between the server loop's checks for stop()


class HonchoStandIn:
    """A Honcho test double on 127.0.0.1: ``with HonchoStandIn() as honcho: honcho.url``.

    ``llm`` decides chat (False: 500 after ``chat_delay_s``, stream answers empty);
    ``embeddings`` decides conclusion create (False: 422, as a server without an OpenAI
    key). ``api_key`` set means every API call needs ``Authorization: Bearer <key>``.
    All three may be changed while it runs.
    """

    def __init__(
        self,
        port: int = 0,
        host: str = "127.0.0.1",
        *,
        llm: bool = False,
        embeddings: bool = True,
        chat_delay_s: float = DEFAULT_CHAT_DELAY_S,
        api_key: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.llm = llm
        self.embeddings = embeddings
        self.chat_delay_s = chat_delay_s
        self.api_key = api_key
        self.faults = FaultPlan()
        self._lock = threading.RLock()
        self._store = HonchoStore()
        self._requests: list[tuple[str, str, int]] = []  # method, path, status (0: none)
        self._stopping = threading.Event()
        self._server: Server | None = None
        self._thread: threading.Thread | None = None
        self._routes = routes()

    # -------------------------------------------------------------- lifecycle

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the stand-in is not running; call start() first")
        return f"http://{self.host}:{self.port}"

    def start(self) -> HonchoStandIn:
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = Server((self.host, self.port), Handler)
        self._server.handle = self._handle
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": SHUTDOWN_POLL_S},
            name=f"honcho-standin-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.cut_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> HonchoStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------- inspection

    def sessions(self, workspace: str) -> list[dict[str, Any]]:
        """Every saved session of the workspace, in creation order, with peers and messages."""
        with self._lock:
            dumped = self._store.dump(only=workspace)
        return list(dumped.get(workspace, {}).get("sessions", {}).values())

    def message_count(self, workspace: str, session_id: str | None = None) -> int:
        """The messages the workspace (or one session of it) holds: for a test that polls while
        workers deliver. ``sessions`` deep-copies every message under the lock the server's
        handlers take: 20,000 of them, polled every half second, held up the very deliveries
        being waited for."""
        with self._lock:
            return self._store.message_count(workspace, session_id)

    def messages(self, workspace: str, session_id: str) -> list[dict[str, Any]]:
        """The session's messages in insertion order ([] when there is no such session)."""
        for session in self.sessions(workspace):
            if session["id"] == session_id:
                return list(session["messages"])
        return []

    def plant_messages(
        self, workspace: str, session_id: str, messages: list[dict[str, Any]]
    ) -> None:
        """Replace the session's stored messages (as ``messages`` gave them): damage planted
        for an audit to find, which no API call could make (a gap, a swap)."""
        with self._lock:
            self._store.session(workspace, session_id).messages[:] = [dict(m) for m in messages]

    def peer_config(self, workspace: str, session_id: str, peer_id: str) -> dict[str, Any] | None:
        """The member's session config as stored ({} for an auto-added author), None if absent."""
        for session in self.sessions(workspace):
            if session["id"] == session_id:
                config = session["peers"].get(peer_id)
                return dict(config) if config is not None else None
        return None

    def conclusions(self, workspace: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._store.dump(only=workspace).get(workspace, {}).get("conclusions", []))

    def set_summary(self, workspace: str, session_id: str, content: str) -> None:
        """Store a summary, as a deriver would, for session context to return."""
        with self._lock:
            self._store.set_summary(workspace, session_id, content)

    def request_count(self, path_contains: str | None = None, method: str | None = None) -> int:
        """API requests received (control calls excluded), optionally narrowed."""
        with self._lock:
            return sum(
                1
                for m, p, _ in self._requests
                if (method is None or m == method.upper())
                and (path_contains is None or path_contains in p)
            )

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {
                "workspaces": self._store.dump(),
                "faults": self.faults.list(),
                "requests": [list(r) for r in self._requests],
                "llm": self.llm,
                "embeddings": self.embeddings,
                "chat_delay_s": self.chat_delay_s,
            }

    def reset(self) -> None:
        """Forget every workspace, fault and request."""
        with self._lock:
            self._store = HonchoStore()
            self._requests.clear()
        self.faults.clear()

    # --------------------------------------------------------------- requests

    def _handle(self, method: str, target: str, headers: Any, raw_body: bytes) -> Answer | None:
        parts = urlsplit(target)
        path = parts.path
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        try:
            body = json.loads(raw_body) if raw_body.strip() else None
        except ValueError:
            return Answer(
                422, {"detail": [{"type": "json_invalid", "loc": ["body"], "msg": "JSON"}]}
            )
        if path.startswith(CONTROL_PREFIX):
            return self._control(method, path, query, body)

        with self._lock:
            self._requests.append((method, path, 0))
            index = len(self._requests) - 1
        answer = self._faulted(method, path, query, body, headers)
        with self._lock:
            self._requests[index] = (method, path, answer.status if answer else 0)
        return answer

    def _faulted(
        self, method: str, path: str, query: dict[str, str], body: Any, headers: Any
    ) -> Answer | None:
        latency_s, fault = self.faults.pick(method, path)
        if latency_s:
            self._stopping.wait(latency_s)
        if fault is not None and fault.kind == "late_commit":
            # The client gives up during the hold; the server commits anyway, answering no one.
            self._stopping.wait(fault.sleep_s)
            self._authorized(method, path, query, body, headers)
            return None
        if fault is not None and fault.kind == "trickle":
            answer = self._authorized(method, path, query, body, headers)
            answer.trickle_s = fault.sleep_s
            return answer
        if fault is not None and not fault.commits:
            return self._strike(fault)
        answer = self._authorized(method, path, query, body, headers)
        if fault is not None:
            return self._strike(fault)
        return answer

    def _strike(self, fault: Fault) -> Answer | None:
        if fault.kind in ("http_500", "http_503"):
            status = int(fault.kind[-3:])
            return Answer(status, {"detail": "Injected server error"})
        if fault.kind == "http_429":
            return Answer(
                429,
                {"detail": "Rate limit exceeded"},
                headers={"Retry-After": f"{fault.retry_after_s:g}"},
            )
        if fault.kind in ("timeout_before_commit", "timeout_after_commit"):
            self._stopping.wait(fault.sleep_s)
        return None  # timeouts and drops: close without an answer

    def _authorized(
        self, method: str, path: str, query: dict[str, str], body: Any, headers: Any
    ) -> Answer:
        if self.api_key is not None:
            given = headers.get("Authorization") or ""
            if given != f"Bearer {self.api_key}":
                return Answer(401, {"detail": "Invalid or missing API key"})
        try:
            return self._dispatch(method, path, query, body)
        except ApiError as exc:
            return Answer(exc.status, exc.body(), headers=exc.headers)

    def _dispatch(self, method: str, path: str, query: dict[str, str], body: Any) -> Answer:
        known_path = False
        for route_method, pattern, name, status in self._routes:
            match = pattern.match(path)
            if match is None:
                continue
            known_path = True
            if route_method != method:
                continue
            ids = {k: unquote(v) for k, v in match.groupdict().items()}
            if name == "chat":
                return self._chat(ids, body or {})
            with self._lock:
                if name == "get_or_create_session" and not self._has_session(ids["ws"], body):
                    status = 201  # as Honcho's route: 201 when it created, 200 when it found
                payload = self._call(name, ids, query, body)
            return Answer(status, payload)
        if known_path:
            return Answer(405, {"detail": "Method Not Allowed"})
        return Answer(404, {"detail": "Not Found"})

    def _call(self, name: str, ids: dict[str, str], query: dict[str, str], body: Any) -> Any:
        store = self._store
        ws, sid, pid = ids.get("ws", ""), ids.get("sid", ""), ids.get("pid", "")
        data = body if isinstance(body, dict) else {}
        calls: dict[str, Callable[[], Any]] = {
            "get_or_create_workspace": lambda: store.get_or_create_workspace(data),
            "update_workspace": lambda: store.update_workspace(ws, data),
            "get_or_create_peer": lambda: store.get_or_create_peer(ws, data),
            "list_peers": lambda: self._list_peers(ws, query),
            "get_card": lambda: store.get_card(ws, pid, query),
            "set_card": lambda: store.set_card(ws, pid, query, data),
            "representation": lambda: store.representation(ws, pid, data),
            "peer_search": lambda: store.search(ws, data, author=pid),
            "workspace_search": lambda: store.search(ws, data),
            "get_or_create_session": lambda: store.get_or_create_session(ws, data),
            "list_sessions": lambda: store.list_sessions(ws, query, data),
            "update_session": lambda: store.update_session(ws, sid, data),
            "delete_session": lambda: store.delete_session(ws, sid),
            "clone_session": lambda: store.clone_session(ws, sid, query),
            "session_context": lambda: store.session_context(ws, sid, query),
            "list_session_peers": lambda: store.list_session_peers(ws, sid),
            "add_session_peers": lambda: store.add_session_peers(ws, sid, body),
            "set_session_peers": lambda: store.set_session_peers(ws, sid, body),
            "remove_session_peers": lambda: store.remove_session_peers(ws, sid, body),
            "get_peer_config": lambda: store.get_peer_config(ws, sid, pid),
            "set_peer_config": lambda: store.set_peer_config(ws, sid, pid, body),
            "add_messages": lambda: store.add_messages(ws, sid, data),
            "list_messages": lambda: store.list_messages(ws, sid, query, data),
            "get_message": lambda: store.get_message(ws, sid, ids["mid"]),
            "update_message": lambda: store.update_message(ws, sid, ids["mid"], data),
            "create_conclusions": lambda: store.create_conclusions(
                ws, data, embeddings=self.embeddings
            ),
            "list_conclusions": lambda: store.list_conclusions(ws, query, data),
            "delete_conclusion": lambda: store.delete_conclusion(ws, ids["cid"]),
        }
        return calls[name]()

    def _has_session(self, ws: str, body: Any) -> bool:
        """Whether the get-or-create of ``body`` finds its session (a refused one: True)."""
        sid = body.get("id") if isinstance(body, dict) else None
        workspace = self._store.workspaces.get(ws)
        return not isinstance(sid, str) or (workspace is not None and sid in workspace.sessions)

    def _list_peers(self, ws: str, query: dict[str, str]) -> Any:
        from memhoncho.testing.standin_state import check_page, paginate

        page, size, _ = check_page(query)
        peers = [p.wire() for p in self._store.workspace(ws).peers.values()]
        return paginate(peers, page, size)

    def _chat(self, ids: dict[str, str], body: dict[str, Any]) -> Answer:
        with self._lock:
            answer = self._store.chat_answer(ids["ws"], ids["pid"], body)
        stream = bool(body.get("stream"))
        if not self.llm:
            if stream:  # the real server answers 200 with nothing in it
                return Answer(200, raw=b"", content_type="text/event-stream")
            self._stopping.wait(self.chat_delay_s)
            return Answer(500, {"detail": "Internal Server Error"})
        if not stream:
            return Answer(200, {"content": answer})
        events = [{"delta": {"content": answer}, "done": False}, {"done": True}]
        raw = "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode()
        return Answer(200, raw=raw, content_type="text/event-stream")

    # ---------------------------------------------------------------- control

    def _control(self, method: str, path: str, query: dict[str, str], body: Any) -> Answer:
        action = path[len(CONTROL_PREFIX) :].strip("/")
        data = body if isinstance(body, dict) else {}
        try:
            if (method, action) == ("GET", "state"):
                return Answer(200, self.state())
            if (method, action) == ("GET", "requests"):
                count = self.request_count(query.get("path_contains"), query.get("method"))
                return Answer(200, {"count": count})
            if (method, action) == ("POST", "faults"):
                options = dict(data)
                fault = self.faults.add(options.pop("kind", ""), **options)
                return Answer(200, {"fault": fault.as_dict()})
            if (method, action) == ("DELETE", "faults"):
                self.faults.clear()
                return Answer(200, {"faults": []})
            if (method, action) == ("POST", "reset"):
                self.reset()
                return Answer(200, {"reset": True})
            if (method, action) == ("POST", "config"):
                for key in ("llm", "embeddings", "chat_delay_s", "api_key"):
                    if key in data:
                        setattr(self, key, data[key])
                return Answer(200, {k: v for k, v in self.state().items() if k != "workspaces"})
            if (method, action) == ("POST", "summary"):
                self.set_summary(data["workspace"], data["session_id"], data["content"])
                return Answer(200, {"summary": True})
        except (TypeError, ValueError, KeyError) as exc:
            return Answer(400, {"detail": f"bad control request: {exc}"})
        except ApiError as exc:
            return Answer(exc.status, exc.body())
        return Answer(404, {"detail": "Not Found"})


def serve(port: int, host: str = "127.0.0.1", **options: Any) -> None:
    """Run a stand-in in the foreground until interrupted (``memhoncho stand-in --port N``)."""
    standin = HonchoStandIn(port=port, host=host, **options).start()
    print(f"Honcho stand-in (a test double, not Honcho) listening on {standin.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        standin.stop()
