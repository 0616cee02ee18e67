"""Stage 6: write one shard as Parquet (and its memory-mappable Arrow IPC copy), hashing the
bytes as they are written, fsynced, into the staging area."""
from __future__ import annotations

import concurrent.futures as cf
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..core import arrays, hashing, storage
from ..core.cores import usable_cores
from ..core.options import DEFAULT_ROW_GROUP_BYTES
from .stitch import Stitcher
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
        if pa.types.is_list(col.type):
            est += list_lengths(col) * (col.type.value_type.bit_width // 8)
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


def column_groups(table: pa.Table) -> list[list[str]]:
    """How each row group is cut for encoding: every list column that holds values alone (they
    carry nearly all the bytes), the other columns together; in schema order."""
    heavy = [c for c in table.column_names if c in LIST_COLUMNS and list_lengths(table.column(c)).any()]
    rest = [c for c in table.column_names if c not in heavy]
    return [[c] for c in heavy] + ([rest] if rest else [])


def _encode(table: pa.Table, options: dict) -> pa.Buffer:
    # bounded batches (ENCODE_BATCH_BYTES); the cut depends on the data only
    cuts = row_group_bounds(table, ENCODE_BATCH_BYTES)
    table = pa.Table.from_batches([b for s, e in cuts for b in table.slice(s, e - s).to_batches()], schema=table.schema)
    kw = dict(row_group_size=max(table.num_rows, 1), **_writer_options(table.column_names, **options))
    try:
        # a buffer as large as the encoding can get, written once: a growing one is reallocated
        # and copied as it doubles; pages never written are never touched, so they cost no memory
        buf = pa.allocate_buffer(_encoded_bound(table))
        sink = pa.FixedSizeBufferWriter(buf)
        pq.write_table(table, sink, **kw)
        return buf.slice(0, sink.tell())
    except (OSError, MemoryError):
        # "write out of bounds" (the bound was wrong after all) or no address space for it
        # (a capped virtual memory): encode again into a growing buffer
        grow = pa.BufferOutputStream()
        pq.write_table(table, grow, **kw)
        return grow.getvalue()


def _encoded_bound(table: pa.Table) -> int:
    """More bytes than the Parquet encoding of `table` can take: PLAIN widens 8- and 16-bit
    integers to 32 bits, levels and page headers add a little, and an incompressible page
    comes out slightly larger than it went in."""
    return 4 * table.nbytes + 64 * table.num_rows + (1 << 20)


def _write_stitched(table: pa.Table, bounds: list[tuple[int, int]], options: dict, sink, threads: int) -> bool:
    """Encode the row groups' column pieces on `threads` threads and stitch them into `sink`.
    False, with nothing written, when the stitcher does not fully understand what this
    pyarrow writes (a footer field it does not know, say): the caller then writes the file
    with pyarrow's own writer."""
    groups = column_groups(table)
    jobs = [table.slice(s, e - s).select(cols) for s, e in bounds for cols in groups]
    try:
        stitcher = Stitcher(_encode(table.schema.empty_table(), options))
    except ValueError:
        return False
    threads = max(1, min(threads, len(jobs)))
    window = threads + len(groups)  # pieces in flight: every thread stays busy, memory stays bounded
    pool = cf.ThreadPoolExecutor(threads, thread_name_prefix="rollout-cli-parquet")
    try:
        futures: dict[int, cf.Future] = {}
        for j in range(min(window, len(jobs))):
            futures[j] = pool.submit(_encode, jobs[j], options)
        for k in range(len(bounds)):
            members = []
            for g in range(len(groups)):
                j = k * len(groups) + g
                try:
                    members.append((stitcher.parse(futures.pop(j).result(), j), 0, j))
                except ValueError:
                    if k == 0:  # pieces are written as the template is: this one too
                        return False
                    raise
                if j + window < len(jobs):
                    futures[j + window] = pool.submit(_encode, jobs[j + window], options)
            if k == 0:
                sink.write(stitcher.header())
            for part in stitcher.add(members, k):
                sink.write(part)
        sink.write(stitcher.footer())
        return True
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _write_direct(table: pa.Table, bounds: list[tuple[int, int]], options: dict, sink) -> None:
    """pyarrow's own writer, one row group per bound, on one thread: the same bytes as the
    stitched file."""
    with pq.ParquetWriter(pa.PythonFile(sink, mode="w"), table.schema,
                          **_writer_options(table.column_names, **options)) as writer:
        for s, e in bounds:
            group = table.slice(s, e - s)
            cuts = row_group_bounds(group, ENCODE_BATCH_BYTES)  # as _encode batches a piece
            group = pa.Table.from_batches([b for a, z in cuts for b in group.slice(a, z - a).to_batches()],
                                          schema=table.schema)
            writer.write_table(group, row_group_size=max(e - s, 1))


def write_parquet(table: pa.Table, path: str, *, compression: str = "zstd", compression_level: int | None = 1,
                  row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES, threads: int | None = None) -> WrittenFile:
    """Write `table` to `path` deterministically; return its size, digest and row-group count.

    pyarrow encodes a file on one thread. With `threads` > 1 (default: the usable cores) each
    row group is cut into column pieces (`column_groups`) that are encoded as separate
    in-memory Parquet files on that many threads, then stitched into one file by copying
    their column chunks (output/stitch.py); with one thread, or where the stitcher does not
    understand the footer this pyarrow writes, pyarrow's writer writes the file itself. The
    bytes are the same either way, whatever the thread count."""
    options = {"compression": compression, "compression_level": compression_level}
    threads = threads or usable_cores()
    sink = _HashingFile(path)
    try:
        if table.num_rows == 0:
            bounds = [(0, 0)]
            with pq.ParquetWriter(pa.PythonFile(sink, mode="w"), table.schema,
                                  **_writer_options(table.column_names, **options)) as writer:
                writer.write_table(table)
        else:
            bounds = row_group_bounds(table, row_group_bytes)
            if threads <= 1 or not _write_stitched(table, bounds, options, sink, threads):
                _write_direct(table, bounds, options, sink)
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
