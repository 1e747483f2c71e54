"""compose.yaml: its commands exist, the data volume is shared, Redis persists, partitions split.

Docker is not run here; the file is parsed and every command it runs is parsed by the CLI that
would run it (memhoncho's argparse parser, Celery's click commands).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from memhoncho import cli, routing

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
    command = service["command"]
    assert isinstance(command, list), "commands are exec-form lists"
    return [str(part) for part in command]


def _celery_params(command: list[str]) -> tuple[str, dict[str, Any]]:
    from celery.bin.base import CLIContext
    from celery.bin.celery import celery as celery_cli

    from memhoncho.celery_app import app

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
    parser = cli._build_parser()
    services = _memhoncho_services(compose)
    assert len(services) >= 6
    for name, service in services.items():
        command = _command(service)
        if command[0] == "memhoncho":
            args = parser.parse_args(command[1:])  # exits (SystemExit) on an unknown command
            assert args.handler is not None, name
        else:
            _celery_params(command)


def test_every_memhoncho_service_mounts_the_one_data_volume_at_the_data_dir(
    compose: dict[str, Any],
) -> None:
    for name, service in _memhoncho_services(compose).items():
        data_dir = service["environment"]["MEMHONCHO_DATA_DIR"]
        assert f"memhoncho-data:{data_dir}" in service["volumes"], name
    assert "memhoncho-data" in compose["volumes"]


def test_redis_persists_with_aof_and_never_evicts(compose: dict[str, Any]) -> None:
    command = [str(part) for part in compose["services"]["redis"]["command"]]
    assert command[0] == "redis-server"
    options = dict(zip(command[1::2], command[2::2], strict=True))
    assert options["--appendonly"] == "yes"
    assert options["--maxmemory-policy"] == "noeviction"
    assert any(v.endswith(":/data") for v in compose["services"]["redis"]["volumes"])


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


def test_flower_and_the_status_server_require_their_credentials(compose: dict[str, Any]) -> None:
    flower = compose["services"]["flower"]["environment"]
    assert ":?" in flower["FLOWER_BASIC_AUTH"]
    status = compose["services"]["status"]
    assert ":?" in status["environment"]["MEMHONCHO_STATUS_TOKEN"]
    for service in ("flower", "status"):
        assert all(p.startswith("127.0.0.1:") for p in compose["services"][service]["ports"])


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
