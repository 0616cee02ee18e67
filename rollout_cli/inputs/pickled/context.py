"""The load in progress on this thread: the file it reads (for errors that name it) and how it
decodes torch.save bytes embedded in a pickle (``torch_bytes``). Set by unpickle.py while it
loads; read by the allowed functions that meet such bytes (frameworks.py), which thus never
import the loader that calls them."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

_local = threading.local()


class Loading:
    __slots__ = ("path", "torch_bytes")

    def __init__(self, path: str, torch_bytes: Callable[[bytes, str], Any]):
        self.path = path
        self.torch_bytes = torch_bytes  # (data, what) -> the object torch.save wrote


@contextmanager
def loading(path: str, torch_bytes: Callable[[bytes, str], Any]) -> Iterator[Loading]:
    outer = getattr(_local, "current", None)
    _local.current = Loading(path, torch_bytes)
    try:
        yield _local.current
    finally:
        _local.current = outer


def current() -> Loading:
    cur = getattr(_local, "current", None)
    if cur is None:  # an allowed function called outside a load: nothing to decode with
        raise RuntimeError("no restricted load in progress")
    return cur
