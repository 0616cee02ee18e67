"""The writer lock: an output has one writer at a time.

Every command that writes or deletes under an output takes its lock first and holds it until it
returns: `convert` (fresh, `--overwrite`, `--resume`) on OUT, `export` on DEST. Readers
(`verify`, `inspect`, `report`, the loader) never take it. A second writer is refused at once
with exit 8 (OutputBusyError), the message naming the holder (pid, host) and how long it has
held the lock; with `wait` it polls until the lock is free or the wait is over.

* **Local**: an advisory `flock` on OUT's own folder, which no one can unlink or replace
  under a running writer: deleting `OUT/.lock` lets no second writer in. The kernel releases it
  when the process dies, however it dies, so a crash never leaves a stale lock. The holder
  writes its pid, host and start time into the lock file (`OUT/.lock`, core/layout.py), opened
  with O_NOFOLLOW and only when it is a regular file: a symbolic link there (or a FIFO,
  a folder) is exit 8 naming it, and nothing is written through it. Before its commit the
  holder checks that the lock file is still the one it wrote (exit 8 saying it was deleted or
  replaced, nothing committed). The holder deletes the file on release; a file left by a
  killed holder is taken over. `export`'s DEST is swapped by a rename, so its lock is an flock
  on a sibling file, `.DEST.lock`, opened the same way; a process that locked a file which was
  deleted or replaced meanwhile (fstat against lstat) drops it and tries again, and the holder
  checks it before its commit as above.
* **Object stores** offer no lock and no conditional write: the lock is a lease object
  (`OUT/.lock`) holding a random token and an expiry. A writer that finds none (or an expired
  one) PUTs its own, waits `ROLLOUT_CLI_LEASE_CONFIRM_SECONDS`, reads it back and holds the lease
  only if its token is still there. A thread renews it every third of
  `ROLLOUT_CLI_LEASE_SECONDS`; if the lease was taken over meanwhile, `check()` (called before
  the commit) refuses to commit. docs/object-stores.md states the window this leaves.
"""
from __future__ import annotations

import errno
import json
import os
import socket
import stat
import threading
import time
import uuid
import weakref

from ..core import storage
from ..core.errors import OutputBusyError
from ..core.layout import LOCK

POLL_SECONDS = 0.2  # between two tries while waiting (local)
LEASE_SECONDS = 60.0  # an object-store lease's lifetime without renewal
CONFIRM_SECONDS = 2.0  # between a lease's PUT and its read-back
# file systems without flock (some FUSE and old NFS mounts): the run goes on unlocked, with a note
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}


def _env_seconds(name: str, default: float) -> float:
    try:
        return max(0.0, float(os.environ[name]))
    except (KeyError, ValueError):
        return default


def lease_seconds() -> float:
    return _env_seconds("ROLLOUT_CLI_LEASE_SECONDS", LEASE_SECONDS) or LEASE_SECONDS


def confirm_seconds() -> float:
    return _env_seconds("ROLLOUT_CLI_LEASE_CONFIRM_SECONDS", CONFIRM_SECONDS)


def lock_path(out: str) -> str:
    """Where an output's lock lives: `OUT/.lock`."""
    return storage.join(out, LOCK)


def sibling_lock_path(dest: str) -> str:
    """The lock of a folder that is replaced by a rename (export's DEST): `.DEST.lock` beside it."""
    dest = os.path.abspath(dest)
    return os.path.join(os.path.dirname(dest), f".{os.path.basename(dest)}.lock")


def _holder(command: str) -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started_unix": round(time.time(), 3), "command": command}


