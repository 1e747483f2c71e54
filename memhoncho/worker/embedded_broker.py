"""The embedded broker: kombu's filesystem transport, with messages that appear whole.

kombu's filesystem ``_put`` opens a message file under its final name and only then writes it,
so a worker listing the folder can take an empty or partial file; the ``JSONDecodeError`` that
follows is unrecoverable to Celery and the worker exits (seen under load in ``memhoncho
demo``). Here a message is written under a name no consumer takes (no ``.<queue>.msg``
suffix) and renamed into place, so a reader finds all of it or nothing. A message that still
does not decode (a hand-made or damaged file) is logged and dropped: the broker carries hints
only, and the sweep re-drives a conversation whose hint was lost. A taken message is moved to
the broker's own ``taken`` folder, never the system temp dir, so nothing leaves the data dir.

kombu's exchange tables (the bindings in the control folder) have the same flaw: a process
creating a table empties it before it locks and writes it, so another process starting at the
same moment reads nothing (``JSONDecodeError``: the worker exits, seen in CI with two workers
starting together) or both write and a binding is lost. Here a table is changed under a lock
file of its own and replaced whole, so a reader needs no lock and never sees half of one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
import uuid
from queue import Empty
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem, virtual
from kombu.transport.filesystem import LOCK_EX, exchange_queue_t, lock, unlock
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

from memhoncho.errors import StoreError
from memhoncho.store import atomic
from memhoncho.store.modes import make_dirs

log = logging.getLogger(__name__)

TRANSPORT = "memhoncho.worker.embedded_broker:Transport"  #: Celery's ``broker_transport`` for it
TAKEN_FOLDER_OPTION = "taken_folder"  #: transport option: where a consumer moves a message


class Channel(filesystem.Channel):
    """Atomic publish, a taken folder inside the broker, and undecodable messages dropped."""

    # kombu's own bases disagree on this signature; this one is filesystem.Channel's.
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        temp = os.path.join(self.data_folder_out, f"writing-{uuid.uuid4().hex}")
        try:
            with open(temp, "wb") as handle:
                handle.write(str_to_bytes(dumps(payload)))
            os.replace(temp, final)  # consumers see the whole message or none of it
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise ChannelError(f"Cannot add a message to {self.data_folder_out!r}") from exc

    def _get(self, queue: Any, timeout: Any = None) -> Any:
        wanted = f"{queue}.msg"
        taken_folder = self.transport_options.get(TAKEN_FOLDER_OPTION) or tempfile.gettempdir()
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.partition(".")[2] != wanted:
                continue
            taken = os.path.join(taken_folder, name)
            try:  # a rename: of competing consumers exactly one takes the message
                shutil.move(os.path.join(self.data_folder_in, name), taken)
            except OSError:
                continue  # another consumer took it first
            try:
                with open(taken, "rb") as handle:
                    payload = handle.read()
                os.remove(taken)
            except OSError as exc:
                raise ChannelError(f"Cannot read a message of queue {queue!r}") from exc
            try:
                return loads(bytes_to_str(payload))
            except ValueError:
                log.warning(
                    "an embedded-broker message did not decode; dropped (the sweep re-drives)",
                    extra={"action": "broker_message_dropped", "queue": queue},
                )
        raise Empty()

    def get_table(self, exchange: Any) -> list[Any]:
        """The exchange's bindings; none while it has no table (``_queue_bind`` writes it), or
        when it does not decode (logged; the next declaration writes it anew)."""
        file = self._exchange_file(exchange)
        try:
            with open(file, "rb") as handle:
                content = handle.read()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"Cannot read the bindings of {exchange!r}") from exc
        try:
            return [exchange_queue_t(*row) for row in loads(bytes_to_str(content))]
        except (ValueError, TypeError):
            log.warning(
                "an embedded-broker exchange table did not decode; read as empty",
                extra={"action": "broker_table_dropped", "file": str(file)},
            )
            return []

    def _queue_bind(self, exchange: Any, routing_key: Any, pattern: Any, queue: Any) -> None:
        file = self._exchange_file(exchange)
        binding = exchange_queue_t(routing_key or "", pattern or "", queue or "")
        try:
            make_dirs(self.control_folder)
            with open(f"{file}.lock", "ab") as guard:
                lock(guard, LOCK_EX)
                try:
                    bindings = self.get_table(exchange)
                    if binding in bindings:
                        return
                    # replaced whole: readers see the old table or the new one
                    table = str_to_bytes(dumps([binding, *bindings]))
                    atomic.write_bytes(file, table, durable=False)
                finally:
                    unlock(guard)
        except (OSError, StoreError) as exc:
            raise ChannelError(f"Cannot write the bindings of {exchange!r}") from exc


#: each control folder's declared exchanges and bindings, shared by the process's connections
_states: dict[str, virtual.BrokerState] = {}
_states_lock = threading.Lock()


class Transport(filesystem.Transport):
    """kombu's filesystem transport with :class:`Channel`, and its bindings kept per folder.

    kombu keeps one ``BrokerState`` for the whole process, whatever the folders: a binding
    declared once (an in-process host's hint on ``memhoncho.deliver.1``) is skipped at every
    later declaration, so a second data directory's control folder never gets it written,
    and a publish there through the named exchange finds no route and is silently dropped.
    Here each control folder has its own state, so each folder's bindings are written to it.
    """

    Channel = Channel

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        folder = os.path.abspath(client.transport_options.get("control_folder", "control"))
        with _states_lock:
            self.state = _states.setdefault(folder, virtual.BrokerState())
