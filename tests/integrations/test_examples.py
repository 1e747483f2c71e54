"""Each framework example runs end to end on its own, as a newcomer runs it, and exits 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_TIMEOUT_S = 180  # seconds: a stand-in, a worker and beat start and stop


@pytest.mark.slow
@pytest.mark.parametrize(
    "script", ["pydantic_ai_agent.py", "openai_agents_agent.py", "langgraph_agent.py"]
)
def test_the_example_runs_end_to_end_and_exits_zero(script: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=EXAMPLE_TIMEOUT_S,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert "what reached Honcho" in done.stdout
    assert "ok: 7 messages, in order, each once" in done.stdout
    assert "(not answered)" in done.stdout
    assert "knows about" in done.stdout or "Memory says" in done.stdout
