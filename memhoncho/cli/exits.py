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
