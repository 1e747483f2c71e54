"""``memhoncho doctor``: checks of a deployment, each with a verdict and what to do about it.

Checks run in order and each stands alone (a failed broker check does not hide the Honcho
check). ``run_checks`` returns them; the CLI prints them and exits non-zero when one failed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memhoncho import results
from memhoncho import settings as settings_module
from memhoncho.cli.exits import count
from memhoncho.deployment import Deployment, require_initialised, serves_another
from memhoncho.errors import ConfigError, MemhonchoError
from memhoncho.store.modes import exposed
from memhoncho.worker import routing

INSPECT_TIMEOUT_S = 2.0  # seconds workers have to answer ``inspect active_queues``
BROKER_TIMEOUT_S = 2.0  # seconds to connect to the broker
HONCHO_TIMEOUT_S = 5.0  # seconds for Honcho to answer the probe
PROBE_FILTER = {"memhoncho_doctor_probe": "1"}  # matches no real session; lists the workspace

PASS = "pass"
FAIL = "fail"
WARN = "warn"
SKIP = "skip"  #: not run: what it needs is broken (its detail says what)

#: the checks after ``settings`` and ``data_dir``, each of which reads the settings
NEEDS_SETTINGS = (
    "api_key",
    "store",
    "relay",
    "broker",
    "workers",
    "beat",
    "stranded",
    "foreign_hints",
    "honcho",
)


@dataclass(frozen=True)
class Check:
    name: str
    verdict: str  #: pass, warn or fail
    detail: str
    action: str = ""  #: what to do when it did not pass

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def check_settings(deployment: Deployment) -> Check:
    try:
        deployment.settings()
    except ConfigError as exc:
        return Check(
            "settings",
            FAIL,
            exc.message,  # names the file (or variable), the key and the reason
            "fix it: nothing captures or delivers under these settings",
        )
    return Check("settings", PASS, "every setting is valid")


def check_key(deployment: Deployment) -> Check:
    if deployment.api_key() is None:
        return Check(
            "api_key",
            FAIL,
            "no Honcho API key is configured; captures wait on disk",
            f'write {{"api-key": "..."}} to {deployment.config_dir / settings_module.SECRETS_FILE} '
            "or set MEMHONCHO_API_KEY",
        )
    for path in _key_files(deployment):
        why = exposed(path)
        if why is not None:
            return Check(
                "api_key",
                FAIL,
                f"{path} holds the Honcho API key and {why}",
                f"chmod 600 {path}",
            )
    return Check("api_key", PASS, "a Honcho API key is configured")


def _key_files(deployment: Deployment) -> list[Path]:
    """The files a key is read from: the secrets file, and ``api_key_file`` when set."""
    found = [deployment.config_dir / settings_module.SECRETS_FILE]
    try:
        named = deployment.settings().api_key_file
    except ConfigError:
        named = None
    if named:
        found.append(Path(named))
    return found


def check_data_dir(deployment: Deployment) -> Check:
    try:  # a mistyped folder is reported, never created
        found = require_initialised(deployment.data_dir)
    except ConfigError as exc:
        return Check(
            "data_dir", FAIL, exc.message, "give the deployment's --data-dir, or memhoncho init"
        )
    # The probe goes where the deployment writes its state, and leaves nothing behind: a
    # diagnosis of a fresh folder must not change what is in it.
    probe_dir = deployment.layout.root / "state"
    if not probe_dir.is_dir():
        probe_dir = deployment.layout.root
    probe = probe_dir / f".doctor-{os.getpid()}.probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"memhoncho doctor\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        dir_fd = os.open(probe_dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return Check(
            "data_dir",
            FAIL,
            f"{deployment.data_dir} is not writable with fsync ({reason})",
            "give every memhoncho process write access to the data dir, on a local disk "
            "or a volume that honours fsync",
        )
    return Check(
        "data_dir",
        PASS,
        f"{deployment.data_dir} (deployment {found['deployment_id']}) is writable and fsync works",
    )


def check_relay(deployment: Deployment) -> Check:
    """An outbox relay beside the workers (``store.relay_watch``, as ``memhoncho status``
    reads it): without one, ``memhoncho capture``'s records wait for the sweep. A failure
    when such records wait now; a warning when none does (a host publishing its own hints
    needs no relay)."""
    from memhoncho.store import relay_watch

    found = relay_watch.watch(deployment.layout)
    if found.running:
        return Check("relay", PASS, "an outbox relay is running on this data directory")
    sweep_s = deployment.settings().sweep_interval_s
    action = "run `memhoncho relay` beside the workers (`memhoncho run` starts one)"
    if found.state == relay_watch.MISSING:
        return Check(
            "relay",
            FAIL,
            f"no outbox relay is running and {count(found.waiting, 'conversation')} captured"
            f" by `memhoncho capture` wait for it (the oldest {found.oldest_wait_s:.0f} s):"
            f" they wait for the sweep (up to {sweep_s:.0f} s)",
            action,
        )
    return Check(
        "relay",
        WARN,
        "no outbox relay is running: records of `memhoncho capture` would wait for the sweep"
        f" (up to {sweep_s:.0f} s)",
        action,
    )


def check_store(deployment: Deployment) -> Check:
    """The files need nothing more than the data dir; the database must answer, at the schema."""
    try:
        store = deployment.store()
        if store.kind == "files":
            return Check("store", PASS, "the data directory's files (one machine)")
        store.read_ledger("memhoncho-doctor-probe")  # connects and checks the schema version
    except MemhonchoError as exc:
        return Check(
            "store",
            FAIL,
            f"the store is not usable: {exc.code}: {exc.message}",
            "start the database or fix store_url; ERR_STORE_SCHEMA: run memhoncho db upgrade",
        )
    return Check("store", PASS, "the PostgreSQL store answers and its schema is current")


def _app(deployment: Deployment) -> Any:
    from memhoncho.celery_app import create_app

    return create_app(deployment, role="worker")


def check_broker(deployment: Deployment, app: Any) -> Check:
    from memhoncho.worker import broker_check

    verdict = broker_check.check(app, BROKER_TIMEOUT_S)
    return Check("broker", PASS if verdict.ok else FAIL, verdict.detail, verdict.fix)


def _results_place(deployment: Deployment) -> str:
    """Where beat heartbeats are kept (``results.store_for``), in the words of its engine."""
    current = deployment.settings()
    if current.store_url:
        return "the store's PostgreSQL"
    if current.broker_url and routing.is_redis(current.broker_url):
        return "the broker (Redis)"
    return f"the data directory {deployment.data_dir}"


def _serves(deployment: Deployment, conf: dict[str, Any]) -> str | None:
    """Why a worker (its ``inspect conf``) serves another deployment than this one, or None."""
    return serves_another(deployment.fingerprint(), conf.get("memhoncho_deployment"))


def check_workers(deployment: Deployment, app: Any) -> Check:
    """Some worker consumes every queue: deliver.N, recall (the tools) and maintenance (sweep)."""
    wanted = routing.all_queues(deployment.settings().partitions)
    try:
        replies = app.control.inspect(timeout=INSPECT_TIMEOUT_S).active_queues() or {}
    except Exception as exc:
        return Check(
            "workers",
            FAIL,
            f"workers could not be asked ({type(exc).__name__})",
            "make the broker reachable, then start workers",
        )
    try:
        confs = app.control.inspect(timeout=INSPECT_TIMEOUT_S).conf(with_defaults=False) or {}
    except Exception:
        confs = {}
    strangers = {
        name: why for name, conf in confs.items() if (why := _serves(deployment, conf or {}))
    }
    if strangers:
        listed = "; ".join(f"{name} serves {why}" for name, why in sorted(strangers.items()))
        return Check(
            "workers",
            FAIL,
            f"workers on this broker serve another deployment: {listed}",
            "give every worker this deployment's data dir and store_url, or a broker of its own",
        )
    consumed = {q["name"] for queues in replies.values() for q in queues or []}
    missing = [q for q in wanted if q not in consumed]
    if missing:
        return Check(
            "workers",
            FAIL,
            f"{len(replies)} worker(s) answered; no worker consumes {', '.join(missing)}",
            "start workers with -Q covering every memhoncho.deliver.N queue "
            "(and memhoncho.recall,memhoncho.maintenance)",
        )
    return Check(
        "workers",
        PASS,
        f"{len(replies)} worker(s) consume all {len(wanted)} queues (deliver, recall, maintenance)",
    )


def check_beat(deployment: Deployment) -> Check:
    try:
        store = results.store_for(
            deployment.settings().broker_url, deployment.data_dir, deployment.settings().store_url
        )
        beats = store.live_beats(time.time())
    except Exception as exc:
        return Check(
            "beat",
            FAIL,
            f"beat heartbeats cannot be read ({type(exc).__name__})",
            f"make {_results_place(deployment)} reachable",
        )
    if len(beats) == 1:
        return Check("beat", PASS, "exactly one beat is running")
    if not beats:
        return Check(
            "beat",
            FAIL,
            "no beat is running: the sweep and refreshes never fire",
            "start exactly one `celery -A memhoncho.celery_app beat`",
        )
    return Check(
        "beat",
        FAIL,
        f"{len(beats)} beats are running ({', '.join(sorted(beats))}): periodic tasks fire twice",
        "stop all but one beat",
    )


def check_honcho(deployment: Deployment) -> Check:
    try:
        from memhoncho.honcho import adapter

        target = deployment.honcho_target(timeout_s=HONCHO_TIMEOUT_S)
        adapter.find_sessions(adapter.read_client(target, HONCHO_TIMEOUT_S), PROBE_FILTER)
    except MemhonchoError as exc:
        return Check(
            "honcho",
            FAIL,
            f"Honcho is not usable: {exc.code}: {exc.message}",
            "check base_url, the API key and the workspace; deliveries retry until it answers",
        )
    except Exception as exc:
        return Check("honcho", FAIL, f"Honcho probe failed ({type(exc).__name__})", "see the logs")
    current = deployment.settings()
    return Check("honcho", PASS, f"Honcho answers and workspace {current.workspace_id!r} is usable")


def run_checks(deployment: Deployment) -> list[Check]:
    checks: list[Check] = []
    steps: list[Callable[[], Check]] = [
        lambda: check_key(deployment),
        lambda: check_data_dir(deployment),
        lambda: check_store(deployment),
        lambda: check_relay(deployment),
    ]
    checks.append(check_settings(deployment))
    if checks[0].verdict == FAIL:  # diagnosed, not refused: what can run without them does
        return [*checks, check_data_dir(deployment), *skipped(NEEDS_SETTINGS, checks[0])]
    for step in steps:
        checks.append(step())
        if checks[-1].name == "data_dir" and checks[-1].verdict == FAIL:
            return checks  # the rest would create files in a folder that is not memhoncho's
    try:
        app = _app(deployment)
    except Exception as exc:
        checks.append(Check("broker", FAIL, f"the Celery app cannot be built ({exc})", "see logs"))
        app = None
    if app is not None:
        try:
            checks.append(check_broker(deployment, app))
            if checks[-1].verdict == PASS:
                checks.append(check_workers(deployment, app))
            else:
                checks.append(
                    Check("workers", FAIL, "not checked: the broker is unreachable", "fix broker")
                )
        finally:
            app.close()
    checks.append(check_beat(deployment))
    checks.append(check_stranded(deployment))
    checks.append(check_foreign_hints(deployment))
    checks.append(check_honcho(deployment))
    return checks


def check_stranded(deployment: Deployment) -> Check:
    """Conversations with pending records and nothing queued or running (``doctor_stranded``)."""
    from memhoncho.cli.doctor_stranded import finding

    verdict, detail, action = finding(deployment)
    return Check("stranded", verdict, detail, action)


def check_foreign_hints(deployment: Deployment) -> Check:
    """Hints a worker got from another deployment (``doctor_foreign``)."""
    from memhoncho.cli.doctor_foreign import finding

    verdict, detail, action = finding(deployment)
    return Check("foreign_hints", verdict, detail, action)


def skipped(names: tuple[str, ...], cause: Check) -> list[Check]:
    """The checks that cannot run because ``cause`` failed, each saying why."""
    reason = f"not checked: it needs the {cause.name}, which failed (see {cause.name})"
    return [Check(name, SKIP, reason) for name in names]


def render(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.verdict.upper():<4}  {c.name:<{width}}  {c.detail}")
        if c.verdict != PASS and c.action:
            lines.append(f"{'':<4}  {'':<{width}}  -> {c.action}")
    return "\n".join(lines)


def failed(checks: list[Check]) -> bool:
    return any(c.verdict == FAIL for c in checks)
