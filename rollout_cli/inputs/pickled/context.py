"""The load in progress on this thread: the file it reads (for errors that name it), how it
decodes torch.save bytes embedded in a pickle (``torch_bytes``), and the CRC checks of those
embedded archives' storages, run on a thread while the outer pickle goes on unpickling (zlib
lets go of the GIL) and joined before the outermost load returns. Set by unpickle.py while it
loads; read by the allowed functions that meet such bytes (frameworks.py), which thus never
import the loader that calls them."""
from __future__ import annotations

import threading
import zlib
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from .errors import PickleFormatError

_local = threading.local()


class _Check(threading.Thread):
    def __init__(self, buf: Any, crc: int, message: str):
        super().__init__(daemon=True)
        self.buf, self.crc, self.message, self.ok = buf, crc, message, False

    def run(self) -> None:
        self.ok = zlib.crc32(self.buf) == self.crc


class Loading:
    __slots__ = ("path", "torch_bytes", "checks", "trusted", "builds")

    def __init__(self, path: str, torch_bytes: Callable[[bytes, str], Any], checks: list, trusted: bool):
        self.path = path
        self.torch_bytes = torch_bytes  # (data, what) -> the object torch.save wrote
        self.checks = checks  # shared with the outermost load
        self.trusted = trusted  # --trust-pickle: globals off the list are imported and run
        self.builds: list = []  # this load's numpy_globals.ArrayBuild stand-ins, replaced when it ends

    def check_crc(self, buf: Any, crc: int, message: str) -> None:
        """Check that `buf`'s CRC-32 is `crc` before the outermost load returns, else raise
        ``PickleFormatError(message)`` naming this load's file."""
        check = _Check(buf, crc, message)
        check.start()
        self.checks.append((check, self.path))


def _join(checks: list) -> None:
    failed = None
    for check, path in checks:
        check.join()
        if not check.ok and failed is None:
            failed = PickleFormatError(check.message, path)
    if failed is not None:
        raise failed


@contextmanager
def loading(path: str, torch_bytes: Callable[[bytes, str], Any], trusted: bool = False) -> Iterator[Loading]:
    outer = getattr(_local, "current", None)
    checks = outer.checks if outer is not None else []
    _local.current = Loading(path, torch_bytes, checks, trusted)
    try:
        yield _local.current
    except BaseException:
        if outer is None:
            for check, _ in checks:
                check.join()
        raise
    else:
        if outer is None:
            _join(checks)
    finally:
        _local.current = outer


def current() -> Loading:
    cur = getattr(_local, "current", None)
    if cur is None:  # an allowed function called outside a load: nothing to decode with
        raise RuntimeError("no restricted load in progress")
    return cur
