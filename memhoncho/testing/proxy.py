"""A small TCP proxy of the tests' own: a worker's connection to the broker or the database
goes through it, and ``cut()`` ends every connection at once (as a network fault does)
without touching the server behind it.
"""

from __future__ import annotations

import socket
import threading

BUFFER = 65536  # bytes per read


class TcpProxy:
    """Listens on a free port of 127.0.0.1 and forwards each connection to ``target``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self.cuts = 0  #: connections ended by ``cut``
        self.port = 0
        self._listen()

    def _listen(self) -> None:
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", self.port))
        self._listener.listen(128)
        self.port = int(self._listener.getsockname()[1])
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="tcp-proxy").start()

    def down(self) -> None:
        """The server gone from the network: every connection cut, new ones refused."""
        self.close()

    def up(self) -> None:
        """Back on the same port after ``down``."""
        self._listen()

    def url_for(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's."""
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        auth = parts.netloc.rpartition("@")[0]
        netloc = f"{auth}@127.0.0.1:{self.port}" if auth else f"127.0.0.1:{self.port}"
        return parts._replace(netloc=netloc).geturl()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()  # the server is down: refused, as it would be
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(BUFFER):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            self._close(source)
            self._close(sink)

    def _close(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()

    def cut(self) -> int:
        """End every connection now (both ends see a reset); new ones are still accepted."""
        with self._lock:
            victims = list(self._open)
        for sock in victims:
            try:  # RST rather than FIN: the peer sees the link broken, not a polite close
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
            except OSError:
                pass
            self._close(sock)
        self.cuts += len(victims) // 2
        return len(victims) // 2

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.cut()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
