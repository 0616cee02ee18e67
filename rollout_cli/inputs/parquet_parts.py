"""How a Parquet input is cut into parts for several workers, planned from its size alone (the
converting process imports no pyarrow). The worker reads the footer (inputs/parquet.py): with
at least n row groups, part k of n reads the k-th of n near-equal ranges of them; with fewer
(pyarrow writes a file of up to a million rows as one group), the k-th of n near-equal ranges
of rows."""
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


def part_rows(k: int, n: int, group_rows: list[int]) -> tuple[range, int, int]:
    """(row groups to read, first row, end row) of part k of n, rows numbered in the file."""
    starts = [0]
    for r in group_rows:
        starts.append(starts[-1] + r)
    if len(group_rows) >= n:
        groups = row_group_range(k, n, len(group_rows))
        return groups, starts[groups.start], starts[groups.stop]
    total = starts[-1]
    lo, hi = total * k // n, total * (k + 1) // n
    first = next((g for g in range(len(group_rows)) if starts[g + 1] > lo), len(group_rows))
    last = next((g for g in range(len(group_rows)) if starts[g + 1] >= hi), len(group_rows) - 1)
    return (range(first, last + 1) if hi > lo else range(0)), lo, hi
