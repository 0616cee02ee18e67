"""numpy's pickle globals, under numpy 1's module paths (``numpy.core.*``) and numpy 2's
(``numpy._core.*``), each a function of this package with numpy's own arguments checked:

* ``numpy.dtype(str, False, True)``: a *copy* of the dtype (so the ``BUILD`` that follows sets
  its byte order on that copy, never on numpy's shared dtype), from a type string only.
* ``<core>.multiarray._reconstruct(numpy.ndarray, (0,), b"b")``: an empty array that the
  following ``BUILD`` fills from ``(version, shape, dtype, is_fortran, data)``; ``data`` is raw
  bytes, or for an object array a list of items the same restricted unpickler made.
* ``<core>.numeric._frombuffer(buffer, dtype, shape, order)``: protocol 5's form of a
  non-object array: a view of the pickle's own buffer, never a copy.
* ``<core>.multiarray.scalar(dtype, bytes)``: a numpy scalar of a non-object dtype.
* ``numpy.ndarray``: only a name handed to ``_reconstruct``.
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from .errors import PickleFormatError
from .plain import Token, check

NDARRAY = Token("numpy.ndarray")
_DTYPE_STR = re.compile(r"[a-zA-Z?][0-9]*")


def _dtype(obj: Any, align: Any = False, copy: Any = True, *rest: Any) -> np.dtype:
    check(not rest and type(obj) is str and _DTYPE_STR.fullmatch(obj) is not None
          and align is False and copy is True,
          f"numpy.dtype: only (type string, False, True) is accepted, got {(obj, align, copy, *rest)!r:.80}")
    try:
        return np.dtype(obj, align=False, copy=True)
    except TypeError as e:
        raise PickleFormatError(f"numpy.dtype: {obj!r} is not a numpy type string") from e


def _reconstruct(subtype: Any, shape: Any, code: Any, *rest: Any) -> np.ndarray:
    check(not rest and subtype is NDARRAY and shape == (0,) and type(shape) is tuple and code == b"b",
          f"numpy _reconstruct: only (numpy.ndarray, (0,), b'b') is accepted, got {(subtype, shape, code, *rest)!r:.80}")
    return np.ndarray((0,), np.int8)


def _shape(value: Any, what: str) -> tuple[int, ...]:
    check(type(value) is tuple and all(type(v) is int and v >= 0 for v in value),
          f"{what}: expected a tuple of non-negative ints, got {value!r:.80}")
    return value


def _frombuffer(buf: Any, dtype: Any, shape: Any, order: Any, *rest: Any) -> np.ndarray:
    check(not rest and type(buf) in (bytes, bytearray) and isinstance(dtype, np.dtype) and not dtype.hasobject
          and order in ("C", "F"),
          "numpy _frombuffer: only (bytes, non-object dtype, shape, 'C' or 'F') is accepted")
    shape = _shape(shape, "numpy _frombuffer shape")
    n = 1
    for v in shape:
        n *= v
    check(n * dtype.itemsize == len(buf), f"numpy _frombuffer: {len(buf)} bytes for shape {shape} of {dtype}")
    return np.frombuffer(buf, dtype=dtype).reshape(shape, order=order)


def _scalar(dtype: Any, data: Any = None, *rest: Any) -> Any:
    check(not rest and isinstance(dtype, np.dtype) and not dtype.hasobject and type(data) is bytes
          and len(data) == dtype.itemsize,
          "numpy scalar: only (non-object dtype, bytes of its size) is accepted")
    return np.frombuffer(data, dtype=dtype, count=1)[0]


def numpy_globals() -> dict[str, Any]:
    """``module.name`` -> function or token, for numpy 1 and numpy 2 paths."""
    table: dict[str, Any] = {"numpy.ndarray": NDARRAY, "numpy.dtype": _dtype}
    for core in ("numpy.core", "numpy._core"):
        table[f"{core}.multiarray._reconstruct"] = _reconstruct
        table[f"{core}.multiarray.scalar"] = _scalar
        table[f"{core}.numeric._frombuffer"] = _frombuffer
    return table
