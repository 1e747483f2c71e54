"""Results: every memhoncho task's last start, success and error, and its counts.

Celery's task signals (``signals``) feed one store behind the ``ResultsStore`` protocol
(``backend``): a Redis hash per task name (``redis_store``) when the broker is Redis, else a small
JSON file under the data directory (``file_store``). Beat processes also write a heartbeat, so
``doctor`` can tell "no beat" and "two beats" apart. ``record`` holds what is remembered.
"""

from memhoncho.results.backend import ResultsStore, store_for
from memhoncho.results.record import BEAT_STALE_S, ErrorSummary, TaskResult
from memhoncho.results.signals import connect, gave_up

__all__ = [
    "BEAT_STALE_S",
    "ErrorSummary",
    "ResultsStore",
    "TaskResult",
    "connect",
    "gave_up",
    "store_for",
]
