"""Playing another local user: ``nobody`` through ``setpriv`` (the tests run as root on CI)."""

from __future__ import annotations

import os
import shutil

import pytest

NOBODY = 65534  # uid and gid of nobody:nogroup on Debian

#: a test that plays another user needs root (to become one) and setpriv
as_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to play another local user (CI runs as root)",
)


def as_nobody(argv: list[str]) -> list[str]:
    """``argv`` run as ``nobody``, with no supplementary group."""
    return ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", *argv]
