"""Where inputs and outputs live: local paths, or pyarrow filesystem URIs (`s3://bucket/key`,
`gs://...`, `hdfs://...`), so a cluster needs no shared POSIX filesystem. S3-compatible stores
take their endpoint from AWS_ENDPOINT_URL. Local paths keep using the os module directly.

The storage variables of the environment (`AWS_*`: endpoint, region, keys, profile) decide
which store a URI reaches and as whom, with the AWS shared files that hold the profiles:
`environment()` and `shared_files()` read them, and a process that works for another (a Ray
task) takes the other's with `use_environment()`. An input that cannot be read
because the storage failed (unreachable, credentials refused, no permission) is
`InputUnavailableError`, not invalid input: `input_error()` tells the two apart."""
from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
import threading
from contextlib import contextmanager
from functools import lru_cache, wraps

from . import pages
from .tuning import direct_io
from .errors import InputUnavailableError, InvalidInputError, RolloutCliError

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_uri(path: str) -> bool:
    return isinstance(path, str) and bool(_URI.match(path))


# How many times the S3 client tries a request, as the AWS SDKs read it (their standard retry
# mode). Unset, pyarrow's default: only a connection that fails is tried again, for up to 6 s.
MAX_ATTEMPTS_ENV = "AWS_MAX_ATTEMPTS"


def max_attempts() -> int | None:
    """AWS_MAX_ATTEMPTS as a count of tries (at least 1); None when unset or not a number."""
    try:
        return max(1, int(os.environ[MAX_ATTEMPTS_ENV]))
    except (KeyError, ValueError):
        return None


@lru_cache(maxsize=64)
def _filesystem(prefix: str):
    from pyarrow import fs as pafs

    fs = pafs.FileSystem.from_uri(prefix)[0]
    attempts = max_attempts()
    if attempts is not None and isinstance(fs, pafs.S3FileSystem):
        # the same filesystem (its options as pickling carries them), with the standard retries
        rebuild, (options,) = fs.__reduce__()
        fs = rebuild({**options, "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=attempts)})
    return fs


# The variables pyarrow's S3 client reads (through the AWS SDK): endpoint, region, keys,
# session token, profile and the files that hold them
ENV_PREFIXES = ("AWS_",)


def environment() -> dict[str, str]:
    """This process's storage variables (their values are secrets: never print them)."""
    return {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}


# The AWS SDK's shared files, where AWS_PROFILE's profiles (keys, region, role) are read from:
# the variable that names each, and where it is when none does
SHARED_FILES = (("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"), ("AWS_CONFIG_FILE", "~/.aws/config"))


def shared_files() -> dict[str, bytes]:
    """The contents of the AWS shared files this process's S3 client reads, by the variable
    that names each; a file that is absent or unreadable is left out (secrets: never print)."""
    found = {}
    for var, default in SHARED_FILES:
        try:
            with open(os.environ.get(var) or os.path.expanduser(default), "rb") as f:
                found[var] = f.read()
        except OSError:
            pass
    return found


_private_files: dict[bytes, str] = {}


def _private_file(content: bytes) -> str:
    """A path to a file that holds `content`, readable by this process only. On Linux an
    anonymous memory file (memfd), which vanishes with the process and leaves nothing on disk;
    elsewhere a temporary file of mode 0600, removed at exit."""
    if content in _private_files:  # the content itself is the key: a few KiB at most
        return _private_files[content]
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("rollout-cli-aws", 0)
        os.write(fd, content)
        path = f"/proc/{os.getpid()}/fd/{fd}"
    else:  # pragma: no cover - not Linux
        import atexit

        fd, path = tempfile.mkstemp(prefix="rollout-cli-aws-")
        with os.fdopen(fd, "wb") as f:
            f.write(content)
        atexit.register(lambda: os.path.exists(path) and os.remove(path))
    _private_files[content] = path
    return path


def use_environment(env: dict[str, str], files: dict[str, bytes] | None = None) -> None:
    """Make this process's storage variables exactly `env` (those not in it are removed), so
    that URIs resolve here as in the process `env` came from; filesystems resolved under the
    previous ones are forgotten. `files` (that process's shared_files()) replace this
    process's own: each variable of SHARED_FILES names a private copy of that process's file,
    or an empty one where that process has none."""
    if files is not None:
        env = dict(env)
        for var, _ in SHARED_FILES:
            env[var] = _private_file(files[var]) if var in files else os.devnull
    current = environment()
    if current == env:
        return
    for k in current.keys() - env.keys():
        del os.environ[k]
    os.environ.update(env)
    _filesystem.cache_clear()


# How the storage, not the bytes, failed: pyarrow's S3 errors ("AWS Error NETWORK_CONNECTION
# during HeadObject operation", "... ACCESS_DENIED ..."), and the errnos of a refused
# permission or an unreachable host. EIO, ESTALE and ETIMEDOUT are not among them: a reader
# raises those as they are, for the Ray engine to retry.
_STORAGE_FAULT_MARKERS = ("AWS Error",)
_STORAGE_FAULT_ERRNOS = {errno.EACCES, errno.EPERM, errno.ECONNREFUSED, errno.ECONNRESET, errno.EHOSTUNREACH,
                         errno.ENETUNREACH, errno.ENETDOWN, errno.EHOSTDOWN}


def storage_fault(e: BaseException) -> bool:
    """Whether an error raised opening or reading an input is its storage failing (network,
    credentials, permission) rather than its bytes."""
    if not isinstance(e, OSError):
        return False
    return e.errno in _STORAGE_FAULT_ERRNOS or any(m in str(e) for m in _STORAGE_FAULT_MARKERS)


def unavailable(display: str, e: OSError) -> InputUnavailableError:
    """The error for input `display`, which its storage failed to serve with `e`."""
    detail = e.strerror if e.errno is not None and e.strerror else str(e)
    return InputUnavailableError(f"{display}: cannot read this input from its storage (network, credentials or "
                                 f"permission): {detail}")


def input_error(display: str, e: BaseException, message: str) -> RolloutCliError:
    """The error to raise for an input that failed to open or read with `e`: InputUnavailableError
    (naming `display`) when the storage failed, else InvalidInputError(`message`)."""
    return unavailable(display, e) if storage_fault(e) else InvalidInputError(message)


@contextmanager
def reading(display: str):
    """Within it, an OSError that is a storage fault is raised as InputUnavailableError naming
    `display` (an input being listed or fingerprinted); any other goes through unchanged."""
    try:
        yield
    except OSError as e:
        if storage_fault(e):
            raise unavailable(display, e) from None
        raise


def reads_input(fn):
    """A function of an input's path (its first argument) that raises InputUnavailableError,
    naming the path, where the storage fails (as `reading`)."""
    @wraps(fn)
    def wrapper(path, *args, **kwargs):
        with reading(path):
            return fn(path, *args, **kwargs)

    return wrapper


def resolve(uri: str):
    """(pyarrow FileSystem, path inside it) for a URI."""
    from pyarrow import fs as pafs

    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/]*)", uri)
    fs = _filesystem(m.group(1) if m else uri)
    _, path = pafs.FileSystem.from_uri(uri)
    return fs, path


