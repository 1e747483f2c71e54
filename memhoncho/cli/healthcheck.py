"""``memhoncho healthcheck beat|relay|status``: one process's liveness, for a container healthcheck.

Narrower than ``doctor`` on purpose: a beat container is healthy when a beat on this host sent
a heartbeat lately, whatever Honcho or the workers do; a status container when its server
answers the status view with the configured token. Exit 0 healthy, 1 not, with one line why.
"""

from __future__ import annotations

import http.client
import socket
import time

from memhoncho.deployment import Deployment

STATUS_TIMEOUT_S = 3.0  # seconds the status server has to answer


def beat(deployment: Deployment) -> tuple[bool, str]:
    """A beat on this host wrote a heartbeat within ``BEAT_STALE_S`` (it writes every 15 s)."""
    from memhoncho import results

    try:
        store = results.store_for(
            deployment.settings().broker_url, deployment.data_dir, deployment.settings().store_url
        )
        beats = store.live_beats(time.time())
    except Exception as exc:
        return False, f"beat heartbeats cannot be read ({type(exc).__name__})"
    mine = [beat_id for beat_id in beats if beat_id.startswith(socket.gethostname() + ":")]
    if not mine:
        return False, f"no beat on this host sent a heartbeat in {results.BEAT_STALE_S:.0f} s"
    return True, f"beat {mine[0]} is alive"


def relay(deployment: Deployment) -> tuple[bool, str]:
    """The outbox relay on this host touched its heartbeat lately (it does every 5 s)."""
    from memhoncho.capture.relay import HEARTBEAT_STALE_S

    path = deployment.layout.relay_heartbeat(socket.gethostname())
    try:
        age = time.time() - path.stat().st_mtime
    except OSError:
        return False, "no outbox relay on this host has run"
    if age > HEARTBEAT_STALE_S:
        return False, f"the outbox relay on this host is silent for {age:.0f} s"
    return True, f"the outbox relay on this host is alive ({age:.0f} s ago)"


def status(deployment: Deployment, port: int, host: str = "127.0.0.1") -> tuple[bool, str]:
    """The status server on ``host:port`` answers the status view (200) to the token."""
    from memhoncho.status.http import STATUS_PATH, status_token

    token = status_token(deployment)
    if token is None:
        return False, "no status token is configured"
    connection = http.client.HTTPConnection(host, port, timeout=STATUS_TIMEOUT_S)
    try:
        connection.request("GET", STATUS_PATH, headers={"Authorization": f"Bearer {token}"})
        answer = connection.getresponse()
        answer.read()
    except OSError as exc:
        return False, f"the status server on port {port} does not answer ({type(exc).__name__})"
    finally:
        connection.close()
    if answer.status != 200:
        return False, f"the status server answered {answer.status}"
    return True, f"the status server on port {port} answers"
