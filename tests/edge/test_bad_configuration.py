"""Bad configuration, as a new user makes it: each case is refused with its exit code and a
message naming what is wrong and what to do, and nothing is written anywhere.

Every case runs ``memhoncho`` in a fresh interpreter with a clean environment (its own HOME, so
the default folders are inside the test's folder too), and the whole folder is compared before
and after: no file created, changed or removed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from memhoncho.deployment import initialise
from memhoncho.testing.runs import run_event

SECRET = "sk-never-shown-0123456789"
SETTINGS = "config/settings/memhoncho.json"
SECRETS = "config/secrets.json"
RUNNER = (
    "import sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    if name:\n"
    "        sys.modules[name] = None  # as if not installed\n"
    "from memhoncho.cli import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


@dataclass(frozen=True)
class Case:
    argv: list[str]
    exit: int
    code: str  #: the ERR_ code printed
    says: tuple[str, ...]  #: each in the message
    files: dict[str, str] = field(default_factory=dict)  #: path under the root -> content
    env: dict[str, str] = field(default_factory=dict)
    data: str = "data"  #: the --data-dir, under the root
    initialised: bool = True  #: the data dir has its identity
    blocked: tuple[str, ...] = ()  #: modules made unimportable (a missing extra)


CAPTURE = ["capture", "--file", "{root}/run.json"]
CASES: dict[str, Case] = {
    "trailing comma": Case(
        CAPTURE,
        2,
        "ERR_CONFIG",
        ("memhoncho.json is not valid JSON", "line 1", "fix the file"),
        files={SETTINGS: '{"store_url": "postgresql://db/memhoncho",}'},
    ),
    "a JSON list": Case(
        ["status"],
        2,
        "ERR_CONFIG",
        ("is not a JSON object (it holds a JSON list)",),
        files={SETTINGS: "[1, 2]"},
    ),
    "an empty file": Case(["sweep"], 2, "ERR_CONFIG", ("is not valid JSON",), files={SETTINGS: ""}),
    "a folder where the file goes": Case(
        ["status", "--json"], 2, "ERR_CONFIG", ("cannot be read",), files={SETTINGS + "/x": ""}
    ),
    "a misspelt key": Case(
        CAPTURE,
        2,
        "ERR_CONFIG",
        ("unknown key 'brokr_url' (did you mean 'broker_url'?)",),
        files={SETTINGS: '{"brokr_url": "redis://127.0.0.1:6379/0"}'},
    ),
    "an unknown key": Case(
        ["doctor"],
        1,  # doctor diagnoses broken settings: a failed check, the others skipped (issue 29)
        "FAIL  settings",
        ("unknown key 'colour'", "docs/configuration.md", "SKIP  store"),
        files={SETTINGS: '{"colour": "blue"}'},
    ),
    "partitions 0": Case(
        ["run"],
        2,
        "ERR_CONFIG",
        ("partitions: input should be greater than or equal to 1", "fix the file"),
        files={SETTINGS: '{"partitions": 0}'},
    ),
    "a word for a number": Case(
        ["status"],
        2,
        "ERR_CONFIG",
        ("partitions: input should be a valid integer",),
        files={SETTINGS: '{"partitions": "many"}'},
    ),
    "a batch limit below its floor": Case(
        CAPTURE,
        2,
        "ERR_CONFIG",
        ("max_batch_bytes: input should be greater than or equal to 1024",),
        files={SETTINGS: '{"max_batch_bytes": 10}'},
    ),
    "a workspace with a slash": Case(
        ["replay"],
        2,
        "ERR_CONFIG",
        ("workspace_id: string should match pattern",),
        files={SETTINGS: '{"workspace_id": "team/a"}'},
    ),
    "a broker of an unknown scheme": Case(
        ["doctor", "--json"],
        1,
        '"verdict": "fail"',
        ("broker_url: must be a Redis or RabbitMQ URL", "not foo://", '"name": "settings"'),
        files={SETTINGS: '{"broker_url": "foo://bar"}'},
    ),
    "a broker without a scheme": Case(
        CAPTURE,
        2,
        "ERR_CONFIG",
        ("broker_url: must be a Redis or RabbitMQ URL", "no scheme"),
        files={SETTINGS: '{"broker_url": "localhost:6379"}'},
    ),
    "a store of an unknown scheme": Case(
        CAPTURE,
        2,
        "ERR_CONFIG",
        ("store_url: must be unset (files) or a postgresql:// URL", "not mysql://"),
        files={SETTINGS: '{"store_url": "mysql://db/memhoncho"}'},
    ),
    "Honcho without http": Case(
        ["audit"],
        2,
        "ERR_CONFIG",
        ("base_url: must be Honcho's http(s) URL",),
        files={SETTINGS: '{"base_url": "honcho:8000"}'},
    ),
    "Honcho over ftp, for the relay": Case(
        ["relay"],
        2,
        "ERR_CONFIG",
        ("base_url: must be Honcho's http(s) URL", "not ftp://"),
        files={SETTINGS: '{"base_url": "ftp://honcho"}'},
    ),
    "the environment against a good file": Case(
        CAPTURE,
        2,
        "ERR_CONFIG",
        ("MEMHONCHO_PARTITIONS: partitions", "unset the variable"),
        files={SETTINGS: '{"partitions": 4}'},
        env={"MEMHONCHO_PARTITIONS": "0"},
    ),
    "a bad broker in the environment": Case(
        ["sweep", "--json"],
        2,
        "ERR_CONFIG",
        ("MEMHONCHO_BROKER_URL: broker_url",),
        env={"MEMHONCHO_BROKER_URL": "foo://bar"},
    ),
    "a flag that is not a boolean": Case(
        ["status"],
        2,
        "ERR_CONFIG",
        ("MEMHONCHO_SEND_FENCE: send_fence: input should be a valid boolean",),
        env={"MEMHONCHO_SEND_FENCE": "maybe"},
    ),
    "patterns that are not a JSON list": Case(
        CAPTURE,
        2,
        "ERR_CONFIG",
        ("MEMHONCHO_REDACT_PATTERNS: redact_patterns", "JSON list"),
        env={"MEMHONCHO_REDACT_PATTERNS": "acct-[0-9]+"},
    ),
    "a pattern that does not compile": Case(
        CAPTURE,
        2,
        "ERR_CONFIG",
        ("redact_patterns", "regular expression"),
        files={SETTINGS: '{"redact_patterns": ["(unclosed"]}'},
    ),
    "a secrets file that is not JSON": Case(
        CAPTURE,
        2,
        "ERR_CONFIG",
        ("secrets.json is not valid JSON",),
        files={SECRETS: '{"api-key": "' + SECRET},
    ),
    "a secrets file holding a list": Case(
        ["doctor"],
        1,
        "FAIL  settings",
        ("secrets.json is not a JSON object", "SKIP  api_key"),
        files={SECRETS: json.dumps([SECRET])},
    ),
    "PostgreSQL without the postgres extra": Case(
        CAPTURE,
        2,
        "ERR_CONFIG",
        ("pip install 'memhoncho[postgres]'",),
        files={SETTINGS: '{"store_url": "postgresql://127.0.0.1:1/memhoncho"}'},
        blocked=("psycopg", "psycopg_pool"),
    ),
    "db upgrade without the postgres extra": Case(
        ["db", "upgrade", "--url", "postgresql://127.0.0.1:1/memhoncho"],
        2,
        "ERR_MISSING_EXTRA",
        ("pip install 'memhoncho[postgres]'",),
        blocked=("alembic", "psycopg", "psycopg_pool"),
    ),
    "a mistyped data dir, capture": Case(
        CAPTURE,
        2,
        "ERR_NOT_INITIALISED",
        ("is not an initialised memhoncho data directory", "memhoncho init", "--init"),
        data="dta",
        initialised=False,
    ),
    "a mistyped data dir, status": Case(
        ["status"],
        2,
        "ERR_NOT_INITIALISED",
        ("dta is not an initialised memhoncho data directory",),
        data="dta",
        initialised=False,
    ),
    "a mistyped data dir, sweep": Case(
        ["sweep"], 2, "ERR_NOT_INITIALISED", ("MEMHONCHO_DATA_DIR",), data="dta", initialised=False
    ),
    "a mistyped data dir, relay": Case(
        ["relay"], 2, "ERR_NOT_INITIALISED", ("memhoncho init",), data="dta", initialised=False
    ),
    "a mistyped data dir, doctor": Case(
        ["doctor", "--json"],
        1,
        "",
        ("is not an initialised memhoncho data directory",),
        data="dta",
        initialised=False,
    ),
    "a data dir that is a file": Case(
        [*CAPTURE, "--init"],
        2,
        "ERR_CONFIG",
        ("run.json is a file: give --data-dir a folder",),
        data="run.json",
        initialised=False,
    ),
    "a run file that is missing": Case(
        ["capture", "--file", "{root}/no-such-run.json"],
        2,
        "ERR_INPUT",
        ("no-such-run.json: no such file or directory",),
    ),
}


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and modification time."""
    found = {}
    for path in root.rglob("*"):
        st = path.lstat()
        found[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return found


def _env(root: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMHONCHO_", "HONCHO_"))}
    env.update(HOME=str(root / "home"), MEMHONCHO_CONFIG_DIR=str(root / "config"), **extra)
    return env


def _memhoncho(
    root: Path, argv: list[str], env: dict[str, str], blocked: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", RUNNER, ",".join(blocked), *argv]
    return subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=120, cwd=root, check=False
    )


@pytest.mark.parametrize("name", list(CASES))
def test_bad_configuration_is_refused_with_its_exit_code_and_message_writing_nothing(
    tmp_path: Path, name: str
) -> None:
    case = CASES[name]
    root = tmp_path
    (root / "home").mkdir()
    (root / "config").mkdir()
    (root / "run.json").write_text(json.dumps(run_event("conv-1", 0)))
    if case.initialised:
        initialise(root / case.data)
    for relative, content in case.files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(content)
    argv = ["--data-dir", str(root / case.data)] + [a.format(root=root) for a in case.argv]
    before = _snapshot(root)
    done = _memhoncho(root, argv, _env(root, case.env), case.blocked)
    said = done.stdout + done.stderr
    assert done.returncode == case.exit, said
    assert case.code in said
    for words in case.says:
        assert words in said, f"{words!r} not in {said!r}"
    assert SECRET not in said
    assert "Traceback" not in said
    after = _snapshot(root)
    if case.argv[0] == "doctor":  # its fsync probe writes and removes a file in the data dir
        before.pop(case.data, None)
        after.pop(case.data, None)
    assert after == before, "the refusal wrote something"


def test_a_port_in_use_is_a_temporary_failure_that_names_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = _memhoncho(tmp_path, ["stand-in", "--port", str(port)], _env(tmp_path, {}))
    assert done.returncode == 3, done.stderr
    assert "ERR_PORT_IN_USE" in done.stderr and "--port" in done.stderr
    assert "Traceback" not in done.stderr


def test_there_are_at_least_25_cases() -> None:
    assert len(CASES) >= 25
