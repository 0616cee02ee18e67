"""Reading one file a manifest lists (output/model.py's Output names them): a shard's size,
digest and row count checked against the manifest's entry, an Arrow IPC copy mapped, a Parquet
shard read; IntegrityError naming the file on a mismatch. No torch, no manifest parsing.

An output is read as data, never trusted: a file is opened only once it is known to be a
regular file (a FIFO would block the reader, a device or socket is no shard) and, where it is a
symbolic link or lies under one, only when it resolves inside OUT (`check_regular`); every
table handed out has the manifest's schema and buffers that hold together (`check_arrow`:
Arrow's full validation, offsets in bounds and non-decreasing, buffer sizes, UTF-8), so no read
of it can touch memory outside the file. Full validation walks the offsets, validity bitmaps and
string bytes only, about 10 us a shard; what the checks cost a loader epoch and a verify is
measured by bench/output_checks.py (docs/performance.md)."""
from __future__ import annotations

import functools
import mmap
import os
import stat

import pyarrow as pa

from ..core import hashing, storage
from ..core.errors import IntegrityError

__all__ = ["check_size", "check_digest", "check_rows", "read_bytes", "read_ipc", "ipc_table", "read_parquet", "ranges",
           "check_regular", "open_regular", "map_regular", "check_arrow", "expected_schema", "file_kind", "random_access"]

# FileEntry and Shard below are output/model.py's (annotations only: the model imports this module)


def ranges(steps: list[int]) -> str:
    """Step numbers, short: `1..40 (40)`, or the few there are."""
    if not steps:
        return "none"
    return f"{steps[0]}..{steps[-1]} ({len(steps)})" if len(steps) > 3 else ", ".join(map(str, steps))


def file_kind(mode: int) -> str:
    """What a file of this st_mode is, in words."""
    for test, words in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                        (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return words
    return "not a regular file"


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@functools.lru_cache(maxsize=64)
def _resolved_root(root: str) -> str:
    """OUT with every link resolved (a link to OUT itself is the caller's choice and is fine)."""
    return os.path.realpath(root)


@functools.lru_cache(maxsize=4096)
def _folder_target(folder: str, root: str) -> str | None:
    """Where a folder inside OUT leads when a link takes it outside OUT, else None. Asked once
    per folder in a process (a step's shards share theirs), the file itself every time."""
    real = os.path.realpath(folder)
    return None if _inside(real, _resolved_root(root)) else real


def _refuse_outside(path: str, real: str | None, root: str) -> None:
    if real is not None and not _inside(real, _resolved_root(root)):
        raise IntegrityError(f"{path}: a symbolic link to {real}, outside the output {root}: not read",
                             [{"path": path, "reason": "symbolic link outside the output", "target": real}])


def _not_regular(path: str, mode: int) -> IntegrityError:
    kind = file_kind(mode)
    return IntegrityError(f"{path}: {kind}, not a regular file: not read",
                          [{"path": path, "reason": f"not a regular file ({kind})"}])


def _lstat(path: str) -> os.stat_result:
    try:
        return os.lstat(path)
    except OSError as e:
        raise IntegrityError(f"{path}: missing: {e.strerror or e}", [{"path": path, "reason": "missing"}]) from None


def check_regular(path: str, root: str | None = None) -> os.stat_result | None:
    """Before a local file of an output is opened (lstat, nothing opened): IntegrityError naming
    it when it is missing, not a regular file (a FIFO, device, socket or folder), or, with
    `root` (OUT), when it resolves outside OUT through a symbolic link (the file's own, or a
    folder's above it). Its stat; None for an object-store path (the store holds objects only)."""
    if storage.is_uri(path):
        return None
    return _check(path, root)[0]


def _check(path: str, root: str | None) -> tuple[os.stat_result, bool]:
    """check_regular's work: (the file's stat, whether the path itself is a link)."""
    st = _lstat(path)
    link = stat.S_ISLNK(st.st_mode)
    if root is not None:
        _refuse_outside(path, os.path.realpath(path) if link else _folder_target(os.path.dirname(os.path.abspath(path)), os.path.abspath(root)),
                        root)
    if link:
        try:
            st = os.stat(path)
        except OSError as e:
            raise IntegrityError(f"{path}: a broken symbolic link: {e.strerror or e}",
                                 [{"path": path, "reason": "broken symbolic link"}]) from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode)
    return st, link


