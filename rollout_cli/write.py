"""Stage 6: write one shard as Parquet (and its memory-mappable Arrow IPC copy), hashing the
bytes as they are written, fsynced, into the staging area."""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import hashing, storage
from .schema import DICTIONARY_COLUMNS, LIST_COLUMNS

DEFAULT_ROW_GROUP_BYTES = 64 << 20
COMPRESSIONS = ("zstd", "lz4", "snappy", "none")


class _HashingFile:
    """A write-only file object that hashes what passes through."""

    def __init__(self, path: str):
        self._remote = storage.is_uri(path)
        self._f = storage.open_write(path) if self._remote else open(path, "wb")
        self.hasher = hashing.new()
        self.size = 0
        self.closed = False

    def write(self, data) -> int:
        mv = memoryview(data)
        self.hasher.update(mv)
        self.size += mv.nbytes
        return self._f.write(mv)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self._f.flush()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    def close(self) -> None:
        if not self.closed:
            self._f.flush()
            if not self._remote:
                os.fsync(self._f.fileno())
            self._f.close()
            self.closed = True


@dataclass
class WrittenFile:
    bytes: int
    digest: str
    row_groups: int


def row_bytes(table: pa.Table) -> np.ndarray:
    """Approximate uncompressed bytes of each row (list payloads dominate)."""
    est = np.full(table.num_rows, 64, dtype=np.int64)
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_list(col.type):
            width = col.type.value_type.bit_width // 8
            lens = pc.list_value_length(col).fill_null(0)
            est += lens.to_numpy().astype(np.int64) * width
    return est


def row_group_bounds(table: pa.Table, row_group_bytes: int) -> list[tuple[int, int]]:
    """Cut rows into consecutive groups of at most `row_group_bytes` (a lone larger row alone)."""
    n = table.num_rows
    if n == 0:
        return [(0, 0)]
    cum = np.cumsum(row_bytes(table))
    bounds = []
    start = 0
    base = 0
    while start < n:
        end = int(np.searchsorted(cum, base + row_group_bytes, side="right"))
        end = max(end, start + 1)
        bounds.append((start, end))
        base = int(cum[end - 1])
        start = end
    return bounds


def write_parquet(table: pa.Table, path: str, *, compression: str = "zstd", compression_level: int | None = 1,
                  row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES) -> WrittenFile:
    """Write `table` to `path` deterministically; return its size, digest and row-group count."""
    names = table.column_names
    codec = "none" if compression == "none" else compression
    level = compression_level if compression == "zstd" else None
    sink = _HashingFile(path)
    bounds = row_group_bounds(table, row_group_bytes)
    try:
        writer = pq.ParquetWriter(
            pa.PythonFile(sink, mode="w"),
            table.schema,
            compression=codec,
            compression_level=level,
            use_dictionary=[c for c in DICTIONARY_COLUMNS if c in names],
            write_statistics=[c for c in names if c not in LIST_COLUMNS],
        )
        for s, e in bounds:
            writer.write_table(table.slice(s, e - s), row_group_size=max(e - s, 1))
        writer.close()
    finally:
        sink.close()
    return WrittenFile(sink.size, sink.hasher.hexdigest(), len(bounds))


def write_ipc(table: pa.Table, path: str) -> WrittenFile:
    """Write an uncompressed Arrow IPC file (one record batch per row group) for memory mapping."""
    sink = _HashingFile(path)
    try:
        with pa.ipc.new_file(pa.PythonFile(sink, mode="w"), table.schema) as w:
            w.write_table(table.combine_chunks())
    finally:
        sink.close()
    return WrittenFile(sink.size, sink.hasher.hexdigest(), 1)