def _duration(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def describe(holder: dict | None) -> str:
    """'pid 4242 on host gpu-3, for 1m05s' (what is known of a lock's holder)."""
    if not holder or "pid" not in holder:
        return "holder not yet recorded"
    words = f"pid {holder['pid']} on host {holder.get('host', '?')}"
    started = holder.get("started_unix")
    if isinstance(started, (int, float)):
        words += f", for {_duration(time.time() - started)}"
    return words


def busy_error(target: str, holder: dict | None, waited: float | None) -> OutputBusyError:
    what = (f"{target}: the output is being written by another process ({describe(holder)})")
    if waited:
        return OutputBusyError(f"{what}; still held after waiting {_duration(waited)}")
    return OutputBusyError(f"{what}; let it finish, or pass --wait SECS to wait for it")


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


_HELD: "weakref.WeakSet[LocalLock]" = weakref.WeakSet()


def _forget_in_child() -> None:
    """A forked child (the executable's pool workers) closes its copies of the held locks'
    descriptors: the lock then ends with its holder, not with the last child to exit."""
    for held in list(_HELD):
        for fd in (held.fd, held.dir_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        held.fd = held.dir_fd = -1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class LocalLock:
    """An flock held until release() (or the process's death): on the output's folder itself
    (`folder`, OUT) where there is one, so deleting or replacing the lock file lets no second
    writer in; else (export's DEST, swapped by a rename) on the lock file. The lock file, which
    records the holder, is opened with O_NOFOLLOW and only when it is a regular file: a symbolic
    link or anything else there is exit 8 naming it, nothing written through it."""

    def __init__(self, path: str, command: str, folder: str | None = None):
        self.path, self.command, self.folder = path, command, folder
        self.fd = -1  # the lock file (the holder's record)
        self.dir_fd = -1  # the folder locked, when there is one
        self.note: str | None = None

    def _open_record(self) -> int:
        """The lock file, opened without following a link and without blocking; OutputBusyError
        naming it when it is a symbolic link or not a regular file."""
        for attempt in range(3):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _NONBLOCK | _CLOEXEC, 0o666)
                break
            except FileNotFoundError:  # its folder went with a failed holder (a new OUT it created)
                if attempt == 2:
                    raise
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
            except OSError as e:
                if os.path.islink(self.path):
                    raise foreign_lock(self.path, "a symbolic link") from None
                if e.errno in (errno.ENXIO, errno.EISDIR):  # a socket, a folder
                    raise foreign_lock(self.path, "not a regular file") from None
                raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise foreign_lock(self.path, "not a regular file")
        return fd

    def try_acquire(self) -> dict | None:
        """None once held; else what the holder recorded (possibly {})."""
        import fcntl

        if self.folder is not None:
            dir_fd = os.open(self.folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
            try:
                fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(dir_fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    return read_holder(self.path)
                if e.errno in _NO_LOCKS:
                    self.note = f"{self.path}: the file system has no file locks ({e.strerror}); written without the writer lock"
                    return None
                raise
            try:
                fd = self._open_record()
            except BaseException:
                os.close(dir_fd)
                raise
            try:  # the file too, as releases that locked only the file do: they are kept out as well
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    holder = _read_holder(fd)
                    os.close(fd)
                    os.close(dir_fd)
                    return holder
                if e.errno not in _NO_LOCKS:
                    os.close(fd)
                    os.close(dir_fd)
                    raise
            self.dir_fd = dir_fd
            self._record(fd)
            return None
        for _ in range(1000):
            fd = self._open_record()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    holder = _read_holder(fd)
                    os.close(fd)
                    return holder
                os.close(fd)
                if e.errno in _NO_LOCKS:
                    self.note = f"{self.path}: the file system has no file locks ({e.strerror}); written without the writer lock"
                    return None
                raise
            try:
                same = os.path.samestat(os.fstat(fd), os.lstat(self.path))
            except FileNotFoundError:
                same = False
            if not same:  # its holder deleted it on release before we locked it: try the new one
                os.close(fd)
                continue
            self._record(fd)
            return None
        raise OSError(errno.EAGAIN, "the lock file kept being replaced", self.path)

    def _record(self, fd: int) -> None:
        data = json.dumps(_holder(self.command)).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        self.fd = fd
        _HELD.add(self)

    def check(self) -> None:
        """Before a commit: the lock file is still the one this process wrote (an flock cannot
        be lost while its process lives, but a lock file deleted or replaced meanwhile means
        someone else is at work in the output); OutputBusyError saying what happened."""
        if self.fd < 0:
            return
        try:
            same = os.path.samestat(os.fstat(self.fd), os.lstat(self.path))
        except FileNotFoundError:
            raise OutputBusyError(f"{self.path}: the lock file was deleted while this run held it; nothing committed "
                                  "(another process has been at work in the output: run again)") from None
        if not same:
            raise OutputBusyError(f"{self.path}: the lock file was replaced by another file while this run held it; "
                                  "nothing committed (another process has been at work in the output: run again)")

    def release(self) -> None:
        if self.fd >= 0:
            try:  # while still held: a waiter that locked it then sees it is gone
                if os.path.samestat(os.fstat(self.fd), os.lstat(self.path)):
                    os.unlink(self.path)
            except OSError:
                pass
            os.close(self.fd)
            self.fd = -1
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1


def foreign_lock(path: str, what: str) -> OutputBusyError:
    """The lock file's path holds something this tool did not write (exit 8, nothing written)."""
    return OutputBusyError(f"{path}: {what}, not a lock file this tool writes; nothing was written through it "
                           "(remove it if no rollout-cli process is running)")


def read_holder(path: str) -> dict:
    """The holder's record at `path`, read without following a link or blocking ({} when none)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC)
    except OSError:
        return {}
    try:
        return _read_holder(fd) if stat.S_ISREG(os.fstat(fd).st_mode) else {}
    finally:
        os.close(fd)


def _read_holder(fd: int) -> dict:
    """The holder's record, read through a descriptor of the lock file (a holder that has just
    locked it writes its record a moment later: a few tries)."""
    for _ in range(10):
        try:
            data = os.pread(fd, 4096, 0)
            if data:
                rec = json.loads(data)
                return rec if isinstance(rec, dict) else {}
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    return {}


class RemoteLease:
    """A lease object on an object store, renewed by a thread while held."""

    def __init__(self, path: str, command: str):
        self.path, self.command = path, command
        self.token = uuid.uuid4().hex
        self.ttl = lease_seconds()
        self.record = dict(_holder(command), token=self.token)
        self.lost: dict | None = None  # the lease found taken over (by a renewal)
        self.note: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._held = False

    def _read(self) -> dict | None:
        try:
            rec = json.loads(storage.read_bytes(self.path))
        except FileNotFoundError:
            return None
        except ValueError:
            return {}  # garbled: nobody's lease
        return rec if isinstance(rec, dict) else {}

    def _write(self) -> None:
        rec = dict(self.record, expires_unix=round(time.time() + self.ttl, 3))
        storage.write_bytes(self.path, json.dumps(rec).encode())

    def try_acquire(self) -> dict | None:
        cur = self._read()
        if cur and cur.get("token") != self.token and _live(cur):
            return cur
        self._write()
        time.sleep(confirm_seconds())  # a rival's PUT made meanwhile replaces ours: see who is left
        back = self._read()
        if not back or back.get("token") != self.token:
            return back or {}
        self._held = True
        self._thread = threading.Thread(target=self._renew, name="rollout-cli-lease", daemon=True)
        self._thread.start()
        return None

    def _renew(self) -> None:
        renewed = time.monotonic()
        while not self._stop.wait(self.ttl / 3):
            try:
                cur = self._read()
                if cur is not None and cur.get("token") != self.token:
                    self.lost = cur or {}
                    return
                self._write()
                renewed = time.monotonic()
            except OSError:
                if time.monotonic() - renewed > self.ttl:
                    self.lost = {}
                    return

    def check(self) -> None:
        """Refuse to commit once the lease has been taken over (a stall longer than its lifetime)."""
        if self.lost is not None:
            raise OutputBusyError(f"{self.path}: the writer lease expired and was taken over by another process "
                                  f"({describe(self.lost)}); nothing committed")

    def release(self) -> None:
        if not self._held:
            return
        self._held = False
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            cur = self._read()
            if cur is not None and cur.get("token") == self.token:
                storage.delete_file(self.path)
        except OSError:
            pass  # it expires by itself


def _live(rec: dict) -> bool:
    expires = rec.get("expires_unix")
    return isinstance(expires, (int, float)) and expires > time.time()


def acquire(out: str, *, wait: float | None = None, command: str = "convert", path: str | None = None):
    """Take the writer lock of `out` (its lock file or lease at `path`, default OUT/.lock; a
    local OUT must exist). Refuses with OutputBusyError while another process holds it, or
    waits up to `wait` seconds for it. Returns the held lock: call release() when done."""
    own = path is None
    path = path or lock_path(out)
    lock = RemoteLease(path, command) if storage.is_uri(path) else LocalLock(path, command, out if own else None)
    t0 = time.monotonic()
    while True:
        holder = lock.try_acquire()
        if holder is None:
            return lock
        waited = time.monotonic() - t0
        if not wait or waited >= wait:
            raise busy_error(out, holder, waited if wait else None)
        pause = POLL_SECONDS if isinstance(lock, LocalLock) else max(POLL_SECONDS, min(1.0, lock.ttl / 10))
        time.sleep(min(pause, max(0.0, wait - waited)))