def _scheme_prefix(uri: str) -> str:
    return uri[: uri.index("://") + 3]


def join(base: str, rel: str) -> str:
    return base.rstrip("/") + "/" + rel if is_uri(base) else os.path.join(base, rel)


def file_info(uri: str):
    fs, path = resolve(uri)
    return fs.get_file_info(path)


def exists(path: str) -> bool:
    if not is_uri(path):
        return os.path.exists(path)
    from pyarrow import fs as pafs

    return file_info(path).type != pafs.FileType.NotFound


def size(path: str) -> int:
    return file_info(path).size if is_uri(path) else os.path.getsize(path)


def is_file(path: str) -> bool:
    """A regular file (local), or an object (URI)."""
    if not is_uri(path):
        return os.path.isfile(path)
    from pyarrow import fs as pafs

    return file_info(path).type == pafs.FileType.File


def is_dir(path: str) -> bool:
    """A local folder, or a URI with objects under it (a bucket or a prefix)."""
    if not is_uri(path):
        return os.path.isdir(path)
    from pyarrow import fs as pafs

    return file_info(path).type == pafs.FileType.Directory


def read_bytes(path: str) -> bytes:
    """A whole file, local or remote."""
    if not is_uri(path):
        with open(path, "rb") as f:
            return f.read()
    with open_read(path) as f:
        return f.read()


def files_under(uri: str) -> dict[str, int]:
    """Every object under a URI prefix, as {path relative to it: size}; empty when absent."""
    from pyarrow import fs as pafs

    fs, path = resolve(uri)
    base = path.rstrip("/") + "/"
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return {i.path[len(base):]: i.size for i in infos if i.type == pafs.FileType.File and i.path.startswith(base)}


