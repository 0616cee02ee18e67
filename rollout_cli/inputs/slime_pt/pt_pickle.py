"""Load torch ``.pt`` files (``torch.save`` zip format), safely without torch or in full with it.

slime writes its rollout debug dumps with ``torch.save({"rollout_id": step, "samples": [...]})``.

``load_pt(path)``
    The restricted loader of inputs/pickled (``load_torch``): the zip archive's ``data.pkl``
    unpickled by the C unpickler with every global answered from the one allow-list of
    inputs/pickled/allow.py; tensors come back as numpy arrays with the tensor's dtype, shape,
    strides and storage offset; tensors that shared a storage in torch come back as views of one
    shared buffer (writes through one are seen by the others, as in torch). The device a tensor
    was saved from (``cpu``, ``cuda:0``, ...) is ignored: everything is loaded into host memory.
    Arrays are writable and in little-endian (native) byte order; storages saved on a
    big-endian host are byte-swapped. numpy arrays in the payload (miles R3's
    ``rollout_routed_experts``) come back as numpy arrays.

    * ``bfloat16`` tensors are returned as **float32** arrays (numpy has no bfloat16; the
      conversion is exact). Views sharing a bfloat16 storage share the converted float32 buffer.
    * A bare storage object saved outside a tensor (never the case in slime dumps) comes back as
      an opaque ``_Storage`` object; call its ``numpy()`` for a 1-D array.

``load_pt_trusted(path)``
    ``torch.load(path, weights_only=False, map_location="cpu")`` (torch imported lazily) and the
    same tensor -> numpy conversion. Full unpickling can execute arbitrary code: only for files
    the user trusts (the CLI's ``--trust-pickle``).
"""
from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any

import numpy as np

from ...core.tensors import WidenedBFloat16
from ..pickled import ALLOWED_GLOBALS, PlainData, PtFormatError, UnsafePickleError
from ..pickled import load_torch as load_pt

__all__ = [
    "ALLOWED_GLOBALS",
    "PlainData",
    "PtFormatError",
    "UnsafePickleError",
    "load_pt",
    "load_pt_trusted",
]


# --------------------------------------------------------------------------- trusted path


def load_pt_trusted(path: str | os.PathLike[str]) -> Any:
    """``torch.load(weights_only=False)`` -- runs arbitrary pickled code; only for trusted files.

    Tensors anywhere in dicts/lists/tuples/OrderedDicts/namedtuples are converted to numpy arrays exactly as
    ``load_pt`` returns them (bfloat16 -> float32; conj/neg bits applied; views of one storage
    share memory). Other objects are returned as torch unpickled them.
    """
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is optional
        raise ImportError("loading with --trust-pickle needs torch installed") from e
    fspath = os.fspath(path)
    try:
        obj = torch.load(fspath, weights_only=False, map_location="cpu")
    except OSError:
        raise
    except Exception as e:
        raise PtFormatError(f"torch.load failed: {type(e).__name__}: {str(e)[:300]}", os.fsdecode(fspath)) from e
    return _TorchToNumpy(torch).convert(obj)


class _TorchToNumpy:
    _SCALARS = (str, int, float, bool, type(None), bytes, complex)

    def __init__(self, torch: Any):
        self.torch = torch
        self.memo: dict[int, Any] = {}
        self.bf16_bases: dict[tuple[int, int], np.ndarray] = {}

    def convert(self, obj: Any) -> Any:
        t = type(obj)
        if t in self._SCALARS:
            return obj
        if t is dict:
            return {k: self.convert(v) for k, v in obj.items()}
        if t is list:
            return [self.convert(v) for v in obj]
        if isinstance(obj, self.torch.Tensor):
            key = id(obj)
            out = self.memo.get(key)
            if out is None:
                out = self.memo[key] = self.tensor(obj)
            return out
        if t is tuple:
            return tuple(self.convert(v) for v in obj)
        if t is OrderedDict:
            return OrderedDict((k, self.convert(v)) for k, v in obj.items())
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
            return t(*(self.convert(v) for v in obj))
        return obj

    def tensor(self, t: Any) -> np.ndarray:
        torch = self.torch
        t = t.detach()
        if t.layout != torch.strided:
            t = t.to_dense()
        if t.is_quantized:
            t = t.dequantize()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.is_conj() or t.is_neg():
            return t.resolve_conj().resolve_neg().numpy()
        if t.dtype == torch.bfloat16:
            return self._bf16(t)
        try:
            return t.numpy()
        except (TypeError, RuntimeError):  # dtypes numpy lacks (float8, complex32, ...)
            return t.to(torch.complex64 if t.is_complex() else torch.float32).numpy()

    def _bf16(self, t: Any) -> np.ndarray:
        # widen the whole storage once, so views of one bfloat16 storage share the float32 buffer
        torch = self.torch
        st = t.untyped_storage()
        key = (st.data_ptr(), st.nbytes())
        base = self.bf16_bases.get(key)
        if base is None:
            whole = torch.empty(0, dtype=torch.bfloat16).set_(st, 0, (st.nbytes() // 2,), (1,))
            base = self.bf16_bases[key] = whole.float().numpy()
        shape = tuple(t.shape)
        if 0 in shape:
            return np.empty(shape, np.float32).view(WidenedBFloat16)
        arr = np.ndarray(shape, np.float32, buffer=base, offset=t.storage_offset() * 4, strides=tuple(s * 4 for s in t.stride()))
        return arr.view(WidenedBFloat16)  # stored back as bfloat16 (core/tensors.py)
