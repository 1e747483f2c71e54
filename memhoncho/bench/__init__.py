"""``memhoncho bench <name>``: measurements that print one JSON object each.

Each benchmark is a module here with ``run(args) -> dict``; ``BENCHMARKS`` names them.
"""

from __future__ import annotations

import os

BENCHMARKS: dict[str, str] = {
    "broker": "memhoncho.bench.broker",
    "capture": "memhoncho.bench.capture",
    "cli": "memhoncho.bench.cli",
    "deliver": "memhoncho.bench.deliver",
    "mcp": "memhoncho.bench.mcp",
    "recall": "memhoncho.bench.recall",
    "status": "memhoncho.bench.status",
    "sweep": "memhoncho.bench.sweep",
}


#: a Redis the benches may flush, instead of their default database on 127.0.0.1:6379
REDIS_URL_ENV = "MEMHONCHO_BENCH_REDIS_URL"


def redis_url(default: str) -> str:
    """The Redis a bench uses: ``$MEMHONCHO_BENCH_REDIS_URL``, else its own default."""
    return os.environ.get(REDIS_URL_ENV) or default
