"""The tensor rebuild of the torch-free `.pt` loader: torch's dtypes and storage classes as
inert tokens, storages as numpy buffers read from the archive, and `_rebuild_tensor_v2` making a
strided numpy view of a storage (bfloat16 widened to float32, or, for a load that asks for them,
kept as its bit patterns; big-endian storages swapped)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...core.tensors import BFloat16Bits, WidenedBFloat16
from .errors import PtFormatError

# --------------------------------------------------------------------------- dtypes and tokens


class _Frozen:
    """Base for allowlisted objects: immutable, refuses pickle BUILD (__setstate__)."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise PtFormatError(f"pickle tried to set attribute {name!r} on {self!r}")

    def __delattr__(self, name: str) -> None:
        raise PtFormatError(f"pickle tried to delete attribute {name!r} on {self!r}")

    def __setstate__(self, state: Any) -> None:
        raise PtFormatError(f"pickle tried to BUILD {self!r}")

    def __reduce__(self):  # never re-pickle these tokens
        raise TypeError(f"{self!r} cannot be pickled")


class _DType(_Frozen):
    """A torch dtype as stored on disk: numpy element type (little-endian) and how to present it."""

    __slots__ = ("name", "file_dtype", "itemsize")

    def __init__(self, name: str, file_dtype: str):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "file_dtype", np.dtype(file_dtype))
        object.__setattr__(self, "itemsize", np.dtype(file_dtype).itemsize)

    def __repr__(self) -> str:
        return f"<pt_pickle dtype torch.{self.name}>"


# file_dtype is the on-disk element type in little-endian order. bfloat16 is read as uint16 and
# widened to float32 (see _Storage.base).
_DTYPES = {
    d.name: d
    for d in (
        _DType("bool", "|b1"),
        _DType("uint8", "|u1"),
        _DType("int8", "|i1"),
        _DType("int16", "<i2"),
        _DType("int32", "<i4"),
        _DType("int64", "<i8"),
        _DType("float16", "<f2"),
        _DType("float32", "<f4"),
        _DType("float64", "<f8"),
        _DType("bfloat16", "<u2"),
    )
}
_BF16 = _DTYPES["bfloat16"]


