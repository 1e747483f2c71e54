"""The Celery app, its queues, routing and beat table, built from settings when asked for.

Nothing is built at import. ``celery -A memhoncho.celery_app worker|beat|flower`` looks up
``app`` here, and that first look-up builds the process's app (``get_app``) from the settings
of ``MEMHONCHO_CONFIG_DIR`` / ``MEMHONCHO_DATA_DIR``, once the data directory is known to be
an initialised one (``command_app``: else the command ends with exit 2, creating nothing).
The tasks are shared tasks: they bind to whichever app is built, so nothing here imports a
service and nothing cycles.

With no ``broker_url`` memhoncho uses kombu's filesystem transport under the data directory
(one machine, no server); the broker only carries hints, so either choice never risks data.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from celery import Celery
from kombu import Exchange, Queue

from memhoncho import logs, results
from memhoncho.deployment import Deployment, require_initialised
from memhoncho.errors import ConfigError
from memhoncho.settings import Settings
from memhoncho.store.modes import make_dirs
from memhoncho.worker import routing
from memhoncho.worker.embedded_broker import TAKEN_FOLDER_OPTION
from memhoncho.worker.embedded_broker import TRANSPORT as EMBEDDED_TRANSPORT

TASK_TIME_LIMIT_S = 300  # hard limit; far below the broker's visibility timeout
TASK_SOFT_TIME_LIMIT_S = 240
VISIBILITY_TIMEOUT_S = 3600  # Redis: an unacked task is redelivered after this
HOST_CONNECT_TIMEOUT_S = 0.04  # the host never waits long on a broker that is down
EMBEDDED_POLL_S = 0.1  # seconds between the filesystem broker's scans of its queue folder
AMQP_HEARTBEAT_S = 10  # seconds: a cut connection to RabbitMQ is noticed within ~2 beats
BEAT_EXPIRY_FRACTION = 0.9  # a beat task expires just before its next firing

TASK_MODULES = ["memhoncho.worker.tasks"]


def embedded_broker(data_dir: Path) -> tuple[str, dict[str, Any]]:
    """kombu's filesystem transport in ``<data_dir>/broker``: no server, one machine.

    Celery loads it as ``embedded_broker.TRANSPORT``, whose messages appear whole.
    """
    queue_dir = data_dir / "broker" / "queue"
    control_dir = data_dir / "broker" / "control"
    taken_dir = data_dir / "broker" / "taken"
    for folder in (queue_dir, control_dir, taken_dir):
        make_dirs(folder)
    return "filesystem://", {
        "data_folder_in": str(queue_dir),
        "data_folder_out": str(queue_dir),
        "control_folder": str(control_dir),
        TAKEN_FOLDER_OPTION: str(taken_dir),
        "store_processed": False,
        "polling_interval": EMBEDDED_POLL_S,
    }


def result_backend(broker: str, data_dir: Path, store_url: str | None) -> str | type:
    """Where Celery keeps task results (a recall's answer): where every host can poll them.

    Redis keeps them beside the hints. A broker that keeps none a host can poll (RabbitMQ):
    the PostgreSQL store when there is one (``results.celery_store``), else a folder of the
    data directory, which every process of a file-store deployment shares already.
    """
    if routing.is_redis(broker):
        return broker
    from memhoncho.store import is_postgres

    if store_url and is_postgres(store_url):
        from memhoncho.results.celery_store import StoreResultBackend

        return StoreResultBackend
    folder = data_dir / "broker" / "results"
    make_dirs(folder)
    return f"file://{folder}"


def beat_schedule(current: Settings) -> dict[str, dict[str, Any]]:
    """The beat table: name, schedule, task, queue and ``expires`` just under the period."""
    table = [
        ("outbox-sweep", current.sweep_interval_s, routing.SWEEP_TASK),
        ("representation-refresh", current.refresh_interval_s, routing.REFRESH_ALL_TASK),
    ]
    return {
        name: {
            "task": task,
            "schedule": period,
            "options": {
                "queue": routing.MAINTENANCE_QUEUE,
                "expires": period * BEAT_EXPIRY_FRACTION,
            },
        }
        for name, period, task in table
    }


def create_app(deployment: Deployment | None = None, *, role: str = "worker") -> Celery:
    """Build the app from live settings. ``role="host"`` fails fast on a broker that is down."""
    deployment = deployment or Deployment.from_dirs()
    current = deployment.settings()
    transport_options: dict[str, Any] = {}
    backend: str | type | None
    if current.broker_url:
        broker = current.broker_url
        if routing.is_redis(broker):
            transport_options["visibility_timeout"] = VISIBILITY_TIMEOUT_S
        backend = result_backend(broker, deployment.data_dir, current.store_url)
        if role == "monitor" and not routing.is_redis(broker):
            backend = None  # a monitor reads events from the broker; it keeps no results
    else:
        broker, transport_options = embedded_broker(deployment.data_dir)
        results = deployment.data_dir / "broker" / "results"
        make_dirs(results)
        backend = f"file://{results}"
    celery = Celery("memhoncho", broker=broker, backend=backend, include=TASK_MODULES)
    if not current.broker_url:
        celery.conf.broker_transport = EMBEDDED_TRANSPORT
    logs.connect_celery(current.log_format)  # fields on memhoncho's log lines in workers
    exchange = Exchange("memhoncho", type="direct")
    queue_names = routing.all_queues(current.partitions)
    celery.conf.update(
        # Durable queues, persistent messages. On RabbitMQ classic queues, not quorum queues:
        # a hint is re-created from the store whenever one is lost, so replication buys
        # nothing, while quorum queues would need per-consumer prefetch and Celery's native
        # delayed delivery for a retry's countdown, which the direct exchange cannot take
        # (docs/scaling-brokers.md).
        task_queues=[Queue(name, exchange, routing_key=name) for name in queue_names],
        task_default_queue=routing.MAINTENANCE_QUEUE,
        task_default_exchange="memhoncho",
        task_routes=(routing.Router(current.partitions),),
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=TASK_TIME_LIMIT_S,
        task_soft_time_limit=TASK_SOFT_TIME_LIMIT_S,
        broker_transport_options=transport_options,
        broker_connection_retry_on_startup=True,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_expires=3600,
        worker_send_task_events=True,
        task_send_sent_event=True,
        worker_hijack_root_logger=False,
        beat_schedule=beat_schedule(current),
        # RabbitMQ: a worker whose connection is cut finishes the task it runs (a delivery is
        # level-triggered: the redelivered hint finds nothing pending, the fence covers a send
        # in flight) instead of abandoning it half way; heartbeats find a dead link in seconds.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        broker_heartbeat=AMQP_HEARTBEAT_S,
        memhoncho_store_timeout_s=current.store_timeout_s,
        memhoncho_config_dir=str(deployment.config_dir),
        memhoncho_data_dir=str(deployment.data_dir),
        memhoncho_deployment=deployment.fingerprint(),  # doctor finds workers of another one
    )
    if role == "host":
        celery.conf.update(
            broker_connection_timeout=HOST_CONNECT_TIMEOUT_S,
            broker_connection_retry=False,
            broker_connection_max_retries=0,
            broker_pool_limit=4,
        )
        if routing.is_redis(broker):
            celery.conf.broker_transport_options = {
                **transport_options,
                "socket_connect_timeout": HOST_CONNECT_TIMEOUT_S,
                "socket_timeout": 1.0,
                "retry_on_timeout": False,
                "max_retries": 0,
            }
            # The result backend (a recall's answer) is the same Redis: without these, a
            # recall with Redis down retried its subscription for ~19 s instead of failing.
            celery.conf.update(
                redis_socket_connect_timeout=HOST_CONNECT_TIMEOUT_S,
                redis_socket_timeout=1.0,
                redis_retry_on_timeout=False,
                result_backend_transport_options={"retry_policy": {"max_retries": 0}},
            )
        elif routing.is_amqp(broker):
            # One connection attempt: kombu's default retries a refused publish for ~2 s.
            celery.conf.broker_transport_options = {**transport_options, "max_retries": 0}
        private_pools(celery)
    else:
        # Stranded conversations are enqueued again by a thread of each worker (why there:
        # worker/watchdog.py). Only a worker runs its bootsteps; beat and commands do not.
        from memhoncho.worker.watchdog import Watchdog

        celery.steps["worker"].add(Watchdog)
    return celery


def private_pools(celery: Celery) -> None:
    """Give the app its own broker connection and producer pools (kombu's are per process,
    shared by every app with the same URL), so ``close_app`` can close them without touching
    anyone else's. After a fork Celery drops both and falls back to kombu's shared pools."""
    from kombu.pools import ProducerPool

    celery._ensure_after_fork()  # a forked child drops these (Celery's own after-fork hook)
    limit = celery.conf.broker_pool_limit
    connections = celery.connection_for_write().Pool(limit=limit)
    celery._pool = connections
    celery.amqp._producer_pool = ProducerPool(connections, limit=limit)


def close_app(celery: Celery) -> None:
    """Close the app's broker connections now (Celery's own ``close`` only drops the pool)."""
    producers = celery.amqp._producer_pool
    connections = celery._pool
    celery.close()
    for pool in (producers, connections):
        if pool is not None and pool is not _shared_pool(celery, pool):
            pool.force_close_all()


def _shared_pool(celery: Celery, pool: Any) -> Any:
    """Kombu's process-wide pool of the same kind, if ``pool`` is one (never closed here)."""
    from kombu import pools
    from kombu.utils.collections import eqhash

    group = pools.producers if hasattr(pool, "connections") else pools.connections
    return dict.get(group, eqhash(celery.connection_for_write()))


