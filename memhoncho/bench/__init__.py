"""``memhoncho bench <name>``: measurements that print one JSON object each.

Each benchmark is a module here with ``run(args) -> dict``; ``BENCHMARKS`` names them.
"""

from __future__ import annotations

BENCHMARKS: dict[str, str] = {
    "backlog": "memhoncho.bench.backlog",
    "broker": "memhoncho.bench.broker",
    "capture": "memhoncho.bench.capture",
    "claude-code": "memhoncho.bench.claude_code",
    "cli": "memhoncho.bench.cli",
    "deliver": "memhoncho.bench.deliver",
    "integrations": "memhoncho.bench.integrations",
    "import": "memhoncho.bench.imports",
    "import-large": "memhoncho.bench.import_large",
    "mcp": "memhoncho.bench.mcp",
    "mcp-busy": "memhoncho.bench.mcp_busy",
    "recall": "memhoncho.bench.recall",
    "status": "memhoncho.bench.status",
    "stranded": "memhoncho.bench.stranded",
    "sweep": "memhoncho.bench.sweep",
    "watchdog": "memhoncho.bench.watchdog",
}