class _StorageKind(_Frozen):
    """Token for a torch storage class; ``dtype`` is None for UntypedStorage (bytes)."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: _DType | None):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dtype", dtype)

    def __repr__(self) -> str:
        return f"<pt_pickle storage class torch.{self.name}>"


_LEGACY_STORAGES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
}


class _Storage:
    """One storage record of the archive: raw bytes, plus element arrays built from them (cached
    per dtype so that all tensors viewing this storage share one buffer). `bits`: bfloat16 is
    read as its 16-bit patterns (a view of the bytes), not widened to float32 (a new buffer of
    twice the size)."""

    __slots__ = ("key", "kind", "nbytes", "_raw", "_bases", "_little", "bits")

    def __init__(self, key: str, kind: _StorageKind, nbytes: int, raw: Any, little: bool, bits: bool = False):
        self.bits = bits
        self.key = key
        self.kind = kind
        self.nbytes = nbytes
        self._raw = raw  # writable (a buffer of the file's bytes) or a read-only view of bytes in memory, at least nbytes
        self._bases: dict[str, np.ndarray] = {}
        self._little = little

    def __setstate__(self, state: Any) -> None:
        raise PtFormatError("pickle tried to BUILD a storage")

    def __repr__(self) -> str:
        return f"<pt_pickle storage {self.key!r} {self.kind.name} {self.nbytes} bytes>"

    def base(self, dtype: _DType) -> np.ndarray:
        """The whole storage as a 1-D writable array of `dtype` (float32 for bfloat16, or its
        uint16 bit patterns where `bits`)."""
        arr = self._bases.get(dtype.name)
        if arr is not None:
            return arr
        count = self.nbytes // dtype.itemsize
        fdt = dtype.file_dtype if self._little else dtype.file_dtype.newbyteorder(">")
        if self.nbytes == 0:
            raw = np.empty(0, fdt)
        else:
            raw = np.frombuffer(self._raw, dtype=fdt, count=count)
        if dtype is _BF16 and not self.bits:
            arr = (raw.astype("<u4") << 16).view("<f4")
        elif dtype is _BF16 and fdt.byteorder == ">":
            arr = raw.astype("<u2")
        elif not self._little and fdt.byteorder == ">":
            arr = raw.astype(dtype.file_dtype)
        else:
            arr = raw
        self._bases[dtype.name] = arr
        return arr

    def numpy(self) -> np.ndarray:
        """The storage as a 1-D array (for bare storages; tensors are rebuilt automatically)."""
        return self.base(self.kind.dtype or _DTYPES["uint8"])


def _as_index_tuple(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)):
        raise PtFormatError(f"tensor {what}: expected a tuple of ints, got {type(value).__name__}")
    out = []
    for v in value:
        if type(v) is not int:
            raise PtFormatError(f"tensor {what}: expected ints, got {type(v).__name__}")
        if v < 0:
            raise PtFormatError(f"tensor {what}: negative value {v}")
        out.append(v)
    return tuple(out)


def _check_layout(shape: tuple[int, ...], strides: tuple[int, ...], offset: int, count: int, key: str, name: str) -> None:
    """A tensor of `shape` and `strides` (in elements, non-negative) at `offset` must lie inside
    its storage's `count` elements and never reach one element twice: its dims of more than one
    element, by stride, each step over all the smaller ones (so no stride 0 on such a dim)."""
    last = offset + sum((n - 1) * s for n, s in zip(shape, strides))
    if last >= count:
        raise PtFormatError(f"tensor of size {shape}, stride {strides}, offset {offset} reaches element {last} "
                            f"of storage {key!r}, which has {count} {name} elements")
    extent = 1
    for s, n in sorted((s, n) for n, s in zip(shape, strides) if n > 1):
        if s < extent:
            raise PtFormatError(f"tensor of size {shape}, stride {strides} reaches some elements of storage "
                                f"{key!r} more than once (overlapping or expanded views are not read)")
        extent = s * (n - 1) + extent
    

def _make_view(storage: Any, dtype: _DType, offset: Any, size: Any, stride: Any, metadata: Any) -> np.ndarray:
    if not isinstance(storage, _Storage):
        raise PtFormatError(f"tensor rebuild: expected a storage record, got {type(storage).__name__}")
    if type(offset) is not int or offset < 0:
        raise PtFormatError(f"tensor storage offset: expected a non-negative int, got {offset!r}")
    shape = _as_index_tuple(size, "size")
    strides = _as_index_tuple(stride, "stride")
    if len(shape) != len(strides):
        raise PtFormatError(f"tensor size {shape} and stride {strides} differ in length")
    item = dtype.file_dtype.itemsize
    count = storage.nbytes // item
    if 0 in shape:
        arr = np.ndarray(shape, storage.base(dtype).dtype, buffer=bytearray(0), strides=tuple(s * item for s in strides))
    else:
        _check_layout(shape, strides, offset, count, storage.key, dtype.name)
        base = storage.base(dtype)
        item = base.itemsize
        arr = np.ndarray(shape, base.dtype, buffer=base, offset=offset * item, strides=tuple(s * item for s in strides))
    if metadata:  # conj/neg view bits: complex or negated views, which no rollout dump holds
        raise PtFormatError(f"tensor metadata: unsupported {metadata!r}")
    # marked, so that what stores tensors by dtype (core/tensors.py) keeps them bfloat16
    if dtype is _BF16:
        return arr.view(BFloat16Bits if storage.bits else WidenedBFloat16)
    return arr


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None, *extra):
    if extra:
        raise PtFormatError(f"_rebuild_tensor_v2: {len(extra)} unexpected extra arguments")
    if not isinstance(storage, _Storage) or storage.kind.dtype is None:
        raise PtFormatError("_rebuild_tensor_v2: expected a typed storage record")
    return _make_view(storage, storage.kind.dtype, storage_offset, size, stride, metadata)
