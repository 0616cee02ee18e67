"""Stage 6: write one shard as Parquet (and its memory-mappable Arrow IPC copy), hashing the
bytes as they are written, fsynced, into the staging area."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..core import arrays, hashing, storage, tensors
from ..core.options import DEFAULT_ROW_GROUP_BYTES
from ..core.schema import DICTIONARY_COLUMNS, LIST_COLUMNS

# pyarrow's list-column encoder holds several times the values it is given in scratch memory
# (levels, widened integers, pages), so it is given batches of about this many bytes
ENCODE_BATCH_BYTES = 1 << 20


class _HashingFile:
    """A write-only file object that hashes what passes through; a local file is written by
    storage.LocalWriter (straight to the device where it can, durable at close)."""

    def __init__(self, path: str):
        self._f = storage.open_write(path) if storage.is_uri(path) else storage.LocalWriter(path)
        self.hasher = hashing.new()
        self.size = 0
        self.closed = False

    def write(self, data) -> int:
        mv = memoryview(data)
        self.hasher.update(mv)
        self.size += mv.nbytes
        self._f.write(mv)
        return mv.nbytes

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass  # a local file is written in whole chunks, and all of it at close

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._f.close()


@dataclass
class WrittenFile:
    bytes: int
    digest: str
    row_groups: int


def list_lengths(col: pa.ChunkedArray) -> np.ndarray:
    """Each row's list length (0 for a null row), read from the buffers (core.arrays)."""
    out = [arrays.list_lengths(ch) for ch in col.chunks]
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def row_bytes(table: pa.Table) -> np.ndarray:
    """Approximate uncompressed bytes of each row (list payloads dominate)."""
    est = np.full(table.num_rows, 64, dtype=np.int64)
    for name in table.column_names:
        col = table.column(name)
        if col.type == tensors.MM_TYPE:
            est += tensors.row_nbytes(col)
        elif pa.types.is_list(col.type):
            vt = col.type.value_type  # strings (weight_versions): short, about 16 bytes each
            est += list_lengths(col) * (vt.bit_width // 8 if pa.types.is_integer(vt) or pa.types.is_floating(vt) else 16)
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


def _writer_options(names: list[str], compression: str, compression_level: int | None) -> dict:
    return dict(
        compression="none" if compression == "none" else compression,
        compression_level=compression_level if compression == "zstd" else None,
        use_dictionary=[c for c in DICTIONARY_COLUMNS if c in names],
        write_statistics=[c for c in names if c not in LIST_COLUMNS],
    )


def write_parquet(table: pa.Table, path: str, *, compression: str = "zstd", compression_level: int | None = 1,
                  row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES) -> WrittenFile:
    """Write `table` to `path` deterministically, one row group per `row_group_bounds`, each
    handed to pyarrow's writer in batches of about ENCODE_BATCH_BYTES (so the bytes depend on
    the rows only, never on how the table is chunked); return its size, digest and row-group
    count."""
    options = _writer_options(table.column_names, compression, compression_level)
    bounds = row_group_bounds(table, row_group_bytes)
    sink = _HashingFile(path)
    try:
        with pq.ParquetWriter(pa.PythonFile(sink, mode="w"), table.schema, **options) as writer:
            if table.num_rows == 0:
                writer.write_table(table)
            for s, e in bounds if table.num_rows else ():
                group = table.slice(s, e - s)
                cuts = row_group_bounds(group, ENCODE_BATCH_BYTES)
                group = pa.Table.from_batches([b for a, z in cuts for b in group.slice(a, z - a).to_batches()],
                                              schema=table.schema)
                writer.write_table(group, row_group_size=max(e - s, 1))
    finally:
        sink.close()
    return WrittenFile(sink.size, sink.hasher.hexdigest(), len(bounds))


def write_ipc(table: pa.Table, path: str) -> WrittenFile:
    """Write an uncompressed Arrow IPC file, one record batch with one buffer per column (what the
    loader maps), for memory mapping."""
    sink = _HashingFile(path)
    try:
        with pa.ipc.new_file(pa.PythonFile(sink, mode="w"), table.schema) as w:
            w.write_table(table.combine_chunks())
    finally:
        sink.close()
    return WrittenFile(sink.size, sink.hasher.hexdigest(), 1)
