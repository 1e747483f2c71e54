"""compose.yaml: its commands exist, the data volume is shared, Redis persists, partitions split,
every long-running service has a real healthcheck, secrets come from files, Flower is optional.

Docker is not run here; the file is parsed and every command it runs is parsed by the CLI that
would run it (memhoncho's argparse parser, Celery's click commands).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from memhoncho.cli import checks
from memhoncho.cli import parser as cli_parser
from memhoncho.settings import Settings
from memhoncho.worker import routing

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
CELERY_PREFIX = ["celery", "-A", "memhoncho.celery_app"]
CELERY_EXTENSION_COMMANDS = {"flower"}  # installed with the [flower] extra in the image


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def _memhoncho_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose["services"].items()
        if service.get("image") == "memhoncho:local"
    }


def _command(service: dict[str, Any]) -> list[str]:
    """The command a service runs; for a ``sh -c`` guard, the command it ``exec``s."""
    command = service["command"]
    assert isinstance(command, list), "commands are exec-form lists"
    if command[:2] == ["sh", "-c"]:
        script = str(command[2]).replace("$$", "$")
        return shlex.split(script.rsplit("exec ", 1)[1])
    return [str(part) for part in command]


def _celery_params(command: list[str]) -> tuple[str, dict[str, Any]]:
    from celery import Celery
    from celery.bin.base import CLIContext
    from celery.bin.celery import celery as celery_cli

    app = Celery("memhoncho")  # only the command lines are parsed: any app does

    assert command[:3] == CELERY_PREFIX
    sub, rest = command[3], command[4:]
    if sub in CELERY_EXTENSION_COMMANDS:
        return sub, {}
    assert sub in celery_cli.commands, f"celery has no {sub!r} command"
    context = celery_cli.commands[sub].make_context(
        sub, list(rest), obj=CLIContext(app=app, no_color=True, workdir=None)
    )
    return sub, dict(context.params)


def _workers(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = {}
    for name, service in _memhoncho_services(compose).items():
        command = _command(service)
        if command[0] == "celery" and command[3] == "worker":
            found[name] = _celery_params(command)[1]
    return found


def test_every_command_exists_in_memhoncho_or_celery(compose: dict[str, Any]) -> None:
    parser = cli_parser.build()
    services = _memhoncho_services(compose)
    assert len(services) >= 6
    for name, service in services.items():
        command = _command(service)
        if command[0] == "memhoncho":
            args = parser.parse_args(command[1:])  # exits (SystemExit) on an unknown command
            assert args.handler is not None, name
        elif command[:2] == ["python", "-m"]:
            assert importlib.util.find_spec(command[2]) is not None, name
        else:
            _celery_params(command)


def test_every_memhoncho_service_mounts_the_one_data_volume_at_the_data_dir(
    compose: dict[str, Any],
) -> None:
    for name, service in _memhoncho_services(compose).items():
        data_dir = service["environment"]["MEMHONCHO_DATA_DIR"]
        # The named volume, or the host folder MEMHONCHO_DATA names (a host outside compose).
        assert f"${{MEMHONCHO_DATA:-memhoncho-data}}:{data_dir}" in service["volumes"], name
    assert "memhoncho-data" in compose["volumes"]


def redis_script(compose: dict[str, Any]) -> str:
    """The shell script the redis service runs (its password on stdin: never an argument)."""
    command = [str(part) for part in compose["services"]["redis"]["command"]]
    assert command[:2] == ["sh", "-c"] and len(command) == 3
    return command[2]


def test_redis_persists_with_aof_and_never_evicts(compose: dict[str, Any]) -> None:
    first = redis_script(compose).splitlines()[0]
    words = shlex.split(first.split("<<", 1)[0])
    assert words[:4] == ["exec", "docker-entrypoint.sh", "redis-server", "-"]
    options = dict(zip(words[4::2], words[5::2], strict=True))
    assert options["--appendonly"] == "yes"
    assert options["--maxmemory-policy"] == "noeviction"
    assert any(v.endswith(":/data") for v in compose["services"]["redis"]["volumes"])


def test_the_broker_asks_for_a_generated_password_that_no_command_line_shows(
    compose: dict[str, Any],
) -> None:
    """Any local user can read a process's arguments; a password goes through a secret file
    into Redis's stdin and RabbitMQ's environment, and every memhoncho service reads it from
    the same secret (``broker_password_file``); no fixed password anywhere."""
    assert compose["secrets"]["broker_password"] == {"file": "./secrets/broker_password"}
    script = redis_script(compose)
    assert "requirepass $$(cat /run/secrets/broker_password)" in script
    assert "requirepass" not in script.splitlines()[0]  # in the here-document, not argv
    assert "broker_password" in compose["services"]["redis"]["secrets"]
    health = " ".join(str(p) for p in compose["services"]["redis"]["healthcheck"]["test"])
    assert "REDISCLI_AUTH=" in health and " -a " not in health
    rabbit = compose["services"]["rabbitmq"]
    assert "RABBITMQ_DEFAULT_PASS" not in rabbit["environment"]
    assert 'RABBITMQ_DEFAULT_PASS="$$(cat /run/secrets/broker_password)"' in rabbit["command"][2]
    assert "memhoncho:memhoncho@" not in COMPOSE.read_text()
    for name, service in _memhoncho_services(compose).items():
        assert _secret_path(service, "MEMHONCHO_BROKER_PASSWORD_FILE").endswith(
            "broker_password"
        ), name


def test_each_deliver_partition_is_consumed_by_exactly_one_worker(
    compose: dict[str, Any],
) -> None:
    workers = _workers(compose)
    partitions = {
        int(s["environment"]["MEMHONCHO_PARTITIONS"]) for s in _memhoncho_services(compose).values()
    }
    assert len(partitions) == 1, "every service must agree on the partition count"
    (count,) = partitions
    consumers: dict[str, list[str]] = {}
    for name, params in workers.items():
        assert params["queues"], f"{name} must name its queues"
        assert params["task_events"], f"{name} must send task events (-E) for Flower"
        assert not params.get("beat"), f"{name} must not embed a beat"
        for queue in params["queues"]:
            consumers.setdefault(queue, []).append(name)
    for queue in routing.deliver_queues(count):
        assert len(consumers.get(queue, [])) == 1, f"{queue}: {consumers.get(queue)}"
    for queue in (routing.RECALL_QUEUE, routing.MAINTENANCE_QUEUE):
        assert consumers.get(queue), f"nobody consumes {queue}"
    assert set(consumers) <= set(routing.deliver_queues(count)) | {
        routing.RECALL_QUEUE,
        routing.MAINTENANCE_QUEUE,
    }


def test_exactly_one_beat_runs(compose: dict[str, Any]) -> None:
    beats = [
        name
        for name, service in _memhoncho_services(compose).items()
        if _command(service)[:4] == [*CELERY_PREFIX, "beat"]
    ]
    assert beats == ["beat"]
    assert compose["services"]["beat"]["deploy"]["replicas"] == 1


def test_flower_is_behind_a_profile_and_requires_its_credentials(compose: dict[str, Any]) -> None:
    flower = compose["services"]["flower"]
    assert flower["profiles"] == ["flower"]  # a stack without FLOWER_USER starts without it
    script = flower["command"][2]
    assert 'test -n "$$FLOWER_USER" -a -n "$$FLOWER_PASSWORD"' in script  # checked at start
    assert "exit 2" in script and 'FLOWER_BASIC_AUTH="$$FLOWER_USER:$$FLOWER_PASSWORD"' in script
    for service in ("flower", "status", "redis"):
        assert all(p.startswith("127.0.0.1:") for p in compose["services"][service]["ports"])


def _secret_path(service: dict[str, Any], variable: str) -> str:
    path = str(service["environment"][variable])
    assert path.startswith("/run/secrets/"), path
    assert path.removeprefix("/run/secrets/") in service["secrets"], variable
    return path


def test_the_api_key_and_the_status_token_come_from_secret_files(compose: dict[str, Any]) -> None:
    assert set(Settings.model_fields) >= {"api_key_file", "status_token_file"}
    declared = compose["secrets"]
    assert set(declared) == {"honcho_api_key", "status_token", "broker_password"}
    assert all("file" in secret for secret in declared.values())
    for name, service in _memhoncho_services(compose).items():
        environment = service["environment"]
        assert "MEMHONCHO_API_KEY" not in environment, f"{name}: a key in the environment"
        assert "MEMHONCHO_STATUS_TOKEN" not in environment, name
        _secret_path(service, "MEMHONCHO_API_KEY_FILE")
    _secret_path(compose["services"]["status"], "MEMHONCHO_STATUS_TOKEN_FILE")


def test_the_settings_folder_is_mounted_read_only_where_every_service_reads_it(
    compose: dict[str, Any],
) -> None:
    for name, service in _memhoncho_services(compose).items():
        config_dir = service["environment"]["MEMHONCHO_CONFIG_DIR"]
        mounts = [v for v in service["volumes"] if v.split(":")[1:2] == [f"{config_dir}/settings"]]
        assert len(mounts) == 1 and mounts[0].endswith(":ro"), name


def _healthcheck(service: dict[str, Any]) -> list[str]:
    test = [str(part) for part in service["healthcheck"]["test"]]
    if test[0] == "CMD-SHELL":
        assert len(test) == 2
        return shlex.split(test[1])
    assert test[0] == "CMD"
    return test[1:]


def test_each_worker_healthcheck_pings_its_own_node(compose: dict[str, Any]) -> None:
    from celery import Celery
    from celery.bin.base import CLIContext
    from celery.bin.celery import celery as celery_cli

    app = Celery("memhoncho")  # only the command lines are parsed: any app does

    for name, params in _workers(compose).items():
        check = _healthcheck(compose["services"][name])
        assert check[:4] == [*CELERY_PREFIX, "inspect"], name
        context = celery_cli.commands["inspect"].make_context(
            "inspect", check[4:], obj=CLIContext(app=app, no_color=True, workdir=None)
        )
        assert context.params["command"] == "ping"
        # $$ is compose's escape: the container's shell expands $HOSTNAME, Celery's -n %h.
        worker = _command(compose["services"][name])
        node = worker[worker.index("-n") + 1]
        assert node.endswith("@%h") and params["queues"], name
        assert context.params["destination"] == [node.replace("%h", "$$HOSTNAME")]
        assert compose["services"][name]["healthcheck"]["test"][0] == "CMD-SHELL"


def test_beat_flower_and_the_status_server_have_healthchecks_that_exist(
    compose: dict[str, Any],
) -> None:
    parser = cli_parser.build()
    services = compose["services"]
    beat = parser.parse_args(_healthcheck(services["beat"])[1:])
    assert (beat.handler, beat.what) == (checks.healthcheck_command, "beat")
    status = parser.parse_args(_healthcheck(services["status"])[1:])
    assert (status.handler, status.what) == (checks.healthcheck_command, "status")
    served = _command(services["status"])
    assert status.port == int(served[served.index("--port") + 1])

    from flower.urls import handlers
    from flower.views import monitor

    flower = _healthcheck(services["flower"])
    assert flower[:2] == ["python", "-c"]
    compile(flower[2], "flower-healthcheck", "exec")
    port = _command(services["flower"])[-1].removeprefix("--port=")
    assert f"http://127.0.0.1:{port}/healthcheck" in flower[2]
    assert ("/healthcheck", monitor.Healthcheck) in [h for h in handlers if isinstance(h, tuple)]
    for name, service in _memhoncho_services(compose).items():
        if name not in ("host", "store-migrate", "init"):  # one-shots: their exit code
            assert service["healthcheck"]["interval"], name


def test_an_example_host_joins_the_same_volume_and_broker(compose: dict[str, Any]) -> None:
    services = _memhoncho_services(compose)
    host, worker = services["host"], services["worker-deliver-a"]
    assert host["profiles"] == ["host"]
    for key in ("MEMHONCHO_BROKER_URL", "MEMHONCHO_DATA_DIR", "MEMHONCHO_PARTITIONS"):
        assert host["environment"][key] == worker["environment"][key], key
    assert host["volumes"] == worker["volumes"]
    command = _command(host)
    assert command[:2] == ["python", "-m"]
    assert importlib.util.find_spec(command[2]) is not None


def test_the_selfhost_profile_builds_honcho_at_a_tag_with_pgvector(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    selfhost = {n for n, s in services.items() if "selfhost" in s.get("profiles", [])}
    assert selfhost == {"honcho-db", "honcho-api", "honcho-deriver"}
    assert services["honcho-db"]["image"].startswith("pgvector/pgvector:")
    for name in ("honcho-api", "honcho-deriver"):
        context = services[name]["build"]["context"]
        assert context.startswith("https://github.com/plastic-labs/honcho.git#v"), context
    assert "src.deriver" in services["honcho-deriver"]["entrypoint"]
    assert "vector" in compose["configs"]["pgvector-init"]["content"]


def test_the_postgres_profile_runs_the_store_database_and_its_schema_upgrade(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    postgres = {name for name, s in services.items() if "postgres" in s.get("profiles", [])}
    assert postgres == {"store-db", "store-migrate"}
    assert services["store-db"]["image"].startswith("postgres:")
    assert _command(services["store-migrate"]) == ["memhoncho", "db", "upgrade"]
    assert services["store-migrate"]["depends_on"]["store-db"]["condition"] == "service_healthy"
    for name, service in _memhoncho_services(compose).items():  # one setting moves them all
        assert "MEMHONCHO_STORE_URL" in service["environment"], name


def test_the_dockerfile_installs_memhoncho_with_flower_on_python_3_11() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert text.splitlines()[1].startswith("FROM python:3.11-slim")
    assert 'pip install ".[flower,postgres]"' in text
    assert "USER memhoncho" in text


# ---- compose starts without the optional parts configured --------------------------------

PROFILES = [[], ["flower"], ["host"], ["selfhost"], ["postgres"]]
#: ``${NAME}``, ``${NAME:-default}``, ``${NAME-default}``, ``${NAME:?error}``, ``${NAME?error}``
INTERPOLATION = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(:?[-?+])?([^}]*)\}")


def test_no_variable_is_required_to_read_the_file() -> None:
    """Compose interpolates the whole file before it applies profiles: one ``${X:?...}``
    anywhere stops every command, so every variable has a default (or is optional)."""
    found = INTERPOLATION.findall(COMPOSE.read_text())
    assert found
    for name, operator, _ in found:
        assert operator in (":-", "-"), f"${{{name}}} has no default ({operator or 'none'})"


def test_on_the_postgres_profile_every_memhoncho_service_waits_for_the_schema(
    compose: dict[str, Any],
) -> None:
    for name, service in _memhoncho_services(compose).items():
        if name in ("store-migrate", "init"):
            assert "store-migrate" not in service["depends_on"]  # not on itself; init needs none
            continue
        wait = service["depends_on"]["store-migrate"]
        assert wait == {"condition": "service_completed_successfully", "required": False}, name


def test_every_memhoncho_service_waits_for_the_volume_to_be_initialised(
    compose: dict[str, Any],
) -> None:
    """Workers and beat refuse a data directory without its identity (a mistyped one), so the
    one-shot ``memhoncho init`` runs first on a new volume and everything else waits for it."""
    services = _memhoncho_services(compose)
    init = services.pop("init")
    assert _command(init) == ["memhoncho", "init"]
    assert init["depends_on"] == {} and init["restart"] == "no"
    for name, service in services.items():
        if name == "store-migrate":
            continue  # the database's schema: it writes nothing in the data directory
        wait = service["depends_on"]["init"]
        assert wait == {"condition": "service_completed_successfully"}, name


def _docker_compose() -> list[str] | None:
    """``docker compose`` (or ``docker-compose``) where it runs here, else None."""
    for command in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(command[0]) is None:
            continue
        done = subprocess.run([*command, "version"], capture_output=True, check=False)
        if done.returncode == 0:
            return command
    return None


@pytest.mark.parametrize("profiles", PROFILES, ids=lambda p: "+".join(p) or "default")
def test_docker_compose_reads_the_file_for_each_profile_without_optional_variables(
    tmp_path: Path, profiles: list[str]
) -> None:
    """The real check where docker compose is installed (no engine needed: ``config`` only
    reads and interpolates); the rules above stand in for it where it is not."""
    compose_cli = _docker_compose()
    if compose_cli is None:
        pytest.skip("docker compose is not installed: the YAML rules above check the same")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWER_", "MEMHONCHO_"))}
    selected = [arg for profile in profiles for arg in ("--profile", profile)]
    done = subprocess.run(
        [*compose_cli, "-f", str(COMPOSE), *selected, "config", "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
