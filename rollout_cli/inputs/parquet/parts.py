"""How a Parquet input is cut into parts for several workers: ranges of whole row groups,
at most one part per MIN_PART_BYTES of file. A row group is never cut: Parquet has no row
seek inside one (without a page index), so a part starting mid-group would decode and drop
every row before it. A file of one row group (pyarrow writes up to a million rows as one)
is read whole, its columns decoded on the spare cores (reader.py)."""
from __future__ import annotations

from ...core import storage

MIN_PART_BYTES = 32 << 20


def split(inp, parts: int, min_bytes: int | None = None) -> list[tuple[int, int | None]]:
    """[(k, n)] for k < n parts: n at most `parts`, one per `min_bytes` of file and one per
    row group."""
    n = max(1, min(parts, storage.size(inp.path) // (min_bytes or MIN_PART_BYTES) or 1))
    if n > 1:
        n = max(1, min(n, _row_groups(inp.path)))
    return [(0, None)] if n == 1 else [(k, n) for k in range(n)]


def _row_groups(path: str) -> int:
    """The file's row-group count, from its footer (1 when it cannot be read: the reader
    reports why). Asked only when a file is big enough to be cut into parts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if storage.is_uri(path):
            with storage.open_read(path, seekable=True) as f:
                return pq.read_metadata(f).num_row_groups
        return pq.read_metadata(path).num_row_groups
    except (OSError, pa.ArrowException, UnicodeDecodeError):
        return 1


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


def is_output_shard(path: str) -> bool:
    """A shard of a rollout-cli output: its schema carries the output's schema version."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        md = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowException):
        return False
    return b"rollout_cli.schema_version" in md
