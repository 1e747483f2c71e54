"""The Redis a bench measures on: its own for the run, never a database someone else uses.

``$MEMHONCHO_BENCH_REDIS_URL`` when set (the bench empties that database before and after);
else a private ``redis-server`` on a free port, when one is installed; else an empty database
of the server on 127.0.0.1:6379, claimed with a lock as the tests claim theirs. A fixed shared
database was the cause of a failed CI run: a killed run's messages, left in it, reached the
next run's worker. With no Redis at all the bench measures without it and says why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from memhoncho.testing.redis_place import RedisPlace, open_place

#: a Redis database the benches may empty, instead of one of their own
REDIS_URL_ENV = "MEMHONCHO_BENCH_REDIS_URL"


@contextlib.contextmanager
def bench_redis() -> Iterator[RedisPlace]:
    """This run's Redis (``url`` empty and ``reason`` set when there is none), removed after."""
    place = open_place(REDIS_URL_ENV)
    try:
        if place.kind == "override":
            place.fresh()
        yield place
    finally:
        if place.kind == "override":
            place.fresh()
        place.close()
