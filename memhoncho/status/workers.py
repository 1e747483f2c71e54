"""The workers on this deployment's broker and whether each serves this deployment.

Each worker publishes what it serves in its Celery conf (``Deployment.fingerprint``); this asks
them all (``inspect conf``, as ``memhoncho doctor`` does) and compares (``serves_another``). A
worker of another data directory or store on a shared broker takes this deployment's hints from
the shared queue names and finds nothing of it to deliver: it is listed, reported, and not
counted as a consumer. A broadcast waits its whole timeout, so a reader kept for repeated reads
(the relay's warm view, ``serve-status``) reuses a census for ``MAX_AGE_S``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from memhoncho.deployment import Deployment, serves_another

ASK_TIMEOUT_S = 0.5  #: seconds workers have to answer; one that does not is not listed
MAX_AGE_S = 10.0  #: seconds a census is reused by a reader kept for repeated reads
FINGERPRINT_KEY = "memhoncho_deployment"  #: the conf key a worker publishes it under

Ask = Callable[[Deployment], dict[str, Any]]


def ask(deployment: Deployment) -> dict[str, Any]:
    """Every answering worker's conf by node name; raises when the broker cannot be reached.

    On the embedded broker, a control folder that does not exist means no worker ever ran
    on it: nobody is asked, and the folders a built app would make are not made by a read."""
    from memhoncho.worker.app import close_app, create_app

    if (
        not deployment.settings().broker_url
        and not (deployment.layout.broker_dir / "control").exists()
    ):
        return {}

    app = create_app(deployment, role="host")  # fails fast on a broker that is down
    try:
        return app.control.inspect(timeout=ASK_TIMEOUT_S).conf(with_defaults=False) or {}
    finally:
        close_app(app)


def census(deployment: Deployment, confs: dict[str, Any]) -> dict[str, Any]:
    """The workers bucket: each worker seen, whether it serves this deployment (None: a worker
    too old to say), and the counts."""
    ours = deployment.fingerprint()
    seen = []
    for name, conf in sorted(confs.items()):
        theirs = (conf or {}).get(FINGERPRINT_KEY)
        other = serves_another(ours, theirs)
        entry: dict[str, Any] = {
            "name": name,
            "this_deployment": None if not isinstance(theirs, dict) else other is None,
        }
        if isinstance(theirs, dict):
            entry.update({k: theirs.get(k) for k in ("data_dir", "deployment_id", "store")})
        if other:
            entry["serves"] = other
        seen.append(entry)
    return {
        "state": "ok",
        "answered": len(seen),
        "this_deployment": sum(1 for w in seen if w["this_deployment"] is not False),
        "other_deployment": sum(1 for w in seen if w["this_deployment"] is False),
        "seen": seen,
    }


def others(bucket: dict[str, Any]) -> set[str]:
    """The node names of the workers that serve another deployment."""
    return {w["name"] for w in bucket.get("seen") or [] if w.get("this_deployment") is False}


class WorkersReader:
    """Asks the workers at most once per ``max_age_s`` (0: at every read)."""

    def __init__(self, ask_workers: Ask = ask, max_age_s: float = 0.0) -> None:
        self.ask_workers = ask_workers
        self.max_age_s = max_age_s
        self._last: tuple[float, dict[str, Any]] | None = None

    def read(self, deployment: Deployment) -> dict[str, Any]:
        now = time.monotonic()
        if self._last is not None and now - self._last[0] < self.max_age_s:
            return self._last[1]
        try:
            bucket = census(deployment, self.ask_workers(deployment))
        except Exception as exc:
            bucket = {
                "state": "degraded",
                "reasons": [f"workers could not be asked ({type(exc).__name__})"],
                "seen": None,
            }
        self._last = (now, bucket)
        return bucket
