"""Imports where they are used: one-shot commands and the capture path load no heavy client.

Each check runs in a fresh interpreter, the way an operator or an agent's hook runs them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memhoncho.deployment import initialise
from memhoncho.testing.config import write_api_key, write_settings
from memhoncho.testing.runs import run_event

HEAVY = ("celery", "kombu", "redis", "honcho")
REPORT = "import sys; print(sorted(m for m in {heavy!r} if m in sys.modules))"


def _loaded_after(code: str, cwd: Path) -> list[str]:
    script = f"{code}\n{REPORT.format(heavy=HEAVY)}"
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1].replace("'", '"'))
    return loaded


def test_import_memhoncho_loads_no_celery_kombu_redis_or_honcho(tmp_path: Path) -> None:
    assert (
        _loaded_after("import memhoncho; memhoncho.Host; memhoncho.CaptureResult", tmp_path) == []
    )


def test_memhoncho_status_loads_none_of_them_with_the_embedded_broker(tmp_path: Path) -> None:
    code = "from memhoncho import cli; cli.main(['status', '--json'])"
    assert _loaded_after(code, tmp_path) == []


def test_memhoncho_doctor_help_loads_none_of_them(tmp_path: Path) -> None:
    code = (
        "from memhoncho import cli\n"
        "try:\n    cli.main(['doctor', '--help'])\nexcept SystemExit:\n    pass"
    )
    assert _loaded_after(code, tmp_path) == []


def test_a_host_capture_with_no_key_loads_none_of_them(tmp_path: Path) -> None:
    code = (
        "from memhoncho import Host\n"
        f"with Host({str(tmp_path / 'config')!r}, {str(tmp_path / 'data')!r}, init=True) as host:\n"
        f"    assert host.capture({run_event('c1', 0)!r}).status == 'captured'"
    )
    assert _loaded_after(code, tmp_path) == []


@pytest.mark.parametrize("hints", [False, True])
def test_the_capture_command_loads_none_of_them_even_with_a_broker_configured(
    tmp_path: Path, hints: bool
) -> None:
    config = tmp_path / "config"
    write_settings(config, broker_url="redis://127.0.0.1:9/0")  # nothing listens there
    write_api_key(config, "sk-lazy")
    initialise(tmp_path / "data")
    run = tmp_path / "run.json"
    run.write_text(json.dumps(run_event("c1", 0)))
    argv = ["--config-dir", str(config), "--data-dir", str(tmp_path / "data"), "capture"]
    argv += ["--file", str(run)] + (["--hint"] if hints else [])
    code = f"from memhoncho import cli; assert cli.main({argv!r}) == 0"
    loaded = _loaded_after(code, tmp_path)
    # Without --hint nothing loads; with it the publish loads kombu and Celery, on its thread.
    assert loaded == ([] if not hints else ["celery", "kombu", "redis"])


def _printed(code: str, cwd: Path) -> object:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_memhoncho_status_loads_nothing_of_the_delivery_side(tmp_path: Path) -> None:
    code = (
        "import io, contextlib, json, sys\n"
        "from memhoncho import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    cli.main(['status', '--json'])\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('memhoncho.delivery'))))"
    )
    assert _printed(code, tmp_path) == []


def test_a_capture_builds_the_validators_of_what_it_validates_and_no_others(
    tmp_path: Path,
) -> None:
    code = (
        "import json\n"
        "from memhoncho import Host, models\n"
        f"with Host({str(tmp_path / 'config')!r}, {str(tmp_path / 'data')!r}, init=True) as host:\n"
        f"    assert host.capture({run_event('c1', 0)!r}).status == 'captured'\n"
        "print(json.dumps(sorted(name for name in ('RunEvent', 'CaptureResult', 'Ledger',"
        " 'ForkDecision', 'CloneIntent') if getattr(models, name).__pydantic_complete__)))"
    )
    # A capture with no ledger yet (nothing delivered) reads no ledger, so it builds neither
    # Ledger's validator nor those of the models nested in it.
    assert _printed(code, tmp_path) == ["CaptureResult", "RunEvent"]


@pytest.mark.parametrize("command", [["capture"], ["status"], ["status", "--json"]])
def test_capture_and_status_through_the_relay_load_no_pydantic_settings_or_rich(
    tmp_path: Path, short_root: Path, command: list[str]
) -> None:
    from memhoncho.testing.relay import RelayProcess

    config, data = short_root / "config", short_root / "data"
    run = short_root / "run.json"
    run.write_text(json.dumps(run_event("c1", 0)))
    argv = ["--config-dir", str(config), "--data-dir", str(data), *command]
    if command == ["capture"]:
        argv += ["--file", str(run)]
    code = (
        "import json, sys\nfrom memhoncho import cli\n"
        f"assert cli.main({argv!r}) == 0\n"
        "print(json.dumps(sorted(m for m in ('pydantic', 'memhoncho.settings',"
        " 'memhoncho.capture.host', 'rich', 'argparse', 'memhoncho.status.view')"
        " if m in sys.modules)), file=sys.stderr)"
    )
    with RelayProcess(config, data):
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True
        )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stderr.splitlines()[-1]) == []
