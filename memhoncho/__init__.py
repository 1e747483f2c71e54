"""memhoncho: every agent conversation turn into Honcho, durably, in order, exactly once.

The host's API is ``Host``; see the README for the quick start.
"""

from memhoncho.errors import MemhonchoError
from memhoncho.host import Host
from memhoncho.models import CaptureResult, CaptureStatus

__all__ = ["CaptureResult", "CaptureStatus", "Host", "MemhonchoError"]
__version__ = "0.1.0"
