"""``memhoncho config show``: every setting's effective value and where it came from, in the
documented order (flags > environment > file > defaults), with secrets masked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memhoncho import cli
from memhoncho.testing.config import write_api_key, write_settings

SECRET = "sk-config-show-0123456789"


def _shown(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert cli.main([*argv, "config", "show", "--json"]) == 0
    shown: dict[str, object] = json.loads(capsys.readouterr().out)
    return shown


def test_each_setting_says_where_it_came_from_in_precedence_order(
    config_dir: Path,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = write_settings(config_dir, partitions=4, search_limit=3, log_format="json")
    monkeypatch.setenv("MEMHONCHO_SEARCH_LIMIT", "12")
    shown = _shown(capsys, "--log-format", "text")
    settings = shown["settings"]
    assert isinstance(settings, dict)
    assert settings["partitions"] == {"value": 4, "source": f"file {path}"}
    assert settings["search_limit"] == {"value": 12, "source": "env MEMHONCHO_SEARCH_LIMIT"}
    assert settings["log_format"] == {"value": "text", "source": "flag --log-format"}
    assert settings["context_tokens"] == {"value": 1200, "source": "default"}
    assert shown["config_dir"] == {"value": str(config_dir), "source": "env MEMHONCHO_CONFIG_DIR"}
    assert shown["identity"]["deployment_id"]  # type: ignore[index]


def test_secrets_are_masked(
    config_dir: Path,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    write_settings(
        config_dir,
        status_token=SECRET,
        broker_url=f"redis://:{SECRET}@127.0.0.1:6379/0",
    )
    write_api_key(config_dir, SECRET)
    assert cli.main(["config", "show"]) == 0
    text = capsys.readouterr().out
    shown = _shown(capsys)
    assert SECRET not in text + json.dumps(shown)
    settings = shown["settings"]
    assert isinstance(settings, dict)
    assert settings["status_token"]["value"] == "****"
    assert settings["broker_url"]["value"] == "redis://:****@127.0.0.1:6379/0"
    assert shown["api_key"] == {
        "value": "****",
        "source": f"file {config_dir / 'secrets.json'}",
    }


def test_config_show_refuses_what_every_command_refuses(
    config_dir: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_settings(config_dir, brokr_url="redis://x")
    assert cli.main(["config", "show"]) == 2
    assert "did you mean 'broker_url'?" in capsys.readouterr().err
