"""The smallest agent host: capture each run read as a JSON line on stdin, print what happened.

compose.yaml's ``host`` service runs it to show the wiring a real host needs (the data volume,
the broker URL and the key; nothing else): ``docker compose run -T host < runs.jsonl``. A
real host calls ``Host.capture`` from its own code after every settled run.
"""

from __future__ import annotations

import json
import sys
from typing import TextIO

from memhoncho.capture.host import Host
from memhoncho.errors import MemhonchoError


def main(lines: TextIO = sys.stdin, out: TextIO = sys.stdout) -> int:
    """Exit status 1 when any run was refused (each refusal is printed with its code)."""
    refused = 0
    with Host() as host:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                result = host.capture(json.loads(line))
            except ValueError:
                refused += 1
                print(json.dumps({"line": number, "code": "ERR_NOT_JSON"}), file=out)
                continue
            except MemhonchoError as exc:
                refused += 1
                print(json.dumps({"line": number, **exc.as_dict()}), file=out)
                continue
            print(json.dumps({"line": number, **result.model_dump(mode="json")}), file=out)
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
