"""torch's pickle globals, none of torch imported: ``torch._utils._rebuild_tensor_v2`` and the
legacy storage classes (tensors as numpy views of the archive's storages, tensors.py),
``torch.storage._load_from_bytes`` (a storage pickled on its own, as a tensor in a plain pickle
holds it: legacy.py),
``torch.device`` (its ``str``, e.g. ``"cpu"`` or ``"cuda:0"``) and ``torch.Size`` (a tuple of
ints)."""
from __future__ import annotations

import re
from typing import Any

from .legacy import load_from_bytes
from .plain import check
from .tensors import _DTYPES, _LEGACY_STORAGES, _rebuild_tensor_v2, _StorageKind

_DEVICE_TYPE = re.compile(r"[a-z_]+")


def _device(kind: Any, index: Any = None, *rest: Any) -> str:
    """``torch.device.__reduce__`` writes ``(type,)`` or ``(type, index)``."""
    check(not rest and type(kind) is str and (index is None or (type(index) is int and index >= 0)),
          f"torch.device: only (type,) or (type, index) is accepted, got {(kind, index, *rest)!r:.80}")
    name, _, idx = kind.partition(":")
    check(_DEVICE_TYPE.fullmatch(name) is not None and (not idx or (idx.isdigit() and index is None)),
          f"torch.device: {kind!r:.40} is not a device")
    return kind if index is None else f"{kind}:{index}"


def _size(dims: Any = (), *rest: Any) -> tuple[int, ...]:
    """``torch.Size.__reduce__`` writes ``(tuple_of_ints,)``."""
    check(not rest and type(dims) is tuple and all(type(v) is int and v >= 0 for v in dims),
          f"torch.Size: only (tuple of non-negative ints,) is accepted, got {(dims, *rest)!r:.80}")
    return dims


def torch_globals() -> dict[str, Any]:
    """``module.name`` -> function or storage token."""
    table: dict[str, Any] = {
        "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
        "torch.storage._load_from_bytes": load_from_bytes,
        "torch.device": _device,
        "torch.Size": _size,
    }
    for cls, dt in _LEGACY_STORAGES.items():
        table[f"torch.{cls}"] = _StorageKind(cls, _DTYPES[dt])
    return table