def file_digest(path: str, algorithm: str) -> str:
    """The digest of a file, local or remote (read once, as a stream)."""
    from . import hashing

    if not is_uri(path):
        return hashing.file_digest(path, algorithm)
    h = hashing.new(algorithm)
    with open_read(path) as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def list_files(uri: str) -> list[str]:
    """Every file under a URI (recursively, sorted), or the URI itself when it is a file."""
    from pyarrow import fs as pafs

    fs, path = resolve(uri)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.File:
        return [uri]
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(uri)
    prefix = _scheme_prefix(uri)
    return sorted(prefix + i.path for i in fs.get_file_info(pafs.FileSelector(path, recursive=True)) if i.type == pafs.FileType.File)


def open_read(uri: str, seekable: bool = False):
    """A pyarrow input file (seekable) or stream for a URI."""
    fs, path = resolve(uri)
    return fs.open_input_file(path) if seekable else fs.open_input_stream(path)


def open_write(uri: str):
    fs, path = resolve(uri)
    return fs.open_output_stream(path)


def write_bytes(uri: str, data: bytes) -> None:
    with open_write(uri) as f:
        f.write(data)


def fsync_dir(path: str) -> None:
    """Make a folder's entries (a rename, a new file) durable; best effort where the platform or
    file system cannot."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_SYNC_FILE_RANGE_WRITE = 2


@lru_cache(maxsize=1)
def _sync_file_range():
    import ctypes

    from .libc import libc

    fn = getattr(libc(), "sync_file_range", None)
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return fn


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Ask the kernel to start writing a file's byte range to disk now, without waiting (Linux's
    sync_file_range): the fsync that ends the file then waits for its last range only, not for
    all of it. A no-op elsewhere, or where the file system refuses."""
    fn = _sync_file_range()
    if fn is not None:
        fn(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)


# O_DIRECT wants the buffer's address, each write's length and the file offset to be multiples
# of the device's logical block size; a page is a multiple of every common one
DIRECT_ALIGN = 4096
# what a file system that does not do O_DIRECT answers at open
_DIRECT_REFUSED = (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP)
WRITE_CHUNK_BYTES = 2 << 20
# The chunk buffers of closed writers, kept for the next ones: a fresh buffer is 512 pages the
# kernel faults in and zeroes, and each step writes two files side by side (its shard and IPC
# copy). 16-step whole run, 8 alternating runs, 2026-12-06: JSONL 3.18 -> 2.99 CPU-s, 1.90 ->
# 1.77 s; Parquet 2.30 -> 2.20 CPU-s, 1.45 -> 1.40 s (bench/results/machinery-spare-buffers.json).
_SPARE_BUFFERS: list = []
_SPARE_LOCK = threading.Lock()
_SPARE_KEEP = 2


def _chunk_buffer():
    with _SPARE_LOCK:
        if _SPARE_BUFFERS:
            return _SPARE_BUFFERS.pop()
    return pages.anonymous(WRITE_CHUNK_BYTES)


def _spare(buf) -> None:
    with _SPARE_LOCK:
        if len(_SPARE_BUFFERS) < _SPARE_KEEP:
            _SPARE_BUFFERS.append(buf)
            return
    try:
        buf.close()
    except BufferError:  # a failed write's traceback still holds a view: freed with it
        pass


