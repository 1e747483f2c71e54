"""The relay answers only for its own deployment: a ``memhoncho capture`` whose effective settings
differ from the relay's (another store, another size limit, another data directory) is never
answered by the relay; it captures in its own process, where its own settings say.

The relay runs with a fault armed: it SIGKILLs itself on the first capture request it accepts
to handle (``kill-before-capture``). So a relay still alive after a capture proves it never
handled it; the last test shows the fault does fire for a caller with the relay's settings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memhoncho import ids
from memhoncho.capture import relay_server, relay_socket
from memhoncho.capture.relay import POLL_S
from memhoncho.deployment import initialise
from memhoncho.store import close_stores, open_store
from memhoncho.testing.relay import RelayProcess
from memhoncho.testing.runs import run_event

ARMED = {relay_server.FAULT_ENV: relay_server.KILL_BEFORE_CAPTURE}
LOOKS = 8  # looks of the relay it must outlive with its settings broken


def _capture(
    config: Path, data: Path, run: dict[str, object], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMHONCHO_")}
    return subprocess.run(
        [sys.executable, "-m", "memhoncho", "--config-dir", str(config)]
        + ["--data-dir", str(data), "capture"],
        input=json.dumps(run),
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _outbox(data: Path, conversation: str) -> list[str]:
    path = data / "data" / "outbox" / f"{ids.conversation_key(conversation)}.jsonl"
    return path.read_text().splitlines() if path.exists() else []


def _big_run(conversation: str) -> dict[str, object]:
    """A 3.4 KB run: accepted under the default limit, refused under 1024 bytes."""
    run = run_event(conversation, 0)
    run["inputs"][0]["text"] = "word " * 680  # type: ignore[index]
    return run


def test_a_smaller_size_limit_in_the_callers_environment_is_refused_in_its_own_process(
    short_root: Path,
) -> None:
    config, data = short_root / "config", short_root / "data"
    with RelayProcess(config, data, extra_env=ARMED) as relay:
        limited = _capture(
            config, data, _big_run("conv-big"), {"MEMHONCHO_MAX_BATCH_BYTES": "1024"}
        )
        assert relay.proc is not None and relay.proc.poll() is None, "the relay handled it"
    assert limited.returncode == 2, limited.stderr
    assert json.loads(limited.stderr)["code"] == "ERR_CAPTURE_TOO_LARGE"
    assert _outbox(data, "conv-big") == []


def test_another_store_url_in_the_callers_environment_lands_in_that_store(
    short_root: Path, postgres_url: str
) -> None:
    config, data = short_root / "config", short_root / "data"
    with RelayProcess(config, data, extra_env=ARMED) as relay:
        done = _capture(
            config, data, run_event("conv-pg", 0), {"MEMHONCHO_STORE_URL": postgres_url}
        )
        assert relay.proc is not None and relay.proc.poll() is None, "the relay handled it"
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "captured"
    assert _outbox(data, "conv-pg") == []  # not in the relay's file store
    store = open_store(data, postgres_url)
    try:
        assert len(store.pending(ids.conversation_key("conv-pg"), 0)) == 1
    finally:
        close_stores()


def test_another_data_directory_is_captured_there_not_in_the_relays(short_root: Path) -> None:
    config, data, other = short_root / "config", short_root / "data", short_root / "other"
    initialise(other)
    with RelayProcess(config, data, extra_env=ARMED) as relay:
        done = _capture(config, other, run_event("conv-x", 0))
        assert relay.proc is not None and relay.proc.poll() is None, "the relay handled it"
    assert done.returncode == 0, done.stderr
    assert len(_outbox(other, "conv-x")) == 1 and _outbox(data, "conv-x") == []


def test_a_changed_settings_file_after_the_relay_started_still_matches_only_when_equal(
    short_root: Path,
) -> None:
    """Both sides hash the file's bytes at each request: the relay reads settings live, so a
    file changed under it is its settings too; an environment variable is not."""
    config, data = short_root / "config", short_root / "data"
    with RelayProcess(config, data, extra_env={"MEMHONCHO_SEARCH_LIMIT": "5"}) as relay:
        digest_here = relay_socket.settings_digest(str(config), str(data), {})
        mine = relay_socket.settings_digest(str(config), str(data), {"MEMHONCHO_SEARCH_LIMIT": "5"})
        assert digest_here != mine
        header = {"op": "status", "json": True, "settings_digest": digest_here}
        assert relay_socket.request(str(relay.socket_path), str(config), header) is None
        header["settings_digest"] = mine
        answer = relay_socket.request(str(relay.socket_path), str(config), header)
        assert answer is not None and answer[0] == 0


def test_the_armed_relay_does_take_a_caller_with_its_own_settings(short_root: Path) -> None:
    """The control: the fault fires when the relay handles a capture (the command then falls
    back to its own process, exactly once by run id)."""
    config, data = short_root / "config", short_root / "data"
    with RelayProcess(config, data, extra_env=ARMED) as relay:
        done = _capture(config, data, run_event("conv-same", 0))
        assert relay.proc is not None and relay.proc.wait(10) == -9
    assert done.returncode == 0, done.stderr
    assert len(_outbox(data, "conv-same")) == 1


def test_settings_broken_under_a_running_relay_are_refused_as_in_process(
    short_root: Path,
) -> None:
    """The relay reads the same file live: it answers a capture or status with the same
    ERR_CONFIG and exit code the command gives in its own process, and keeps running."""
    config, data = short_root / "config", short_root / "data"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MEMHONCHO_")}
    status = [sys.executable, "-m", "memhoncho", "--config-dir", str(config)]
    status += ["--data-dir", str(data), "status", "--json"]
    with RelayProcess(config, data) as relay:
        (config / "settings").mkdir(parents=True)
        (config / "settings" / "memhoncho.json").write_text('{"partitions": 0,}')
        captured = _capture(config, data, run_event("conv-bad", 0))
        shown = subprocess.run(status, env=clean, capture_output=True, text=True, check=False)
        assert relay.proc is not None
        with pytest.raises(subprocess.TimeoutExpired):  # still serving, several looks later
            relay.proc.wait(timeout=LOOKS * POLL_S)
    for done in (captured, shown):
        assert done.returncode == 2, done.stderr
        assert json.loads(done.stderr)["code"] == "ERR_CONFIG"
        assert "is not valid JSON" in done.stderr
    assert _outbox(data, "conv-bad") == []
