"""A torch storage pickled on its own, as a tensor inside a plain pickle holds it (verl's
``non_tensor_batch["multi_modal_inputs"]``: per-row dicts of tensors in an object array).
torch's ``TypedStorage.__reduce__`` (torch/storage.py) writes ``torch.storage._load_from_bytes(b)``,
``b`` the storage saved in torch.save's legacy, non-zip form (torch/serialization.py
``_legacy_save``): five pickles, then the storage's element count (int64, little-endian) and its
elements (little-endian: ``_write_file`` swaps on a big-endian host)::

    MAGIC_NUMBER   PROTOCOL_VERSION (1001)   sys_info {"protocol_version", "little_endian", "type_sizes"}
    the storage: a persistent id ("storage", <storage class>, key, location, numel, None)
    [key]          numel   numel x itemsize bytes

Read here by a restricted unpickler of its own whose only globals are torch's storage classes
(the storage tokens of the allow-list; any other global is UnsafePickleError), every part
checked: the three headers' values, one storage of a typed storage class, its key listed once,
its count equal to the id's, its bytes exactly what is left (a view of `b`, no copy)."""
from __future__ import annotations

import io
import pickle
import struct
from typing import Any

from .errors import PickleFormatError, UnsafePickleError
from .tensors import _DTYPES, _LEGACY_STORAGES, _Storage, _StorageKind

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001
_COUNT = struct.Struct("<q")
_KINDS = {f"torch.{cls}": _StorageKind(cls, _DTYPES[dt]) for cls, dt in _LEGACY_STORAGES.items()}


class _Pending:
    """The storage's persistent id, until its bytes (after the pickles) are read."""

    __slots__ = ("key", "kind", "numel")

    def __init__(self, key: str, kind: _StorageKind, numel: int):
        self.key, self.kind, self.numel = key, kind, numel

    def __reduce__(self):
        raise TypeError("a pending storage cannot be pickled")


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise PickleFormatError(f"torch.storage._load_from_bytes: {message}")


def load_from_bytes(data: Any, *rest: Any) -> _Storage:
    """The storage `data` holds (see the module's docstring); PickleFormatError for anything
    else."""
    from ..limits import max_storage_bytes
    from .context import current

    _check(not rest and type(data) is bytes, f"expected (bytes,), got {type(data).__name__}")
    stream = io.BytesIO(data)
    pending: list[_Pending] = []
    path = current().path

    class _One(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            kind = _KINDS.get(f"{module}.{name}")
            if kind is None:
                raise UnsafePickleError(f"{module}.{name}", path)
            return kind

        def persistent_load(self, pid: Any) -> Any:
            _check(not pending, "more than one storage")
            _check(type(pid) is tuple and len(pid) == 6 and pid[0] == "storage", f"unexpected persistent id {pid!r:.80}")
            _, kind, key, location, numel, view = pid
            _check(isinstance(kind, _StorageKind) and kind.dtype is not None, f"storage class {kind!r:.60} is not a typed storage")
            _check(type(key) is str and type(location) is str and type(numel) is int and numel >= 0 and view is None,
                   f"malformed storage persistent id {pid!r:.120}")
            pending.append(_Pending(key, kind, numel))
            return pending[0]

    def part(what: str) -> Any:
        try:
            return _One(stream, encoding="utf-8").load()
        except (PickleFormatError, UnsafePickleError):
            raise
        except Exception as e:  # what a corrupt stream makes the C unpickler raise
            raise PickleFormatError(f"torch.storage._load_from_bytes: corrupt {what}: {type(e).__name__}: {str(e)[:120]}") from e

    _check(part("magic number") == MAGIC_NUMBER, "not torch.save's legacy form (magic number)")
    _check(part("protocol version") == PROTOCOL_VERSION, "unknown legacy protocol version")
    info = part("sys_info")
    _check(type(info) is dict and info.get("little_endian") is True,
           "expected sys_info of a little-endian writer")
    obj = part("storage")
    _check(len(pending) == 1 and obj is pending[0], "expected the storage alone")
    st = pending[0]
    keys = part("storage keys")
    _check(keys == [st.key], f"expected the storage keys [{st.key!r:.40}], got {keys!r:.80}")
    at = stream.tell()
    _check(len(data) - at >= _COUNT.size, "no element count after the pickles")
    (count,) = _COUNT.unpack_from(data, at)
    nbytes = st.numel * st.kind.dtype.itemsize
    _check(count == st.numel, f"{count} elements, the storage's id says {st.numel}")
    _check(nbytes <= max_storage_bytes(), f"{nbytes} bytes, over --max-storage-bytes")
    _check(len(data) - at - _COUNT.size == nbytes,
           f"{len(data) - at - _COUNT.size} bytes after the element count, {nbytes} expected")
    start = at + _COUNT.size
    return _Storage(st.key, st.kind, nbytes, memoryview(data)[start:start + nbytes], True)
