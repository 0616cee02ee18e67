"""tensordict's pickle globals, tensordict not imported: a TensorDict comes back as a
``TensorDictData``, the dict of its entries (numpy arrays, nested ``TensorDictData``, the values
of its non-tensor entries) with its ``batch_size`` (a tuple) and ``device`` (a str or None).

* ``tensordict._reductions._rebuild_tensordict_files_consolidated(metadata, storage)``: a
  *consolidated* TensorDict (``td.consolidate()``, as verl's ``DataProto`` pickles it): one uint8
  storage and, per leaf, ``(dtype, shape, start, stop, pad)`` in its metadata; each leaf is a
  view of that one buffer.
* ``tensordict._reductions._make_td(tensordict._td.TensorDict, state)``: a plain one
  (tensordict >= 0.10 pickles an unconsolidated TensorDict so, as ROLL's ``DataProto`` does):
  ``state`` is the TensorDict's ``__dict__`` (``_tensordict``, ``_batch_size``, ``_device``,
  ``_td_dim_names``, lock flags).
* ``tensordict._td.TensorDict``: only a name handed to ``_make_td``.

Nested jagged tensors and tensorclasses are refused (``PickleFormatError``): no rollout batch
holds them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .errors import PickleFormatError
from .numpy_globals import resolved
from .plain import Token, check
from .tensors import _BF16, _DTYPES

TENSORDICT = Token("tensordict._td.TensorDict")


class TensorDictData(dict):
    """A TensorDict read as plain data: key -> numpy array, nested ``TensorDictData`` or the
    value of a non-tensor entry; ``batch_size`` a tuple of ints, ``device`` a str or None."""

    __slots__ = ("batch_size", "device")
    class_name = "tensordict._td.TensorDict"

    def __init__(self, entries: dict, batch_size: tuple[int, ...], device: str | None):
        dict.__init__(self, entries)
        self.batch_size = batch_size
        self.device = device

    def __setstate__(self, state: Any) -> None:
        raise PickleFormatError("pickle tried to BUILD a TensorDict read as plain data")

    def __reduce__(self):
        raise TypeError("plain data read from a pickle is not picklable")

    def __repr__(self) -> str:
        return f"TensorDict(batch_size={self.batch_size}, device={self.device}, {dict.__repr__(self)})"


def _batch_size(value: Any, where: str) -> tuple[int, ...]:
    if type(value) is list:
        value = tuple(value)
    check(type(value) is tuple and all(type(v) is int and v >= 0 for v in value),
          f"{where}: batch_size: expected ints, got {value!r:.80}")
    return value


def _device(value: Any, where: str) -> str | None:
    check(value is None or type(value) is str, f"{where}: device: expected a device or None, got {value!r:.80}")
    return value


def _leaf(key: str, meta: Any, storage: np.ndarray) -> np.ndarray:
    check(type(meta) in (tuple, list) and len(meta) in (5, 6), f"TensorDict leaf {key!r}: expected (dtype, shape, start, stop, pad)")
    dtype_name, shape, start, stop, pad = meta[:5]
    check(len(meta) == 5 or meta[5] is None or type(meta[5]) is int, f"TensorDict leaf {key!r}: bad ragged index")
    check(type(dtype_name) is str and dtype_name.startswith("torch."), f"TensorDict leaf {key!r}: dtype {dtype_name!r:.40}")
    dtype = _DTYPES.get(dtype_name[len("torch."):])
    if dtype is None:
        raise PickleFormatError(f"TensorDict leaf {key!r}: dtype {dtype_name} is not read (no rollout batch holds it)")
    shape = _batch_size(shape, f"TensorDict leaf {key!r}")
    check(type(start) is int and type(stop) is int and 0 <= start <= stop <= storage.shape[0],
          f"TensorDict leaf {key!r}: bytes {start!r}:{stop!r} outside its storage of {storage.shape[0]}")
    numel = 1
    for v in shape:
        numel *= v
    nbytes = stop - start
    check(nbytes % dtype.itemsize == 0 and (nbytes // dtype.itemsize == numel or (pad and nbytes // dtype.itemsize >= numel)),
          f"TensorDict leaf {key!r}: {nbytes} bytes for shape {shape} of {dtype.name}")
    flat = storage[start:stop].view(dtype.file_dtype)[:numel]
    if dtype is _BF16:
        flat = (flat.astype("<u4") << 16).view("<f4")
    return flat.reshape(shape)


def _from_consolidated(metadata: Any, storage: np.ndarray, where: str) -> TensorDictData:
    check(type(metadata) is dict, f"{where}: metadata: expected a dict")
    meta = dict(metadata)
    try:
        non_tensor, leaves, cls, cls_meta = meta.pop("non_tensors"), meta.pop("leaves"), meta.pop("cls"), meta.pop("cls_metadata")
    except KeyError as e:
        raise PickleFormatError(f"{where}: metadata has no {e.args[0]!r}") from None
    meta.pop("size", None)
    check(cls == "TensorDict", f"{where}: class {cls!r:.60} is not read (a TensorDict is)")
    check(type(non_tensor) is dict and type(leaves) is dict and type(cls_meta) is dict, f"{where}: malformed metadata")
    entries: dict[str, Any] = {}
    for key, value in non_tensor.items():
        check(type(value) in (tuple, list) and len(value) in (2, 3), f"{where}: non-tensor entry {key!r}: malformed")
        entries[key] = value[0]
    for key, leaf in leaves.items():
        check(type(key) is str, f"{where}: leaf key {key!r:.40}")
        if key.startswith("<NJT"):
            raise PickleFormatError(f"{where}: {key!r} is a nested (jagged) tensor, which is not read")
        entries[key] = _leaf(key, leaf, storage)
    for key, sub in meta.items():
        check(type(key) is str, f"{where}: sub-TensorDict key {key!r:.40}")
        entries[key] = _from_consolidated(sub, storage, f"{where}[{key!r}]")
    return TensorDictData(entries, _batch_size(cls_meta.get("batch_size", ()), where), _device(cls_meta.get("device"), where))


def _rebuild_consolidated(metadata: Any, storage: Any, *rest: Any) -> TensorDictData:
    check(not rest and isinstance(storage, np.ndarray) and storage.dtype == np.uint8 and storage.ndim == 1,
          "_rebuild_tensordict_files_consolidated: only (metadata, uint8 storage tensor) is accepted")
    return _from_consolidated(metadata, storage, "consolidated TensorDict")


_PLAIN = (type(None), bool, int, float, str)
_STATE_KEYS = {"_tensordict", "_batch_size", "_device", "_td_dim_names", "_is_locked", "_is_shared", "_is_memmap",
               "_locked_tensordicts", "_lock_id", "_lock_parents_weakrefs", "_non_blocking", "_names"}


def _make_td(cls: Any, state: Any, *rest: Any) -> TensorDictData:
    check(not rest and cls is TENSORDICT and type(state) is dict,
          "_make_td: only (tensordict._td.TensorDict, state dict) is accepted")
    unknown = set(state) - _STATE_KEYS
    check(not unknown, f"_make_td: state has unexpected keys {sorted(map(str, unknown))[:5]}")
    check("_tensordict" in state and "_batch_size" in state, "_make_td: state has no _tensordict or _batch_size")
    entries = state["_tensordict"]
    check(type(entries) is dict, "_make_td: _tensordict is not a dict")
    entries = {k: resolved(v) for k, v in entries.items()}
    for key, value in entries.items():
        check(type(key) is str and (isinstance(value, (np.ndarray, TensorDictData))),
              f"_make_td: entry {key!r:.40} is a {type(value).__name__}, not a tensor or TensorDict")
    for key in _STATE_KEYS - {"_tensordict", "_batch_size", "_device"}:
        value = state.get(key)
        check(type(value) in _PLAIN or (type(value) in (tuple, list) and all(type(v) in _PLAIN for v in value)),
              f"_make_td: {key} is a {type(value).__name__}")
    return TensorDictData(entries, _batch_size(state["_batch_size"], "TensorDict"), _device(state.get("_device"), "TensorDict"))


def tensordict_globals() -> dict[str, Any]:
    return {
        "tensordict._reductions._rebuild_tensordict_files_consolidated": _rebuild_consolidated,
        "tensordict._reductions._make_td": _make_td,
        "tensordict._td.TensorDict": TENSORDICT,
    }

