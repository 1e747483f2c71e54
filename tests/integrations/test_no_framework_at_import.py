"""``import memhoncho`` and the integrations package load no agent framework: each is an extra,
imported only by the module of its own integration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FRAMEWORKS = ("pydantic_ai", "agents", "langgraph", "langchain_core", "openai")


def loaded_after(code: str, cwd: Path) -> list[str]:
    found = f"sorted(m for m in {FRAMEWORKS!r} if m in sys.modules)"
    report = f"import json, sys; print(json.dumps({found}))"
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\n{report}"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_import_memhoncho_and_its_integrations_package_loads_no_framework(tmp_path: Path) -> None:
    code = "import memhoncho, memhoncho.integrations, memhoncho.integrations.bridge; memhoncho.Host"
    assert loaded_after(code, tmp_path) == []


@pytest.mark.parametrize(
    ("module", "framework"),
    [
        ("pydantic_ai", "pydantic_ai"),
        ("openai_agents", "agents"),
        ("langgraph", "langchain_core"),
    ],
)
def test_each_integration_loads_its_own_framework_only(
    tmp_path: Path, module: str, framework: str
) -> None:
    loaded = loaded_after(f"import memhoncho.integrations.{module}", tmp_path)
    assert framework in loaded
    families = ({"pydantic_ai"}, {"agents"}, {"langgraph", "langchain_core"})
    others = set().union(*(f for f in families if framework not in f))
    assert not others & set(loaded)
