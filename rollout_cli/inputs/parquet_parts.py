"""How a Parquet input is cut into parts for several workers, planned without opening it (the
converting process imports no pyarrow): part k of n reads the k-th of n near-equal ranges of
the file's row groups, which the worker finds from the footer (inputs/parquet.py)."""
from __future__ import annotations

from ..core import storage

MIN_PART_BYTES = 32 << 20


def split(inp, parts: int, min_bytes: int | None = None) -> list[tuple[int, int | None]]:
    """[(k, n)] for k < n parts, n at most `parts` and one per `min_bytes` of file."""
    n = max(1, min(parts, storage.size(inp.path) // (min_bytes or MIN_PART_BYTES) or 1))
    return [(0, None)] if n == 1 else [(k, n) for k in range(n)]


def row_group_range(k: int, n: int, row_groups: int) -> range:
    """The row groups part k of n reads."""
    return range(row_groups * k // n, row_groups * (k + 1) // n)