def open_regular(path: str, root: str | None = None) -> int:
    """A read-only descriptor of a local file of an output, opened only after check_regular,
    without blocking (O_NONBLOCK: a file swapped for a FIFO meanwhile cannot hang the open) and,
    where the file was no link, without following one (O_NOFOLLOW: nor can a link swapped in),
    then checked through the descriptor."""
    _, was_link = _check(path, root)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags if was_link else flags | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise IntegrityError(f"{path}: cannot open: {e.strerror or e}", [{"path": path, "reason": "unreadable"}]) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _not_regular(path, st.st_mode)
    return fd


def map_regular(path: str, root: str | None = None, access: int = mmap.ACCESS_READ) -> mmap.mmap:
    """A whole local file of an output mapped (open_regular's checks first)."""
    fd = open_regular(path, root)
    try:
        return mmap.mmap(fd, 0, access=access)
    except (OSError, ValueError) as e:  # ValueError: an empty file
        raise IntegrityError(f"{path}: cannot map: {e}", [{"path": path, "reason": "cannot map"}]) from None
    finally:
        os.close(fd)


def random_access(path: str, root: str | None = None, mapped: bool = True):
    """A file of an output for pyarrow's readers (ParquetFile, ipc.open_file): the object
    opened for random access on an object store, else the local file mapped (map_regular) or,
    not `mapped`, read with pread (the descriptor open_regular checked, opened again through
    /proc where there is one, so it is the same file)."""
    if storage.is_uri(path):
        return storage.open_read(path, seekable=True)
    if mapped or not os.path.isdir("/proc/self/fd"):
        return pa.BufferReader(pa.py_buffer(map_regular(path, root)))
    fd = open_regular(path, root)
    try:
        return pa.OSFile(f"/proc/self/fd/{fd}")
    except OSError as e:
        raise IntegrityError(f"{path}: cannot open: {e}", [{"path": path, "reason": "unreadable"}]) from None
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=16)
def expected_schema(keep_text: bool, schema_version: int) -> pa.Schema:
    """The train-row schema an output's manifest promises (its keep_text, its schema version)."""
    from ..core.schema import train_schema

    return train_schema(keep_text, schema_version)


def check_arrow(path: str, data: pa.Table | pa.RecordBatch, schema: pa.Schema | None, subset: bool = False) -> None:
    """Before rows read from an output are handed out: each column is the manifest's schema's,
    of its type (every column of it unless `subset`: the columns asked for), and the buffers
    hold together (Arrow's full validation: offsets in bounds and non-decreasing, buffer sizes,
    UTF-8). IntegrityError naming the file otherwise."""
    if schema is not None and (subset or not data.schema.equals(schema, check_metadata=False)):
        _check_columns(path, data.schema, schema, subset)  # the slow path: what differs, in words
    try:
        data.validate(full=True)
    except pa.ArrowException as e:
        where, why = "", str(e)
        for i in range(data.num_columns):  # name the first broken column
            try:
                data.column(i).validate(full=True)
            except pa.ArrowException as ce:
                where, why = f"column {_name(data.schema, i)}: ", str(ce)
                break
        raise IntegrityError(f"{path}: {where}malformed Arrow data: {why}",
                             [{"path": path, "reason": f"{where}malformed Arrow data: {why}"}]) from None


def _name(got: pa.Schema, i: int) -> str:
    try:
        return got.field(i).name
    except UnicodeDecodeError:
        return f"#{i}"


