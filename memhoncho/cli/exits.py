"""The exit codes every ``memhoncho`` command shares, and the typed error each one maps to.

Light on purpose (``json`` only at import): the relay's socket answers with these codes too.
"""

from __future__ import annotations

import json
from typing import Any

OK = 0  #: success
FINDING = 1  #: the command ran and found something wrong (audit damage, a failed check)
REFUSED = 2  #: refused input that will never succeed as it is (fix it, do not retry)
NOT_NOW = 3  #: a temporary condition (a store or broker down, a full outbox): retry later
USAGE = 64  #: the command line itself is wrong (sysexits EX_USAGE)

# The names the capture command documented first.
EXIT_REFUSED = REFUSED
EXIT_NOT_NOW = NOT_NOW


def json_text(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def print_json(value: Any) -> None:
    print(json_text(value))


def count(n: int, noun: str) -> str:
    """``1 conversation``, ``2 conversations``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def code_for(exc: BaseException) -> int:
    """The exit code of a typed error: ``REFUSED`` for what will never succeed as it is (bad
    input, bad configuration, a schema to upgrade, a refusal by Honcho), else ``NOT_NOW``."""
    from memhoncho import errors

    never = (
        errors.InvalidInput,
        errors.ConfigError,
        errors.StoreSchemaBehind,
        errors.StorePermission,
        errors.HonchoRejected,
    )
    return REFUSED if isinstance(exc, never) else NOT_NOW


def os_error(exc: OSError, what: str) -> tuple[int, dict[str, Any]]:
    """An ``OSError`` of a command as its exit code and typed answer, naming what to do."""
    import errno

    name = exc.filename or what
    if exc.errno == errno.EADDRINUSE:
        return NOT_NOW, {
            "code": "ERR_PORT_IN_USE",
            "message": f"the port is in use ({what}): stop what listens there or pick another"
            " --port",
        }
    if exc.errno == errno.ENOENT:
        return REFUSED, {"code": "ERR_INPUT", "message": f"{name}: no such file or directory"}
    if exc.errno in (errno.ENOTDIR, errno.EISDIR):
        kind = "is not a directory" if exc.errno == errno.ENOTDIR else "is a directory"
        return REFUSED, {"code": "ERR_INPUT", "message": f"{name}: a part of this path {kind}"}
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return REFUSED, {
            "code": "ERR_INPUT",
            "message": f"{name}: {exc.strerror} (check its owner and mode)",
        }
    return NOT_NOW, {"code": "ERR_OS", "message": f"{name}: {exc.strerror or exc}"}


#: the extras whose modules a command may miss, with the pip command that installs them
EXTRAS = {"psycopg": "postgres", "psycopg_pool": "postgres", "alembic": "postgres"}


def missing_module(exc: ModuleNotFoundError) -> dict[str, Any]:
    root = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(root)
    fix = f"pip install 'memhoncho[{extra}]'" if extra else f"pip install {root}"
    return {"code": "ERR_MISSING_EXTRA", "message": f"{root} is not installed: {fix}"}
