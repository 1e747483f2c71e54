"""The status summary's file format: a magic line, a JSON header line, the keys, then columns
of fixed-width numbers (int64, then float64), column-major so loading is a few C-speed slices.
Disposable: a file that does not decode is rebuilt by the caller."""

from __future__ import annotations

import json
from array import array
from typing import Any

CACHE_MAGIC = b"memhoncho-status-summary-v3\n"
INT_COLUMN_COUNT = 13
FLOAT_COLUMN_COUNT = 4


def encode(rows: dict[str, list[Any]], lines: dict[str, list[Any]]) -> bytes:
    keys = list(rows)
    values = list(rows.values())
    n_int = INT_COLUMN_COUNT
    # Column-major, so loading is a few C-speed slices and one zip.
    ints = array("q", (int(row[c]) for c in range(n_int) for row in values))
    floats = array(
        "d", (float(row[c]) for c in range(n_int, n_int + FLOAT_COLUMN_COUNT) for row in values)
    )
    key_blob = "\n".join(keys).encode("utf-8")
    header = {"rows": len(keys), "keys_bytes": len(key_blob), "lines": lines}
    return (
        CACHE_MAGIC
        + json.dumps(header, separators=(",", ":")).encode()
        + b"\n"
        + key_blob
        + ints.tobytes()
        + floats.tobytes()
    )


def decode(data: bytes) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    if not data.startswith(CACHE_MAGIC):
        raise ValueError("not a status summary")
    end = data.index(b"\n", len(CACHE_MAGIC))
    header = json.loads(data[len(CACHE_MAGIC) : end])
    count, key_bytes = int(header["rows"]), int(header["keys_bytes"])
    start = end + 1
    keys = data[start : start + key_bytes].decode("utf-8").split("\n") if count else []
    start += key_bytes
    ints, floats = array("q"), array("d")
    n_int, n_float = INT_COLUMN_COUNT, FLOAT_COLUMN_COUNT
    int_bytes = count * n_int * ints.itemsize
    ints.frombytes(data[start : start + int_bytes])
    floats.frombytes(data[start + int_bytes : start + int_bytes + count * n_float * 8])
    if len(keys) != count or len(ints) != count * n_int or len(floats) != count * n_float:
        raise ValueError("truncated status summary")
    int_list, float_list = ints.tolist(), floats.tolist()
    columns: list[list[Any]] = [int_list[c * count : (c + 1) * count] for c in range(n_int)]
    columns += [float_list[c * count : (c + 1) * count] for c in range(n_float)]
    # Tuples (cheap to build); a row becomes a list only when it changes.
    rows: dict[str, Any] = dict(zip(keys, zip(*columns, strict=True), strict=True)) if count else {}
    lines = header.get("lines") or {}
    if not isinstance(lines, dict):
        raise ValueError("bad status summary header")
    return rows, lines