_app: Celery | None = None
_app_lock = threading.Lock()


def get_app() -> Celery:
    """The process's worker, beat or flower app: built from settings on the first call, with
    the task bookkeeping wired (``results``) and memhoncho's tasks registered on it.

    ConfigError for bad settings, NotInitialised for a data directory that is not an
    initialised memhoncho one (a mistyped ``MEMHONCHO_DATA_DIR``): checked before the build,
    which makes the embedded broker's folders, so such a folder is refused, never created.
    """
    global _app
    with _app_lock:
        if _app is None:
            deployment = Deployment.from_dirs()
            require_initialised(deployment.data_dir)
            built = create_app(deployment)
            results.connect(built, routing.TASK_PREFIX)  # task bookkeeping for status and doctor
            import memhoncho.worker.tasks  # noqa: F401  (its shared tasks bind to the app)

            _app = built
        return _app


#: the exit status of a Celery command refused at start: the ``memhoncho`` commands' own
#: ``REFUSED`` (``cli/exits.py``, which sits above this package; a test keeps the two equal)
REFUSED_EXIT = 2


def command_app() -> Celery:
    """``get_app`` for a Celery command (``celery -A memhoncho.celery_app worker|beat|...``).

    The app is the first thing the command builds, before any of Celery's signals
    (``worker_init``, ``beat_init``) fires and before beat opens its schedule file, so this is
    where a worker or beat refuses bad settings or a folder that is not an initialised data
    directory: the error's code and sentence on stderr and exit 2, instead of Celery's
    "Unable to load celery application" and a traceback.
    """
    try:
        if celery_command(sys.argv[1:]) in MONITORS:
            return monitor_app()
        return get_app()
    except ConfigError as exc:
        sys.stderr.write(f"memhoncho: {exc.code}: {exc.message}\n")
        raise SystemExit(REFUSED_EXIT) from None


