"""memhoncho as a user installs it: run by ``scripts/plain-install`` with the python of a fresh
venv that holds only the wheel (and one extra, where a check says so), never the test extras.

Each check drives the production path with the commands a user runs (``memhoncho init``,
``celery -A memhoncho.celery_app worker``, ``memhoncho relay``, ``memhoncho capture``,
``Host``, ``memhoncho audit``, ``memhoncho mcp``) against the Honcho stand-in over HTTP, and
exits non-zero naming what failed. It imports nothing a plain install lacks (no pytest).

    python scripts/plain_install.py modules [EXTRA]   import every module (of EXTRA's group)
    python scripts/plain_install.py help              --help of every command, as processes
    python scripts/plain_install.py deliver redis|rabbitmq|postgres
    python scripts/plain_install.py mcp
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import pkgutil
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
MEMHONCHO = str(BIN / "memhoncho")
DELIVERY_TIMEOUT_S = 60.0  # seconds for every captured message to reach the stand-in
COMMAND_TIMEOUT_S = 120.0  # seconds for one memhoncho command
OWNER = "ana@example.com"
POSTGRES_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"  # trust auth, as .ci/run sets
#: module groups that need an extra (``pip install 'memhoncho[EXTRA]'``); every other module of
#: the package must import on the plain install. ``pytest``: the user's own test runner.
EXTRA_MODULES = {
    "postgres": ("memhoncho.store.migrations",),
    "mcp": ("memhoncho.integrations.mcp",),
    "pydantic-ai": ("memhoncho.integrations.pydantic_ai",),
    "openai-agents": ("memhoncho.integrations.openai_agents",),
    "langgraph": ("memhoncho.integrations.langgraph",),
    "pytest": ("memhoncho.testing.pytest_plugin",),
}
#: modules that run when imported: the command's entry points, and alembic's env script (run by
#: alembic inside its migration context; ``deliver postgres`` runs it through ``db upgrade``)
NOT_IMPORTED = ("memhoncho.__main__", "memhoncho.cli.__main__", "memhoncho.store.migrations.env")


class CheckFailed(Exception):
    """A production path did not do what a user expects of it."""


def say(text: str) -> None:
    print(f"plain-install: {text}", flush=True)


# ---- modules and commands -----------------------------------------------------------------


def _group(module: str) -> str | None:
    for extra, prefixes in EXTRA_MODULES.items():
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return extra
    return None


def check_modules(extra: str | None) -> None:
    """Import every module of the package that needs nothing beyond ``extra`` (None: the
    plain install); a missing dependency fails by the module's and the dependency's name."""
    import memhoncho

    names = [
        m.name
        for m in pkgutil.walk_packages(memhoncho.__path__, "memhoncho.")
        if m.name not in NOT_IMPORTED and _group(m.name) == extra
    ]
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
    if failed or not names:
        raise CheckFailed("modules that do not import:\n  " + "\n  ".join(failed or ["none"]))
    say(f"{len(names)} modules of {'the plain install' if extra is None else extra} import")


def check_help() -> None:
    """``memhoncho <command> --help`` of every command, each as its own process."""
    from memhoncho.cli import parser

    commands = [p.prog.split()[1:] for p in parser._leaves(parser.build())]

    def run(command: list[str]) -> str | None:
        done = subprocess.run(
            [MEMHONCHO, *command, "--help"], capture_output=True, text=True, timeout=60
        )
        if done.returncode != 0 or "usage:" not in done.stdout:
            return f"memhoncho {' '.join(command)} --help: exit {done.returncode}\n{done.stderr}"
        return None

    with ThreadPoolExecutor(max_workers=4) as pool:
        failed = [f for f in pool.map(run, commands) if f]
    if failed:
        raise CheckFailed("\n".join(failed))
    say(f"--help of {len(commands)} commands")


# ---- a deployment: folders, the stand-in, Celery's own processes -------------------------------


def memhoncho(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [MEMHONCHO, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=COMMAND_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise CheckFailed(
            f"memhoncho {' '.join(args)}: exit {done.returncode}\n{done.stdout}{done.stderr}"
        )
    return done.stdout


@contextlib.contextmanager
def deployment(settings: dict[str, Any]) -> Iterator[tuple[Path, dict[str, str], Any]]:
    """A config and data folder pointed at a fresh stand-in with ``settings``; yields the
    root, the environment of a memhoncho process and the stand-in."""
    from memhoncho.testing import HonchoStandIn
    from memhoncho.testing.config import point_at_standin
    from memhoncho.testing.processes import memhoncho_env

    root = Path(tempfile.mkdtemp(prefix="memhoncho-plain-"))
    standin = HonchoStandIn(api_key="plain-install-key", llm=True).start()
    try:
        workspace = "plain-" + os.urandom(4).hex()
        point_at_standin(root / "config", standin, workspace, standin.api_key, **settings)
        env = memhoncho_env(config_dir=root / "config", data_dir=root / "data", api_key=None)
        env["MEMHONCHO_PLAIN_WORKSPACE"] = workspace
        yield root, env, standin
    finally:
        standin.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def processes(env: dict[str, str]) -> Iterator[None]:
    """A Celery worker and beat (``celery -A memhoncho.celery_app``) and the relay."""
    from memhoncho.testing.processes import CeleryProcess, terminate

    worker = CeleryProcess("worker", env, concurrency=2, name="plain-worker")
    beat = CeleryProcess("beat", env, name="plain-beat")
    log = open(Path(env["MEMHONCHO_DATA_DIR"]).parent / "relay.log", "wb")  # noqa: SIM115
    relay = subprocess.Popen([MEMHONCHO, "relay"], env=env, stdout=log, stderr=log)
    try:
        for process in (worker, beat):
            process.start(wait=False)
        try:
            worker.wait_ready()
            beat.wait_ready()
        except RuntimeError as exc:  # it exited at start, or never said it was ready
            raise CheckFailed(str(exc)) from None
        yield
    except BaseException:
        say("worker log:\n" + worker.log_text()[-3000:])
        raise
    finally:
        terminate(relay, timeout_s=20)
        log.close()
        for process in (worker, beat):
            process.stop()


def capture_runs(env: dict[str, str], conversations: int, runs: int) -> dict[str, list[str]]:
    """Half the conversations captured by ``memhoncho capture`` (a process per run, as a hook
    runs it), half by ``Host`` in this process; the texts each should hold in Honcho."""
    from memhoncho import Host
    from memhoncho.testing.runs import expected_texts, run_event

    expected = {}
    host = Host(env["MEMHONCHO_CONFIG_DIR"], env["MEMHONCHO_DATA_DIR"])
    try:
        for n in range(conversations):
            conversation = f"plain-{n}"
            for i in range(runs):
                event = run_event(conversation, i, OWNER)
                if n % 2:
                    answer = json.loads(memhoncho(env, "capture", stdin=json.dumps(event)))
                    status = answer.get("status")
                else:
                    status = host.capture(event).status
                if status != "captured":
                    raise CheckFailed(f"{conversation} run {i}: capture answered {status}")
            expected[conversation] = expected_texts(conversation, runs)
    finally:
        host.close(10)
    return expected


def wait_delivered(env: dict[str, str], standin: Any, expected: dict[str, list[str]]) -> None:
    from memhoncho import ids

    workspace = env["MEMHONCHO_PLAIN_WORKSPACE"]
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    held: dict[str, list[str]] = {}
    while time.monotonic() < deadline:
        held = {
            c: [m["content"] for m in standin.messages(workspace, ids.session_id(workspace, c))]
            for c in expected
        }
        if held == expected:
            return
        time.sleep(0.1)
    wrong = {c: len(held.get(c, [])) for c in expected if held.get(c) != expected[c]}
    raise CheckFailed(f"not delivered in order, once, in {DELIVERY_TIMEOUT_S:.0f} s: {wrong}")


def check_deliver(broker: str) -> None:
    """Captures through ``memhoncho capture`` and ``Host`` reach Honcho through a worker on
    ``broker`` (redis, rabbitmq; postgres: the PostgreSQL store on Redis), then audit."""
    with servers(broker) as settings, deployment(settings) as (_, env, standin):
        if "store_url" in settings:
            memhoncho(env, "db", "upgrade")
        memhoncho(env, "init")
        with processes(env):
            started = time.monotonic()
            expected = capture_runs(env, conversations=4, runs=3)
            wait_delivered(env, standin, expected)
            took = time.monotonic() - started
        report = json.loads(memhoncho(env, "audit", "--json"))
        if report.get("ok") is not True:
            raise CheckFailed(f"memhoncho audit found damage: {report}")
        count = sum(len(texts) for texts in expected.values())
        say(f"{broker}: {count} of {count} messages delivered in {took:.1f} s; audit exit 0")


@contextlib.contextmanager
def servers(broker: str) -> Iterator[dict[str, Any]]:
    """The settings of a broker (and store) of this check's own: a private Redis, a virtual
    host of RabbitMQ, a database of PostgreSQL, each removed afterwards."""
    if broker == "rabbitmq":
        from memhoncho.testing import rabbitmq

        if not rabbitmq.reachable(rabbitmq.DEFAULT_SERVER) or not shutil.which("rabbitmqctl"):
            raise CheckFailed("RabbitMQ is not running on 127.0.0.1:5672 (.ci/run starts it)")
        with rabbitmq.private_vhost() as url:
            yield {"broker_url": url}
        return
    from memhoncho.testing.redis_place import session_place

    with session_place() as place:
        if not place.url:
            raise CheckFailed(f"no Redis for the check: {place.reason}")
        if broker == "redis":
            yield {"broker_url": place.url}
            return
        from memhoncho.testing import postgres

        url = os.environ.get("MEMHONCHO_TEST_POSTGRES_URL", POSTGRES_SERVER)
        with postgres.private_database(url, upgrade=False) as database:
            yield {"broker_url": place.url, "store_url": database}


# ---- MCP ------------------------------------------------------------------------------------


def check_mcp() -> None:
    """``memhoncho mcp`` over stdio, driven by the official SDK's client: the tools listed, a
    save answered once it is durable, delivered by a worker, then found by search."""
    import anyio

    with deployment({}) as (_, env, standin):
        memhoncho(env, "init")
        with processes(env):
            saved = anyio.run(_mcp_session, env)
            wait_delivered(env, standin, saved)
    say("mcp: tools listed, a save delivered once, recall answered")


async def _mcp_session(env: dict[str, str]) -> dict[str, list[str]]:
    from mcp import ClientSession, StdioServerParameters, stdio_client

    from memhoncho.integrations.mcp import scope

    params = StdioServerParameters(command=MEMHONCHO, args=["mcp", "--owner", OWNER], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        names = {tool.name for tool in (await session.list_tools()).tools}
        if not {"honcho_save", "honcho_search", "honcho_chat", "honcho_remember"} <= names:
            raise CheckFailed(f"memhoncho mcp lists {sorted(names)}")
        turn = {"user": "plain question", "assistant": "plain answer", "conversation_id": "m"}
        for _ in range(2):  # the second is its retry: a duplicate
            result = await session.call_tool("honcho_save", turn)
            if result.is_error:
                raise CheckFailed(f"honcho_save: {result.content}")
        chat = await session.call_tool("honcho_chat", {"query": "What was asked?"})
        if chat.is_error:
            raise CheckFailed(f"honcho_chat: {chat.content}")
    return {scope.scoped(OWNER, "m"): ["plain question", "plain answer"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="check", required=True)
    modules = sub.add_parser("modules")
    modules.add_argument("extra", nargs="?", choices=sorted(EXTRA_MODULES))
    sub.add_parser("help")
    sub.add_parser("deliver").add_argument("broker", choices=["redis", "rabbitmq", "postgres"])
    sub.add_parser("mcp")
    args = parser.parse_args()
    started = time.monotonic()
    try:
        if args.check == "modules":
            check_modules(args.extra)
        elif args.check == "help":
            check_help()
        elif args.check == "deliver":
            check_deliver(args.broker)
        else:
            check_mcp()
    except CheckFailed as exc:
        say(f"FAILED ({args.check}): {exc}")
        return 1
    say(f"{args.check} passed in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
