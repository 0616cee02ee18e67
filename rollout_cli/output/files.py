"""Reading one file a manifest lists (output/model.py's Output names them): a shard's size,
digest and row count checked against the manifest's entry, an Arrow IPC copy mapped, a Parquet
shard read; IntegrityError naming the file on a mismatch. No torch, no manifest parsing."""
from __future__ import annotations

import os

import pyarrow as pa

from ..core import hashing, storage
from ..core.errors import IntegrityError

__all__ = ["check_size", "check_digest", "check_rows", "read_bytes", "read_ipc", "ipc_table", "read_parquet", "ranges"]

# FileEntry and Shard below are output/model.py's (annotations only: the model imports this module)


def ranges(steps: list[int]) -> str:
    """Step numbers, short: `1..40 (40)`, or the few there are."""
    if not steps:
        return "none"
    return f"{steps[0]}..{steps[-1]} ({len(steps)})" if len(steps) > 3 else ", ".join(map(str, steps))




def check_size(path: str, entry: FileEntry, size: int) -> None:
    """IntegrityError when the file's size is not the manifest's."""
    if entry.bytes is not None and entry.bytes != size:
        raise IntegrityError(f"{path}: {size} bytes, the manifest says {entry.bytes} (truncated or rewritten)",
                             [{"path": path, "reason": "size mismatch", "expected": entry.bytes, "got": size}])


def check_digest(path: str, entry: FileEntry, data=None) -> None:
    """Check `path` (or the bytes `data` already read or mapped from it) against the manifest's
    digest; IntegrityError naming the file on a mismatch, or when the manifest records none."""
    if entry.digest is None:
        raise IntegrityError(f"{path}: the manifest records no checksum for it ({'/'.join(hashing.DIGEST_KEYS)})",
                             [{"path": path, "reason": "no checksum in the manifest"}])
    key, want = entry.digest
    if data is not None:
        h = hashing.new(key)
        h.update(data)
        got = h.hexdigest()
    else:
        got = hashing.file_digest(path, key)
    if got != want:
        raise IntegrityError(f"{path}: {key} mismatch: the manifest says {want}, the file hashes to {got}",
                             [{"path": path, "reason": f"{key} mismatch", "expected": want, "got": got}])


def check_rows(path: str, sh: Shard, rows: int) -> None:
    if sh.rows is not None and sh.rows != rows:
        raise IntegrityError(f"{path}: {rows} rows, the manifest says {sh.rows}")


def read_bytes(path: str) -> bytes:
    """A whole file read into memory (an object store's, in one request)."""
    try:
        return storage.read_bytes(path)
    except OSError as e:
        raise IntegrityError(f"{path}: missing: {e}") from None


def read_ipc(path: str, entry: FileEntry, verify: bool) -> pa.Table:
    """An Arrow IPC copy as a Table of views of the mapped file (object stores: of its bytes)."""
    try:
        src = pa.py_buffer(read_bytes(path)) if storage.is_uri(path) else pa.memory_map(path).read_buffer()
    except (OSError, ValueError) as e:
        raise IntegrityError(f"{path}: cannot map: {e}") from None
    check_size(path, entry, src.size)
    if verify:
        check_digest(path, entry, src)
    return ipc_table(path, src)


def ipc_table(path: str, buf: pa.Buffer) -> pa.Table:
    """The Table an Arrow IPC file's bytes hold (zero copy)."""
    try:
        return pa.ipc.open_file(pa.BufferReader(buf)).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise IntegrityError(f"{path}: not a readable Arrow IPC file: {e}") from None


def read_parquet(path: str, entry: FileEntry, verify: bool, columns: list[str] | None = None) -> pa.Table:
    """A Parquet shard, decoded (the `columns` present of those asked for, else all)."""
    import pyarrow.parquet as pq

    remote = storage.is_uri(path)
    try:
        data = storage.read_bytes(path) if remote else None  # an object is read once, then checked
        size = len(data) if remote else os.path.getsize(path)
    except OSError as e:
        raise IntegrityError(f"{path}: missing: {e}") from None
    check_size(path, entry, size)
    if verify:
        check_digest(path, entry, data)
    source = pa.BufferReader(data) if remote else path
    try:
        if columns is not None:
            present = set(pq.read_schema(source, memory_map=not remote).names)
            columns = [c for c in columns if c in present]
        return pq.read_table(source, columns=columns, memory_map=not remote)
    except (pa.ArrowInvalid, OSError) as e:
        raise IntegrityError(f"{path}: not a readable Parquet file: {e}") from None
