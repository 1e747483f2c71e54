"""Workers whose connections are cut mid-delivery: to RabbitMQ and to PostgreSQL, through TCP
proxies of the test's own (``testing/proxy.py``), while a host captures directly. Nothing
acknowledged is lost, nothing is stored twice, each conversation's order holds; ``audit``
agrees. The shared servers are never touched: a virtual host and a database of the test's own.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from fleet_support import (
    MIXED_FLEET,
    assert_each_conversation_complete_in_order_once,
    capture_concurrently,
    conversations,
    fleet,
    run_audit,
    swept,
    wait_delivered,
)

from memhoncho.capture.host import Host
from memhoncho.deployment import Deployment, initialise
from memhoncho.testing import HonchoStandIn
from memhoncho.testing.config import point_at_standin
from memhoncho.testing.proxy import TcpProxy
from memhoncho.testing.rabbitmq import private_vhost

KEY = "sk-connection-cuts-key"
CUTS = 12  # cuts of each proxy while the host captures and the workers deliver
CUT_GAP_S = (0.3, 1.2)  # seconds between two cuts
pytestmark = [pytest.mark.slow, pytest.mark.standin(api_key=KEY)]


@pytest.fixture
def amqp_url() -> Iterator[str]:
    with private_vhost() as url:
        yield url


def _proxy_to(url: str, default_port: int) -> TcpProxy:
    parts = urlsplit(url)
    return TcpProxy(parts.hostname or "127.0.0.1", parts.port or default_port)


@pytest.mark.timeout(600)
def test_cut_connections_to_rabbitmq_and_postgres_lose_and_duplicate_nothing(
    tmp_path: Path,
    standin: HonchoStandIn,
    workspace_id: str,
    amqp_url: str,
    postgres_url: str,
) -> None:
    names, runs = conversations(12), 40
    host_config, worker_config = tmp_path / "host-config", tmp_path / "worker-config"
    host_data, worker_data = tmp_path / "host-data", tmp_path / "worker-data"
    # the fence: 1 s + 4 s for the stand-in (a thread of this loaded process) to commit a
    # send that timed out, as in fleet_support.settings
    common = {"honcho_timeout_s": 1.0, "send_settle_s": 4.0, "store_timeout_s": 1.0}
    point_at_standin(
        host_config, standin, workspace_id, KEY, broker_url=amqp_url, store_url=postgres_url,
        **common,
    )  # fmt: skip
    broker_proxy, store_proxy = _proxy_to(amqp_url, 5672), _proxy_to(postgres_url, 5432)
    point_at_standin(
        worker_config,
        standin,
        workspace_id,
        KEY,
        broker_url=broker_proxy.url_for(amqp_url),
        store_url=store_proxy.url_for(postgres_url),
        **common,
    )
    initialise(host_data)  # each machine's folder, as `memhoncho init` makes it
    initialise(worker_data)  # (its worker refuses one that is not initialised)
    standin.faults.add("latency_ms", latency_ms=20, count=None, path_contains="/messages")
    deployment = Deployment(host_config, host_data)
    rng = random.Random(20261204)
    with (
        broker_proxy,
        store_proxy,
        Host(host_config, host_data) as host,
        fleet(worker_config, worker_data, MIXED_FLEET),
    ):
        capturing = threading.Thread(
            target=capture_concurrently,
            args=(host, names, runs),
            kwargs={"threads": 2, "pace_s": 0.1},
            daemon=True,
        )
        capturing.start()
        cut = {"broker": 0, "store": 0}
        for n in range(2 * CUTS):
            time.sleep(rng.uniform(*CUT_GAP_S))
            which = "broker" if n % 2 == 0 else "store"
            cut[which] += (broker_proxy if which == "broker" else store_proxy).cut()
        capturing.join()
        wait_delivered(
            standin, deployment, workspace_id, names, runs, redrive=swept(deployment, host)
        )
    print(f"connections cut={cut}")
    assert cut["broker"] >= CUTS and cut["store"] >= CUTS  # each cut ended live connections
    assert_each_conversation_complete_in_order_once(standin, deployment, workspace_id, names, runs)
    audited = run_audit(host_config, host_data)
    assert audited.returncode == 0, audited.stdout[-3000:]