def _check_columns(path: str, got: pa.Schema, schema: pa.Schema, subset: bool) -> None:
    """IntegrityError naming the first column of `got` not in `schema`, or of another type, or
    (unless `subset`) the first column of `schema` missing. Nullability is verify's to check."""
    try:
        fields = list(got)
        names = [f.name for f in fields]
    except (UnicodeDecodeError, ValueError) as e:  # a garbled footer names no column
        raise IntegrityError(f"{path}: malformed Arrow schema: {e}", [{"path": path, "reason": "malformed Arrow schema"}]) from None
    for f in fields:
        i = schema.get_field_index(f.name)
        if i < 0:
            raise IntegrityError(f"{path}: unexpected column {f.name} (not in the manifest's schema)",
                                 [{"path": path, "reason": f"unexpected column {f.name}"}])
        want = schema.field(i).type
        if not f.type.equals(want):
            raise IntegrityError(f"{path}: column {f.name}: expected {want}, got {f.type}",
                                 [{"path": path, "reason": f"column {f.name}: expected {want}, got {f.type}"}])
    if not subset and len(names) != len(schema):
        missing = [n for n in schema.names if n not in set(names)]
        v = (schema.metadata or {}).get(b"rollout_cli.schema_version", b"?").decode()
        raise IntegrityError(f"{path}: column {missing[0]} is missing (the manifest's schema version {v} has it)",
                             [{"path": path, "reason": f"missing column {missing[0]}"}])


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


def read_bytes(path: str, root: str | None = None) -> bytes:
    """A whole file read into memory (an object store's, in one request; a local one only when
    check_regular lets it be opened)."""
    if not storage.is_uri(path):
        fd = open_regular(path, root)
        with os.fdopen(fd, "rb") as f:
            return f.read()
    try:
        return storage.read_bytes(path)
    except OSError as e:
        raise IntegrityError(f"{path}: missing: {e}") from None


def read_ipc(path: str, entry: FileEntry, verify: bool, *, root: str | None = None,
             schema: pa.Schema | None = None, columns: list[str] | None = None) -> pa.Table:
    """An Arrow IPC copy as a Table of views of the mapped file (object stores: of its bytes),
    the `columns` given (else all), checked (check_arrow) against `schema`."""
    if storage.is_uri(path):
        src = pa.py_buffer(read_bytes(path))
    else:
        src = pa.py_buffer(map_regular(path, root))
    check_size(path, entry, src.size)
    if verify:
        check_digest(path, entry, src)
    t = ipc_table(path, src)
    if columns is not None:
        try:
            t = t.select(columns)
        except KeyError as e:
            raise IntegrityError(f"{path}: {e.args[0] if e.args else e}") from None
    check_arrow(path, t, schema, subset=columns is not None)
    return t


def ipc_table(path: str, buf: pa.Buffer) -> pa.Table:
    """The Table an Arrow IPC file's bytes hold (zero copy; not yet validated: check_arrow)."""
    try:
        return pa.ipc.open_file(pa.BufferReader(buf)).read_all()
    except (pa.ArrowException, OSError) as e:
        raise IntegrityError(f"{path}: not a readable Arrow IPC file: {e}") from None


def read_parquet(path: str, entry: FileEntry, verify: bool, columns: list[str] | None = None, *,
                 root: str | None = None, schema: pa.Schema | None = None) -> pa.Table:
    """A Parquet shard, decoded (the `columns` present of those asked for, else all), checked
    (check_arrow) against `schema`."""
    import pyarrow.parquet as pq

    remote = storage.is_uri(path)
    if remote:
        try:
            data = pa.py_buffer(storage.read_bytes(path))  # an object is read once, then checked
        except OSError as e:
            raise IntegrityError(f"{path}: missing: {e}") from None
    else:
        data = pa.py_buffer(map_regular(path, root)) if check_regular(path, root).st_size else pa.py_buffer(b"")
    check_size(path, entry, data.size)
    if verify:
        check_digest(path, entry, data)
    try:
        if columns is not None:
            present = set(pq.read_schema(pa.BufferReader(data)).names)
            columns = [c for c in columns if c in present]
        t = pq.read_table(pa.BufferReader(data), columns=columns)
    except (pa.ArrowException, OSError) as e:
        raise IntegrityError(f"{path}: not a readable Parquet file: {e}") from None
    check_arrow(path, t, schema, subset=columns is not None)
    return t
