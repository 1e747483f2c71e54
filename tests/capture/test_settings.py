"""Settings and the API key are read live; a bad value is refused by name (ERR_CONFIG)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from memhoncho import settings
from memhoncho.deployment import Deployment
from memhoncho.errors import ConfigError
from memhoncho.testing.config import write_settings

SECRET = "sk-very-secret-value-0123456789"


def _write_secret(config_dir: Path, value: object) -> None:
    (config_dir / settings.SECRETS_FILE).write_text(
        json.dumps({settings.API_KEY_SECTION: value}), encoding="utf-8"
    )


def test_with_no_file_and_no_env_every_setting_has_its_documented_default(
    config_dir: Path,
) -> None:
    current = settings.load(config_dir)
    assert current.workspace_id == "memhoncho"
    assert current.agent_peer_id == "agent"
    assert current.context_tokens == 1200
    assert current.max_message_length == 25_000
    assert current.search_limit == 8
    assert current.tool_preview_length == 500
    assert current.representation_ttl_s == 600
    assert current.outbox_retention_days == 30
    assert current.delivered_batch_window == 200
    assert current.anchor_window == 1000
    assert current.partitions == 8
    assert current.broker_url is None
    assert current.max_batch_bytes == 1024 * 1024
    assert current.max_pending_batches == 10_000


def test_a_changed_settings_file_applies_at_the_next_call_without_restart(
    config_dir: Path,
) -> None:
    deployment = Deployment.from_dirs(config_dir, config_dir / "data")
    assert deployment.settings().search_limit == 8
    write_settings(config_dir, search_limit=3)
    assert deployment.settings().search_limit == 3
    write_settings(config_dir, search_limit=5)
    assert deployment.settings().search_limit == 5
    (config_dir / settings.SETTINGS_FILE).unlink()
    assert deployment.settings().search_limit == 8


def test_invalid_values_are_refused_by_key_name_and_nothing_is_loaded(config_dir: Path) -> None:
    write_settings(
        config_dir,
        search_limit=0,
        partitions="many",
        context_tokens=900,
        workspace_id=SECRET + "/",
    )
    with pytest.raises(ConfigError) as refused:
        settings.load(config_dir)
    message = refused.value.message
    for name in ("search_limit", "partitions", "workspace_id"):
        assert name in message
    assert "context_tokens" not in message  # the valid key is not named
    assert str(config_dir / settings.SETTINGS_FILE) in message
    assert SECRET not in message
    assert refused.value.details["keys"] == ["partitions", "search_limit", "workspace_id"]


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '"text"', ""])
def test_a_settings_file_that_is_not_a_json_object_is_refused_naming_the_file(
    config_dir: Path, content: str
) -> None:
    path = config_dir / settings.SETTINGS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        settings.load(config_dir)
    assert str(path) in refused.value.message
    assert refused.value.details["file"] == str(path)


def test_an_unknown_key_is_refused_with_the_nearest_known_one(config_dir: Path) -> None:
    write_settings(config_dir, brokr_url="redis://127.0.0.1/0", search_limit=4)
    with pytest.raises(ConfigError) as refused:
        settings.load(config_dir)
    assert "unknown key 'brokr_url' (did you mean 'broker_url'?)" in refused.value.message
    write_settings(config_dir, search_limit=4)
    assert settings.load(config_dir).search_limit == 4  # fixed: applies at the next call


def test_an_environment_variable_overrides_the_file(
    config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_settings(config_dir, search_limit=3, partitions=4)
    monkeypatch.setenv("MEMHONCHO_SEARCH_LIMIT", "12")
    current = settings.load(config_dir)
    assert current.search_limit == 12
    assert current.partitions == 4


def test_an_invalid_environment_value_is_refused_naming_the_variable(
    config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_settings(config_dir, partitions=4)
    monkeypatch.setenv("MEMHONCHO_PARTITIONS", "0")
    with pytest.raises(ConfigError) as refused:
        settings.load(config_dir)
    assert refused.value.details == {
        "variable": "MEMHONCHO_PARTITIONS",
        "key": "partitions",
        "reason": "input should be greater than or equal to 1",
        "keys": ["partitions"],
    }


def test_the_stored_secret_comes_first_then_the_environment(
    config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert settings.api_key(config_dir) is None
    monkeypatch.setenv("MEMHONCHO_API_KEY", "from-env")
    assert settings.api_key(config_dir) == "from-env"
    _write_secret(config_dir, "from-file")
    assert settings.api_key(config_dir) == "from-file"
    _write_secret(config_dir, {"value": "from-section"})
    assert settings.api_key(config_dir) == "from-section"


@pytest.mark.parametrize("stored", ["", "   ", 42, None, {"value": ""}, ["x"]])
def test_an_unusable_stored_secret_falls_back_to_the_environment(
    config_dir: Path, monkeypatch: pytest.MonkeyPatch, stored: object
) -> None:
    _write_secret(config_dir, stored)
    monkeypatch.setenv("MEMHONCHO_API_KEY", "from-env")
    assert settings.api_key(config_dir) == "from-env"


def test_a_key_written_after_start_applies_at_the_next_call(config_dir: Path) -> None:
    deployment = Deployment.from_dirs(config_dir, config_dir / "data")
    assert deployment.api_key() is None
    _write_secret(config_dir, SECRET)
    assert deployment.api_key() == SECRET
    _write_secret(config_dir, "rotated")
    assert deployment.api_key() == "rotated"
    (config_dir / settings.SECRETS_FILE).unlink()
    assert deployment.api_key() is None


def test_a_corrupt_secrets_file_warns_without_showing_its_content(
    config_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (config_dir / settings.SECRETS_FILE).write_text('{"api-key": "' + SECRET, encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="memhoncho.settings"):
        assert settings.api_key(config_dir) is None
    with pytest.raises(ConfigError) as refused:
        settings.load(config_dir)
    assert "secrets.json is not valid JSON" in refused.value.message
    assert SECRET not in refused.value.message + caplog.text


def test_dirs_come_from_the_environment_when_not_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMHONCHO_CONFIG_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("MEMHONCHO_DATA_DIR", str(tmp_path / "d"))
    assert settings.config_dir() == tmp_path / "c"
    assert settings.data_dir() == tmp_path / "d"
    assert settings.config_dir(tmp_path / "x") == tmp_path / "x"


def test_an_in_place_rewrite_of_the_same_size_applies_at_the_next_call(config_dir: Path) -> None:
    """Timestamps are coarse: a same-size rewrite within one tick must not be missed."""
    write_settings(config_dir, search_limit=3)
    path = config_dir / settings.SETTINGS_FILE
    for value in (5, 3, 7, 4, 9) * 4:
        with open(path, "r+b") as handle:
            handle.write(json.dumps({"search_limit": value}).encode())
        assert settings.load(config_dir).search_limit == value


def test_an_unchanged_settings_file_is_not_read_again(
    config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_settings(config_dir, search_limit=3)
    (config_dir / settings.SECRETS_FILE).write_text('{"api-key": "k"}', encoding="utf-8")
    time.sleep(settings.RACY_S * 2)  # older than a clock tick: its stat can be trusted
    assert settings.load(config_dir).search_limit == 3
    assert settings.api_key(config_dir) == "k"
    reads: list[Path] = []
    real = settings.files.read_json_object
    monkeypatch.setattr(settings.files, "read_json_object", lambda p: reads.append(p) or real(p))
    for _ in range(5):
        assert settings.load(config_dir).search_limit == 3
        assert settings.api_key(config_dir) == "k"
    assert reads == []
    monkeypatch.setenv("MEMHONCHO_SEARCH_LIMIT", "6")  # the environment is checked every call
    assert settings.load(config_dir).search_limit == 6
