"""The CLI's global options in any position, log lines that keep their fields, lazy drawing libs."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from memhoncho import cli, logs
from memhoncho.cli import parser as cli_parser
from memhoncho.deployment import initialise


def _record(name: str = "memhoncho.delivery.engine", **extra: object) -> logging.LogRecord:
    record = logging.LogRecord(name, logging.WARNING, __file__, 1, "delivery failed", None, None)
    record.__dict__.update(extra)
    return record


def test_a_text_line_ends_with_its_fields_as_key_value_pairs() -> None:
    formatter = logs.FieldsFormatter(logging.Formatter("%(levelname)s %(message)s"))
    line = formatter.format(
        _record(action="delivery_failed", conversation_key="k-1", code="ERR_HONCHO_UNAVAILABLE")
    )
    assert line == (
        "WARNING delivery failed action=delivery_failed conversation_key=k-1"
        " code=ERR_HONCHO_UNAVAILABLE"
    )


def test_a_value_with_spaces_or_quotes_is_quoted_so_the_tail_stays_splittable() -> None:
    formatter = logs.FieldsFormatter(logging.Formatter("%(message)s"))
    line = formatter.format(_record(stage="list dir", line='GET "/x"', count=3))
    assert line == 'delivery failed stage="list dir" line="GET \\"/x\\"" count=3'


def test_a_json_line_holds_the_message_level_logger_and_every_field() -> None:
    formatter = logs.FieldsFormatter(style=logs.JSON)
    value = json.loads(formatter.format(_record(action="delivery_failed", code="ERR_X")))
    assert value["message"] == "delivery failed" and value["level"] == "WARNING"
    assert value["logger"] == "memhoncho.delivery.engine"
    assert (value["action"], value["code"]) == ("delivery_failed", "ERR_X")


def test_a_field_named_like_a_secret_is_masked() -> None:
    formatter = logs.FieldsFormatter(logging.Formatter("%(message)s"))
    line = formatter.format(_record(api_key="sk-SECRET", status_token="t0k"))
    assert "sk-SECRET" not in line and "t0k" not in line
    assert "api_key=[masked]" in line


def test_other_loggers_lines_are_left_as_their_formatter_wrote_them() -> None:
    formatter = logs.FieldsFormatter(logging.Formatter("%(message)s"))
    assert formatter.format(_record("celery.app.trace", data={"args": "x"})) == "delivery failed"
    as_json = json.loads(logs.FieldsFormatter(style=logs.JSON).format(_record("celery", data=1)))
    assert "data" not in as_json  # Celery's task context may carry task arguments


def test_wrapping_a_handler_twice_keeps_one_fields_formatter(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("memhoncho-test-wrap")
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    try:
        logs.wrap_handlers(logger, logs.TEXT)
        logs.wrap_handlers(logger, logs.JSON)
        assert isinstance(handler.formatter, logs.FieldsFormatter)
        assert not isinstance(handler.formatter.base, logs.FieldsFormatter)
        assert handler.formatter.style == logs.JSON
    finally:
        logger.removeHandler(handler)


def test_the_cli_prints_warnings_with_their_fields(
    config_dir: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["--log-format", "text", "status", "--json"]) == 0
    capsys.readouterr()
    logging.getLogger("memhoncho.somewhere").warning(
        "enqueue failed", extra={"action": "enqueue_failed", "error": "OperationalError"}
    )
    err = capsys.readouterr().err
    assert "enqueue failed action=enqueue_failed error=OperationalError" in err


def test_the_log_format_setting_gives_json_lines_in_the_cli(
    config_dir: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (config_dir / "settings").mkdir(parents=True, exist_ok=True)
    (config_dir / "settings" / "memhoncho.json").write_text('{"log_format": "json"}')
    assert cli.main(["status", "--json"]) == 0
    capsys.readouterr()
    logging.getLogger("memhoncho.somewhere").warning("x", extra={"action": "a"})
    assert json.loads(capsys.readouterr().err.strip().splitlines()[-1])["action"] == "a"


@pytest.mark.parametrize(
    "argv",
    [
        ["--config-dir", "{c}", "--data-dir", "{d}", "status", "--json"],
        ["status", "--json", "--config-dir", "{c}", "--data-dir", "{d}"],
        ["--config-dir", "{c}", "status", "--data-dir", "{d}", "--json"],
    ],
    ids=["before", "after", "mixed"],
)
def test_global_options_work_before_or_after_the_subcommand(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    config, data = tmp_path / "elsewhere-config", tmp_path / "elsewhere-data"
    (config / "settings").mkdir(parents=True)
    (config / "settings" / "memhoncho.json").write_text('{"workspace_id": "ws_elsewhere"}')
    (config / "secrets.json").write_text('{"api-key": "k"}')
    initialise(data)
    args = [a.format(c=config, d=data) for a in argv]
    assert cli.main(args) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["config"]["workspace"] == "ws_elsewhere" and view["config"]["configured"]


def test_an_option_before_the_subcommand_is_not_reset_by_the_subcommand() -> None:
    parsed = cli_parser.build().parse_args(["--data-dir", "/d", "--log-format", "json", "doctor"])
    assert (parsed.data_dir, parsed.log_format, parsed.config_dir) == ("/d", "json", None)


def test_the_drawing_libraries_load_only_in_the_commands_that_draw() -> None:
    """With rich and prometheus_client unimportable, every module still imports."""
    code = (
        "import sys\n"
        "sys.modules['rich'] = None\n"
        "sys.modules['prometheus_client'] = None\n"
        "import memhoncho, memhoncho.cli, memhoncho.logs, memhoncho.cli.doctor\n"
        "import memhoncho.status.view, memhoncho.status.render, memhoncho.status.http\n"
        "import memhoncho.upkeep.sweep, memhoncho.upkeep.replay, memhoncho.cli.progress\n"
        "import memhoncho.cli.imports, memhoncho.imports.runner\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_default_install_brings_flower_prometheus_client_and_rich(data_dir: Path) -> None:
    """`pip install -e .` (the README's first command) is enough for `celery ... flower`
    (on the environment's data directory, initialised: Celery's commands refuse one that is
    not)."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    wanted = {"flower", "prometheus-client", "rich"}
    default = {
        Requirement(r).name.lower().replace("_", "-")
        for r in requires("memhoncho") or []
        if "extra ==" not in r
    }
    assert wanted <= default
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "memhoncho.celery_app", "flower", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "No such command" not in done.stderr, done.stderr