class LocalWriter:
    """A new local file that is durable once closed (fsynced).

    Where the file system takes it, the file is opened with O_DIRECT and written in 2 MiB
    chunks gathered in one reused, page-aligned buffer, from which each goes to the device
    without passing through the page cache: a shard is written once and not read back by the
    converting process, and through the page cache every byte is first copied into pages
    allocated for it, which on a virtual machine that hands freed memory back to its host are
    cold (core/tuning.py has the figure). Elsewhere (a file system that refuses O_DIRECT at
    open, as tmpfs did before Linux 6.6 and FUSE does, or refuses an aligned direct write, or
    `direct=False`) small writes are gathered in that buffer and a write of 2 MiB or more goes
    to the file from the caller's memory (Arrow's buffers) without that copy; each write is
    handed to the disk as it is made (start_writeback), so the fsync at close waits for the
    last one only. Unset, `direct` is the `ROLLOUT_CLI_DIRECT_IO` switch (core/tuning.py)."""

    def __init__(self, path: str, direct: bool | None = None):
        self.path = path
        if direct is None:
            direct = direct_io()
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        o_direct = getattr(os, "O_DIRECT", 0) if direct else 0
        self.direct = False
        self._fd = -1
        if o_direct:
            try:
                self._fd = os.open(path, flags | o_direct, 0o666)
                self.direct = True
            except OSError as e:  # tmpfs before Linux 6.6, FUSE and others refuse O_DIRECT at open
                if e.errno not in _DIRECT_REFUSED:
                    raise
        if self._fd < 0:
            self._fd = os.open(path, flags, 0o666)
        self._buf = _chunk_buffer()  # page-aligned, reused for every chunk
        self._view = memoryview(self._buf)
        self._fill = 0  # bytes gathered in the buffer
        self._offset = 0  # bytes written to the file
        self.closed = False

    def write(self, data) -> int:
        src = memoryview(data).cast("B")
        n = src.nbytes
        if n >= WRITE_CHUNK_BYTES and not self.direct:
            if self._fill:
                self._write_out(self._view[:self._fill])
                self._fill = 0
            self._write_out(src)
            return n
        done = 0
        while done < n:
            k = min(n - done, WRITE_CHUNK_BYTES - self._fill)
            self._view[self._fill:self._fill + k] = src[done:done + k]
            self._fill += k
            done += k
            if self._fill == WRITE_CHUNK_BYTES:
                self._write_out(self._view)
                self._fill = 0
        return n

    def _write_out(self, chunk: memoryview) -> None:
        nbytes = chunk.nbytes
        written = 0
        while written < nbytes:
            try:
                written += os.write(self._fd, chunk[written:])
            except OSError as e:
                if not (self.direct and e.errno == errno.EINVAL):
                    raise
                self._stop_direct()  # the device wants a coarser alignment: go through the cache
        if not self.direct:
            start_writeback(self._fd, self._offset, nbytes)
        self._offset += nbytes

    def _stop_direct(self) -> None:
        import fcntl

        fl = fcntl.fcntl(self._fd, fcntl.F_GETFL)
        fcntl.fcntl(self._fd, fcntl.F_SETFL, fl & ~os.O_DIRECT)
        self.direct = False

    def close(self) -> None:
        """Write what is gathered, make the file durable and close it."""
        if self.closed:
            return
        self.closed = True
        try:
            if self._fill:
                if self.direct:
                    # the whole blocks direct, the last part block through the page cache: padded
                    # to a block and cut back instead, each file's truncation read its last block
                    # back from the device to zero its tail (16-step whole run, 12 alternating
                    # runs: JSONL 1.558 -> 1.541 s, 2.617 -> 2.595 CPU-s)
                    whole = self._fill - self._fill % DIRECT_ALIGN
                    if whole:
                        self._write_out(self._view[:whole])
                    if whole < self._fill:
                        self._stop_direct()
                        self._write_out(self._view[whole:self._fill])
                else:
                    self._write_out(self._view[:self._fill])
                self._fill = 0
            os.fsync(self._fd)
        finally:
            os.close(self._fd)
            self._view.release()
            _spare(self._buf)


def write_durable(path: str, data: bytes) -> None:
    """Write a whole file so that, after a crash, it is either absent or complete: a local file
    goes to `path.tmp`, is fsynced and renamed into place, then its folder is fsynced; an
    object-store upload is atomic by itself."""
    if is_uri(path):
        write_bytes(path, data)
        return
    tmp = path + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            view = memoryview(data).cast("B")
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:  # no partial file left behind (a full disk, an interrupt)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(os.path.dirname(path) or ".")


def delete_file(uri: str) -> None:
    """Remove one object; nothing if absent."""
    fs, path = resolve(uri)
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass


def delete(uri: str) -> None:
    """Remove a file or a whole tree; nothing if absent."""
    from pyarrow import fs as pafs

    fs, path = resolve(uri)
    t = fs.get_file_info(path).type
    if t == pafs.FileType.Directory:
        fs.delete_dir(path)
    elif t == pafs.FileType.File:
        fs.delete_file(path)


class LocalCopy:
    """A local file for a URI, for readers that need a real file (zip archives); removed on exit."""

    def __init__(self, uri: str):
        self.uri = uri
        self.dir = None

    def __enter__(self) -> str:
        self.dir = tempfile.mkdtemp(prefix="rollout-cli-")
        local = os.path.join(self.dir, os.path.basename(self.uri.rstrip("/")) or "input")
        try:
            with open_read(self.uri) as src, open(local, "wb") as dst:
                while True:
                    block = src.read(8 << 20)
                    if not block:
                        break
                    dst.write(block)
        except BaseException:  # __exit__ is not called when __enter__ raises
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        return local

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
