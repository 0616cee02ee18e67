"""numpy's pickle globals, under numpy 1's module paths (``numpy.core.*``) and numpy 2's
(``numpy._core.*``). No real dtype or array is ever handed to the file: the file only holds
stand-ins (``DTypeSpec``, ``ArrayBuild``) whose ``BUILD`` is checked here, and every real value
is made by this module from plain, checked data.

* ``numpy.dtype(str, False, True)`` -> a ``DTypeSpec``: a type string from the closed list of
  ``_KINDS`` (bool, signed and unsigned ints, floats, complex of numpy's sizes; ``U``/``S``/``V``
  of a bounded size; ``O8``, the object dtype, only as an object array's element type). Its one
  ``BUILD`` must be exactly the state numpy writes for that type string, the byte order alone
  free; flags, fields, names, subarrays, sizes and alignment never come from the file, so no
  structured dtype, no subarray dtype and no object field is ever made.
* ``<core>.multiarray._reconstruct(numpy.ndarray, (0,), b"b")`` -> an ``ArrayBuild``, which
  the following ``BUILD`` ``(1, shape, DTypeSpec, is_fortran, data)`` turns into a real array:
  ``data`` bytes of exactly shape x itemsize, or, for an object array, a list of exactly
  shape's item count (items made by the same restricted unpickler). The array is made by numpy's
  own ``ndarray.__setstate__`` from these checked values, on an array of this module's.
* ``<core>.numeric._frombuffer(buffer, DTypeSpec, shape, order)``: protocol 5's form of a
  non-object array: a view of the pickle's own buffer, its byte count checked.
* ``<core>.multiarray.scalar(DTypeSpec, bytes)``: a numpy scalar of a non-object dtype.
* ``numpy.ndarray``: only a name handed to ``_reconstruct``.

An ``ArrayBuild`` stands where the array will be; the unpickler replaces each by its array once
the load is done (unpickle.py), and refuses one that was never built.
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from .context import current
from .errors import PickleFormatError
from .plain import Token, check

NDARRAY = Token("numpy.ndarray")
#: the largest item of a U/S/V dtype a file may name (numpy's own limit is 2**31 - 1)
MAX_FLEXIBLE_ITEM = 1 << 30
# kind -> the item sizes a type string may name; "" for U/S/V: any size up to MAX_FLEXIBLE_ITEM
_KINDS = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8), "c": (8, 16),
          "U": "", "S": "", "V": "", "O": (8,)}
_TYPE_STRING = re.compile(r"([biufcUSVO])([0-9]{1,10})")
_BYTE_ORDERS = ("<", ">", "=", "|")
_CANONICAL: dict[str, tuple[np.dtype, tuple]] = {}


def _canonical(type_string: Any) -> tuple[np.dtype, tuple]:
    """The dtype of a type string from the closed list, and the BUILD state numpy writes for it."""
    known = _CANONICAL.get(type_string) if type(type_string) is str else None
    if known is not None:
        return known
    m = _TYPE_STRING.fullmatch(type_string) if type(type_string) is str else None
    check(m is not None or type_string == "?", f"numpy.dtype: {type_string!r:.40} is not a dtype the reader makes")
    if m is not None:
        kind, size = m.group(1), int(m.group(2))
        sizes = _KINDS[kind]
        check(size in sizes if sizes else 0 < size <= MAX_FLEXIBLE_ITEM // (4 if kind == "U" else 1),
              f"numpy.dtype: {type_string!r} is not a dtype the reader makes")
    dt = np.dtype(type_string)
    check(dt.fields is None and dt.shape == () and (dt.kind == "O") == dt.hasobject,
          f"numpy.dtype: {type_string!r} is not a plain dtype")
    state = dt.__reduce__()[2]
    if len(_CANONICAL) < 4096:
        _CANONICAL[type_string] = (dt, state)
    return dt, state


class DTypeSpec:
    """What ``numpy.dtype(...)`` gives the file: the type string and the byte order its one
    BUILD names; ``dtype()`` is the real dtype, made fresh from them (never handed to the file)."""

    __slots__ = ("_base", "_state", "_order")

    def __init__(self, base: np.dtype, state: tuple):
        self._base, self._state, self._order = base, state, None

    def __setstate__(self, state: Any) -> None:
        want = self._state
        check(self._order is None and type(state) is tuple and len(state) == len(want)
              and type(state[1]) is str and state[1] in _BYTE_ORDERS
              and all(type(a) is type(b) and a == b for i, (a, b) in enumerate(zip(state, want)) if i != 1),
              f"numpy.dtype {self._base.str!r}: BUILD state {state!r:.120} is not the one numpy writes for it")
        self._order = state[1]

    def dtype(self) -> np.dtype:
        order = self._order
        if order in ("<", ">") and self._base.byteorder not in ("|",):
            return self._base.newbyteorder(order)
        return self._base

    def __reduce__(self):
        raise TypeError("plain data read from a pickle is not picklable")

    def __repr__(self) -> str:
        return f"<pickled dtype {self.dtype().str}>"


def _dtype(obj: Any, align: Any = False, copy: Any = True, *rest: Any) -> DTypeSpec:
    check(not rest and type(obj) is str and align is False and copy is True,
          f"numpy.dtype: only (type string, False, True) is accepted, got {(obj, align, copy, *rest)!r:.80}")
    spec = DTypeSpec(*_canonical(obj))
    current().builds.append(spec)  # a dtype left in the data is replaced by its real dtype
    return spec


def _plain_dtype(spec: Any, what: str) -> np.dtype:
    check(type(spec) is DTypeSpec, f"{what}: expected a dtype, got {type(spec).__name__}")
    dt = spec.dtype()
    check(not dt.hasobject, f"{what}: an object dtype is not accepted here")
    return dt


def _check_text(dt: np.dtype, data: Any, what: str) -> None:
    """A ``U`` dtype's bytes must be code points Python can hold (at most U+10FFFF): numpy hands
    out any UCS4 value, and making a str of one past it is a SystemError."""
    if dt.kind == "U" and len(data):
        units = np.frombuffer(data, dtype=dt.byteorder.replace("=", "").replace("|", "") + "u4"
                              if dt.byteorder in "<>" else "=u4")
        if int(units.max()) > 0x10FFFF:
            raise PickleFormatError(f"{what}: text of {dt.str} holds a code point past U+10FFFF")


def _count(shape: Any, what: str) -> tuple[tuple[int, ...], int]:
    # the messages are formatted only on failure: this runs once per array
    if type(shape) is not tuple or not all(type(v) is int and v >= 0 for v in shape):
        raise PickleFormatError(f"{what}: expected a tuple of non-negative ints, got {shape!r:.80}")
    n = 1
    for v in shape:
        n *= v
    return shape, n


class ArrayBuild:
    """What ``_reconstruct`` gives the file: the place of an array until its one BUILD, which
    makes the real array (``array``) from checked values."""

    __slots__ = ("array",)
    __hash__ = None  # as an array: never a dict key or set member

    def __init__(self) -> None:
        self.array = None

    def __setstate__(self, state: Any) -> None:
        if (self.array is not None or type(state) is not tuple or len(state) != 5 or type(state[0]) is not int
                or state[0] != 1 or type(state[3]) not in (bool, int) or state[3] not in (0, 1)):
            raise PickleFormatError("numpy array: BUILD takes only (1, shape, dtype, is_fortran, data), once")
        _, shape, spec, fortran, data = state
        shape, n = _count(shape, "numpy array shape")
        if type(spec) is not DTypeSpec:
            raise PickleFormatError(f"numpy array: expected a dtype, got {type(spec).__name__}")
        dt = spec.dtype()
        if dt.hasobject:
            if type(data) is not list or len(data) != n:
                raise PickleFormatError(f"numpy object array: {n} items for shape {shape}, got "
                                        f"{len(data) if type(data) is list else type(data).__name__}")
            if not _ATOMS.issuperset(map(type, data)):
                data = [resolved(v) for v in data]
        elif type(data) is not bytes or len(data) != n * dt.itemsize:
            raise PickleFormatError(f"numpy array: {len(data) if type(data) is bytes else type(data).__name__} bytes "
                                    f"for shape {shape} of {dt.str}")
        else:
            _check_text(dt, data, "numpy array")
        arr = np.ndarray((0,), np.int8)
        try:
            arr.__setstate__((1, shape, dt, bool(fortran), data))
        except (ValueError, TypeError, MemoryError, OverflowError) as e:
            raise PickleFormatError(f"numpy array: {type(e).__name__}: {e}") from None
        self.array = arr

    def __reduce__(self):
        raise TypeError("plain data read from a pickle is not picklable")

    def __repr__(self) -> str:
        return "<pickled array, not built>" if self.array is None else repr(self.array)


def resolved(value: Any) -> Any:
    """`value`, or the array an ``ArrayBuild`` made (an unbuilt one refused)."""
    if type(value) is ArrayBuild:
        check(value.array is not None, "numpy array used before its BUILD")
        return value.array
    return value


def _reconstruct(subtype: Any, shape: Any, code: Any, *rest: Any) -> ArrayBuild:
    if rest or subtype is not NDARRAY or type(shape) is not tuple or shape != (0,) or code != b"b":
        raise PickleFormatError("numpy _reconstruct: only (numpy.ndarray, (0,), b'b') is accepted, "
                                f"got {(subtype, shape, code, *rest)!r:.80}")
    build = ArrayBuild()
    current().builds.append(build)
    return build


def _frombuffer(buf: Any, dtype: Any, shape: Any, order: Any, *rest: Any) -> np.ndarray:
    check(not rest and type(buf) in (bytes, bytearray) and order in ("C", "F"),
          "numpy _frombuffer: only (bytes, non-object dtype, shape, 'C' or 'F') is accepted")
    dt = _plain_dtype(dtype, "numpy _frombuffer")
    shape, n = _count(shape, "numpy _frombuffer shape")
    check(n * dt.itemsize == len(buf), f"numpy _frombuffer: {len(buf)} bytes for shape {shape} of {dt}")
    _check_text(dt, buf, "numpy _frombuffer")
    return np.frombuffer(buf, dtype=dt).reshape(shape, order=order)


def _scalar(dtype: Any, data: Any = None, *rest: Any) -> Any:
    check(not rest and type(data) is bytes, "numpy scalar: only (non-object dtype, bytes of its size) is accepted")
    dt = _plain_dtype(dtype, "numpy scalar")
    check(len(data) == dt.itemsize, f"numpy scalar: {len(data)} bytes for one {dt.str}")
    _check_text(dt, data, "numpy scalar")
    return np.frombuffer(data, dtype=dt, count=1)[0]


def numpy_globals() -> dict[str, Any]:
    """``module.name`` -> function or token, for numpy 1 and numpy 2 paths."""
    table: dict[str, Any] = {"numpy.ndarray": NDARRAY, "numpy.dtype": _dtype}
    for core in ("numpy.core", "numpy._core"):
        table[f"{core}.multiarray._reconstruct"] = _reconstruct
        table[f"{core}.multiarray.scalar"] = _scalar
        table[f"{core}.numeric._frombuffer"] = _frombuffer
    return table


# --------------------------------------------------------------------------- after the load

_ATOMS = frozenset({int, float, bool, str, bytes, bytearray, type(None), complex})


def _plain_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) and not value.dtype.hasobject


def _swap(obj: Any, seen: dict) -> Any:
    """`obj` with every ArrayBuild in it replaced by its array: lists, dicts and object arrays
    in place, tuples rebuilt."""
    t = type(obj)
    if t is ArrayBuild:
        return _swap(resolved(obj), seen)  # an object array's items may hold more
    if t is DTypeSpec:
        return obj.dtype()
    if t in _ATOMS or isinstance(obj, np.generic) or _plain_array(obj):
        return obj
    key = id(obj)
    if key in seen:
        return seen[key]
    seen[key] = obj
    if isinstance(obj, dict):
        values = obj.values()
        if not set(map(type, values)) <= _ATOMS:
            for k, v in list(obj.items()):
                new = _swap(v, seen)
                if new is not v:
                    dict.__setitem__(obj, k, new)
    elif isinstance(obj, list):
        if not set(map(type, obj)) <= _ATOMS:
            for i, v in enumerate(obj):
                new = _swap(v, seen)
                if new is not v:
                    list.__setitem__(obj, i, new)
    elif t is tuple:
        if not set(map(type, obj)) <= _ATOMS:
            items = tuple(_swap(v, seen) for v in obj)
            if any(a is not b for a, b in zip(items, obj)):
                seen[key] = items
                return items
    elif isinstance(obj, np.ndarray):  # an object array: its items
        flat = obj.reshape(-1, order="A") if obj.flags.forc else obj.ravel(order="K")
        for i, v in enumerate(flat):
            new = _swap(v, seen)
            if new is not v:
                flat[i] = new
    return obj


def _outside(builds: list) -> int:
    """How many references to `builds` there are besides the list's own (and this loop's)."""
    import sys

    return sum(sys.getrefcount(b) - 3 for b in builds)


def replace_builds(box: list, builds: list) -> Any:
    """The value a load made (``box[0]``, boxed so that no other reference to it is held), its
    ArrayBuild and DTypeSpec stand-ins (`builds`) replaced by their arrays and dtypes; a stand-in never built, or held where this
    walk does not look, is a PickleFormatError. The unpickler's memo must be gone (its
    references would count)."""
    if builds and _outside(builds):
        try:
            _swap(box, {})
        except RecursionError:
            raise PickleFormatError("data nested too deeply to read") from None
        if _outside(builds):  # garbage cycles the file made may hold some: collect them first
            import gc

            gc.collect()
            check(not _outside(builds), "numpy array in a place the reader does not read")
    builds.clear()
    return box.pop()
