"""The frameworks' own classes and rebuild functions, read as plain data without the framework:
each class a ``PlainData`` subclass naming it, whose ``BUILD`` takes exactly the state its
writer pickles (torch.save bytes inside it decoded by the same restricted loader, context.py).

* SkyRL (NovaSky-AI/SkyRL@a9564572eb8e skyrl/backends/skyrl_train/training_batch.py:113-117,
  244-281): ``_rebuild_tensor_batch(cls, state)`` with ``cls`` one of ``TensorBatch``,
  ``TrainingInputBatch``, ``TrainingOutputBatch`` (names only) -> that class's PlainData of
  ``{"batch_dict": {key: array | None | [array, ...]}, "batch_size": int | None,
  "device": str | None, "metadata": dict | None}``; each tensor, written as
  ``{"format": "numpy", "data", "shape", "dtype"}`` (or without ``format``, its older form), is a
  view of its bytes; ``{"format": "torch", "data"}`` (bfloat16) is decoded from its torch.save
  bytes (as float32); ``{"format": "tensor_list", "items"}`` is a list of arrays.
* verl (verl-project/verl@1dda039b9c63 verl/protocol.py:377-402): ``verl.protocol.DataProto``,
  NEWOBJ then BUILD of ``(torch.save bytes of a TensorDict or of None, non_tensor_batch,
  meta_info)`` -> ``{"batch": TensorDictData | None, "non_tensor_batch": {key: array},
  "meta_info": dict}``.
* ROLL (alibaba/ROLL@8eb27cc2dc34 roll/distributed/scheduler/protocol.py:321-328):
  ``roll.distributed.scheduler.protocol.DataProto``, BUILD of ``(io.BytesIO of torch.save bytes,
  non_tensor_batch, remote_batch (None), meta_info)`` -> the same three keys as verl's.
* ``_io.BytesIO``: NEWOBJ then BUILD of ``(bytes, position, dict | None)`` -> a ``BytesIOData``
  holding the bytes (``.data``).
* miles (radixark/miles@31f1ca96 miles/utils/types.py:9-23): ``AdapterRef``, ``RewardSpec``,
  the frozen dataclasses of ``Sample.adapter`` / ``Sample.reward_spec``: the base PlainData form.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .context import current
from .errors import PickleFormatError
from .numpy_globals import resolved
from .plain import PlainData, check, plain_class
from .tensordict_globals import TensorDictData

# --------------------------------------------------------------------------- io.BytesIO


class BytesIOData:
    """An ``io.BytesIO`` read as its bytes (``data``); nothing of it is run."""

    __slots__ = ("data",)

    def __new__(cls, *args: Any) -> "BytesIOData":
        if args:
            raise PickleFormatError("pickle tried to create _io.BytesIO with arguments")
        obj = object.__new__(cls)
        obj.data = None
        return obj

    def __setstate__(self, state: Any) -> None:
        check(self.data is None and type(state) is tuple and len(state) == 3 and type(state[0]) is bytes
              and type(state[1]) is int and (state[2] is None or type(state[2]) is dict),
              "_io.BytesIO: BUILD takes only (bytes, position, dict or None), once")
        self.data = state[0]

    def __reduce__(self):
        raise TypeError("plain data read from a pickle is not picklable")

    def __repr__(self) -> str:
        return f"BytesIO({len(self.data or b'')} bytes)"


# --------------------------------------------------------------------------- SkyRL

SKYRL_MODULE = "skyrl.backends.skyrl_train.training_batch"
_SKYRL_DTYPES = frozenset(
    ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64"]
)


class _SkyRLBatch(PlainData):
    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        raise PickleFormatError(f"pickle tried to BUILD {self._class_name}; SkyRL writes it through _rebuild_tensor_batch")


SKYRL_CLASSES = {name: plain_class(f"{SKYRL_MODULE}.{name}", _SkyRLBatch)
                 for name in ("TensorBatch", "TrainingInputBatch", "TrainingOutputBatch")}


def _skyrl_tensor(value: Any, key: str) -> Any:
    check(type(value) is dict, f"SkyRL batch_dict[{key!r}]: expected a serialized tensor, got {type(value).__name__}")
    fmt = value.get("format", "numpy")
    if fmt == "tensor_list":
        items = value.get("items")
        check(type(items) is list and set(value) == {"format", "items"}, f"SkyRL batch_dict[{key!r}]: malformed tensor_list")
        return [_skyrl_tensor(v, f"{key}[{i}]") for i, v in enumerate(items)]
    if fmt == "torch":
        check(set(value) == {"format", "data"} and type(value["data"]) is bytes, f"SkyRL batch_dict[{key!r}]: malformed torch tensor")
        arr = current().torch_bytes(value["data"], f"SkyRL tensor {key!r}")
        check(isinstance(arr, np.ndarray), f"SkyRL batch_dict[{key!r}]: torch.save bytes hold a {type(arr).__name__}, not a tensor")
        return arr
    check(fmt == "numpy" and set(value) - {"format"} == {"data", "shape", "dtype"}, f"SkyRL batch_dict[{key!r}]: malformed tensor")
    data, shape, dtype = value["data"], value["shape"], value["dtype"]
    check(type(data) is bytes and dtype in _SKYRL_DTYPES, f"SkyRL batch_dict[{key!r}]: dtype {dtype!r:.40} or data not read")
    shape = tuple(shape) if type(shape) in (tuple, list) else shape
    check(type(shape) is tuple and all(type(v) is int and v >= 0 for v in shape), f"SkyRL batch_dict[{key!r}]: bad shape {shape!r:.60}")
    dt = np.dtype(dtype)
    n = 1
    for v in shape:
        n *= v
    check(n * dt.itemsize == len(data), f"SkyRL batch_dict[{key!r}]: {len(data)} bytes for shape {shape} of {dtype}")
    return np.frombuffer(data, dtype=dt).reshape(shape)


def _rebuild_tensor_batch(cls: Any, state: Any, *rest: Any) -> PlainData:
    check(not rest and cls in SKYRL_CLASSES.values() and type(state) is dict
          and set(state) == {"batch_dict", "batch_size", "device", "metadata"},
          "_rebuild_tensor_batch: only (a TensorBatch class, its state dict) is accepted")
    batch, size, device, metadata = state["batch_dict"], state["batch_size"], state["device"], state["metadata"]
    check(type(batch) is dict and (size is None or type(size) is int) and (device is None or type(device) is str)
          and (metadata is None or type(metadata) is dict), "_rebuild_tensor_batch: malformed state")
    out = cls.__new__(cls)
    dict.update(out, {
        "batch_dict": {k: None if v is None else _skyrl_tensor(v, k) for k, v in batch.items()},
        "batch_size": size, "device": device, "metadata": metadata,
    })
    return out


# --------------------------------------------------------------------------- verl and ROLL


def _decode_batch(data: Any, what: str) -> Any:
    batch = current().torch_bytes(data, what)
    check(batch is None or isinstance(batch, TensorDictData), f"{what}: holds a {type(batch).__name__}, not a TensorDict")
    return batch


def _check_non_tensor(value: Any, where: str) -> dict:
    if type(value) is dict:
        value = {k: resolved(v) for k, v in value.items()}
    check(type(value) is dict and all(type(k) is str and isinstance(v, np.ndarray) for k, v in value.items()),
          f"{where}: non_tensor_batch: expected a dict of numpy arrays")
    return value


class _DataProto(PlainData):
    __slots__ = ()

    def _fill(self, batch: Any, non_tensor: Any, meta: Any) -> None:
        check(not self, f"pickle tried to BUILD {self._class_name} twice")
        check(type(meta) is dict, f"{self._class_name}: meta_info: expected a dict")
        dict.update(self, {"batch": batch, "non_tensor_batch": _check_non_tensor(non_tensor, self._class_name), "meta_info": meta})


class _VerlDataProto(_DataProto):
    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        check(type(state) is tuple and len(state) == 3 and (state[0] is None or type(state[0]) is bytes),
              "verl DataProto: BUILD takes only (torch.save bytes, non_tensor_batch, meta_info)")
        batch = None if state[0] is None else _decode_batch(state[0], "verl DataProto batch")
        self._fill(batch, state[1], state[2])


class _RollDataProto(_DataProto):
    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        check(type(state) is tuple and len(state) == 4 and isinstance(state[0], BytesIOData) and state[0].data is not None
              and state[2] is None,
              "ROLL DataProto: BUILD takes only (io.BytesIO of torch.save bytes, non_tensor_batch, None, meta_info)")
        self._fill(_decode_batch(state[0].data, "ROLL DataProto batch"), state[1], state[3])


VERL_DATAPROTO = plain_class("verl.protocol.DataProto", _VerlDataProto)
ROLL_DATAPROTO = plain_class("roll.distributed.scheduler.protocol.DataProto", _RollDataProto)

# dataclasses read in the base PlainData form: module.name -> the dump content that needs it
_MILES_CLASSES = (
    "miles.utils.types.AdapterRef",  # miles Sample.adapter (multi-LoRA routing)
    "miles.utils.types.RewardSpec",  # miles Sample.reward_spec (per-sample reward dispatch)
)


def framework_functions() -> dict[str, Any]:
    return {f"{SKYRL_MODULE}._rebuild_tensor_batch": _rebuild_tensor_batch}


def framework_classes() -> dict[str, type]:
    """The classes NEWOBJ may instantiate (and ``_rebuild_tensor_batch`` is handed)."""
    out: dict[str, type] = {f"{SKYRL_MODULE}.{name}": cls for name, cls in SKYRL_CLASSES.items()}
    out["verl.protocol.DataProto"] = VERL_DATAPROTO
    out["roll.distributed.scheduler.protocol.DataProto"] = ROLL_DATAPROTO
    out["_io.BytesIO"] = BytesIOData
    out.update({name: plain_class(name) for name in _MILES_CLASSES})
    return out