#: Celery commands that only read the broker (and talk to workers through it)
MONITORS = frozenset({"flower", "events", "inspect", "status", "control", "report"})
#: Celery's options before the command that take a value (``-A memhoncho.celery_app``)
_VALUED = frozenset(
    {"-A", "--app", "-b", "--broker", "--result-backend", "--loader", "--config", "--workdir"}
)


def celery_command(argv: list[str]) -> str | None:
    """The Celery command (``worker``, ``flower``...) in a ``celery`` command line."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in _VALUED:
            skip = True
        elif not word.startswith("-"):
            return word
    return None


def monitor_app() -> Celery:
    """The app of a monitor (``celery -A memhoncho.celery_app flower``, ``events``,
    ``inspect``): it reads only the broker, so on a server broker it starts without an
    initialised data directory (and writes nothing there); on the embedded broker, whose
    queues are in the data directory, a folder that is not one is refused as for a worker."""
    global _app
    with _app_lock:
        if _app is None:
            deployment = Deployment.from_dirs()
            if not deployment.settings().broker_url:
                require_initialised(deployment.data_dir)
            _app = create_app(deployment, role="monitor")
        return _app


def __getattr__(name: str) -> Any:
    """``app`` (what ``celery -A memhoncho.celery_app`` looks up) is built on first access."""
    if name == "app":
        return command_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
