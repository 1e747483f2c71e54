"""``memhoncho bench <name>``: measurements that print one JSON object each.

Each benchmark is a module here with ``run(args) -> dict``; ``BENCHMARKS`` names them.
"""

from __future__ import annotations

BENCHMARKS: dict[str, str] = {
    "broker": "memhoncho.bench.broker",
    "capture": "memhoncho.bench.capture",
    "cli": "memhoncho.bench.cli",
    "deliver": "memhoncho.bench.deliver",
    "integrations": "memhoncho.bench.integrations",
    "mcp": "memhoncho.bench.mcp",
    "recall": "memhoncho.bench.recall",
    "status": "memhoncho.bench.status",
    "sweep": "memhoncho.bench.sweep",
}
