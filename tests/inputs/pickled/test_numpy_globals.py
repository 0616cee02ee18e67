"""numpy's pickle globals (rollout_cli.inputs.pickled.numpy_globals): arrays and scalars of
every protocol under numpy 1's and numpy 2's module paths, object arrays with restricted items,
and each global refusing arguments numpy never writes."""
from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

from rollout_cli.inputs.pickled import PickleFormatError, UnsafePickleError, loads_pickle

VALUES = {
    "i32": np.arange(12, dtype=np.int32).reshape(3, 4),
    "f64": np.linspace(0, 1, 5),
    "bool": np.array([True, False]),
    "u16_be": np.arange(3, dtype=">u2"),
    "fortran": np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3)),
    "empty": np.zeros((0, 3), np.float32),
    "str": np.array(["ab", "c"]),
    "obj": np.array([np.array([np.arange(2), "x"], dtype=object), {"k": [1]}, None], dtype=object),
    "scalar_f": np.float64(2.5),
    "scalar_i": np.int32(-7),
}


def _equal(a, b) -> bool:
    if isinstance(a, np.ndarray):
        if not isinstance(b, np.ndarray) or a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype == object:
            return all(_equal(x, y) for x, y in zip(a.ravel(), b.ravel()))
        return bool((a == b).all())
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.parametrize("core", ["numpy._core", "numpy.core"])
def test_arrays_and_scalars_under_both_module_paths(protocol, core):
    raw = pickle.dumps(VALUES, protocol=protocol)
    assert b"numpy._core" in raw
    if core == "numpy.core":  # numpy 1 writes the same stream under numpy.core
        raw = _renamed(raw, protocol)
        assert b"numpy._core" not in raw and b"numpy.core" in raw
    out = loads_pickle(raw, "values")
    expected = pickle.loads(pickle.dumps(VALUES, protocol=protocol))  # numpy's own way back
    for key in VALUES:
        assert _equal(expected[key], out[key]), key
    assert out["i32"].tolist() == VALUES["i32"].tolist() and out["obj"][1] == {"k": [1]}
    assert type(out["scalar_f"]) is np.float64 and type(out["scalar_i"]) is np.int32


def _renamed(raw: bytes, protocol: int) -> bytes:
    """The stream as numpy 1 writes it: module numpy.core instead of numpy._core (protocol 2-3
    name globals as text lines; 4-5 in framed short strings, re-pickled unframed here)."""
    if protocol < 4:
        return raw.replace(b"numpy._core.", b"numpy.core.")
    import pickletools

    out = bytearray(raw[:2])
    for op, arg, pos in pickletools.genops(raw):
        if op.name == "FRAME":
            continue
        end = _next_pos(raw, pos, op)
        chunk = raw[pos:end]
        if op.name == "SHORT_BINUNICODE" and arg.startswith("numpy._core."):
            text = arg.replace("numpy._core.", "numpy.core.").encode()
            chunk = b"\x8c" + bytes([len(text)]) + text
        if op.name != "PROTO":
            out += chunk
    return bytes(out)


def _next_pos(raw, pos, op):
    import pickletools

    for op2, _, pos2 in pickletools.genops(raw[pos:]):
        if pos2 > 0:
            return pos + pos2
    return len(raw)


def test_dtype_builds_a_copy_never_numpy_s_shared_dtype():
    shared = np.dtype("i4")
    raw = b"\x80\x02cnumpy\ndtype\nX\x02\x00\x00\x00i4\x89\x88\x87R(K\x03X\x01\x00\x00\x00>NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb."
    got = loads_pickle(raw, "dtype")
    assert got == np.dtype(">i4") and np.dtype("i4") is shared and shared.byteorder == "="


@pytest.mark.parametrize("raw,match", [
    # numpy.dtype: only (type string, False, True)
    (b"\x80\x02cnumpy\ndtype\nX\x02\x00\x00\x00i4\x89\x89\x87R.", "numpy.dtype"),  # copy=False: would alias numpy's dtype
    (b"\x80\x02cnumpy\ndtype\nK\x01\x89\x88\x87R.", "numpy.dtype"),
    (b"\x80\x02cnumpy\ndtype\nX\x07\x00\x00\x00i4,f8xx\x89\x88\x87R.", "numpy.dtype"),
    (b"\x80\x02cnumpy\ndtype\nX\x02\x00\x00\x00zz\x89\x88\x87R.", "numpy.dtype"),
    # _reconstruct: only (numpy.ndarray, (0,), b'b')
    (b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x05\x85C\x01b\x87R.", "_reconstruct"),
    (b"\x80\x02cnumpy._core.multiarray\n_reconstruct\nK\x00K\x00\x85C\x01b\x87R.", "_reconstruct"),
    (b"\x80\x02cnumpy.core.multiarray\n_reconstruct\n(cnumpy\nndarray\nK\x00\x85C\x01bK\x01tR.", "_reconstruct"),
    # numpy.ndarray is a name only: calling it is refused
    (b"\x80\x02cnumpy\nndarray\nK\x03\x85R.", "only names"),
    # _frombuffer: bytes of the right size, a non-object dtype
    (b"\x80\x04cnumpy._core.numeric\n_frombuffer\n(C\x03abccnumpy\ndtype\nX\x02\x00\x00\x00i4\x89\x88\x87RK\x01\x85X\x01\x00\x00\x00CtR.", "bytes for shape"),
    (b"\x80\x04cnumpy._core.numeric\n_frombuffer\n(C\x08abcdefghcnumpy\ndtype\nX\x02\x00\x00\x00O8\x89\x88\x87RK\x01\x85X\x01\x00\x00\x00CtR.", "_frombuffer"),
    (b"\x80\x04cnumpy.core.numeric\n_frombuffer\n(C\x04abcdcnumpy\ndtype\nX\x02\x00\x00\x00i4\x89\x88\x87RK\x01\x85X\x01\x00\x00\x00KtR.", "_frombuffer"),
    # scalar: bytes of the dtype's size, not an object
    (b"\x80\x04cnumpy._core.multiarray\nscalar\ncnumpy\ndtype\nX\x02\x00\x00\x00f8\x89\x88\x87RC\x03abc\x86R.", "scalar"),
    (b"\x80\x04cnumpy.core.multiarray\nscalar\ncnumpy\ndtype\nX\x02\x00\x00\x00O8\x89\x88\x87RK\x01\x86R.", "scalar"),
])
def test_each_global_refuses_what_numpy_never_writes(raw, match):
    with pytest.raises(PickleFormatError, match=match):
        loads_pickle(raw, "bad")


class _Reduce:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def test_object_array_items_are_restricted(tmp_path):
    marker = tmp_path / "ran"
    arr = np.array([1, _Reduce(os.system, f"touch {marker}")], dtype=object)
    for protocol in (2, 4, 5):
        with pytest.raises(UnsafePickleError) as ei:
            loads_pickle(pickle.dumps({"a": arr}, protocol=protocol), "obj")
        assert ei.value.global_name in ("posix.system", "os.system")
    assert not marker.exists()


@pytest.mark.parametrize("name", [b"numpy\nload\n", b"numpy.core.multiarray\nfromstring\n", b"numpy._core.numeric\nfromfile\n",
                                  b"numpy.lib.npyio\nload\n", b"numpy\nfrombuffer\n", b"numpy.core.multiarray\n_vec_string\n"])
def test_numpy_s_other_functions_are_refused(name):
    with pytest.raises(UnsafePickleError) as ei:
        loads_pickle(b"\x80\x02c" + name + b")R.", "other")
    assert ei.value.global_name == ".".join(name.decode().split("\n")[:2])


def _types(value, seen=None):
    """Every array's exact type in `value`, and the other objects' types, as a set."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return set()
    seen.add(id(value))
    out = {type(value)}
    items = (value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple))
             else value.ravel() if isinstance(value, np.ndarray) and value.dtype.hasobject else ())
    for v in items:
        out |= _types(v, seen)
    return out


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_arrays_anywhere_come_back_as_plain_arrays_sharing_as_pickled(protocol):
    a, b = np.arange(3), np.array(["x", {"in": np.ones(2)}], dtype=object)
    cyclic: list = [a]
    cyclic.append(cyclic)
    value = {"tuple": (a, [b, {"k": (a,)}]), "same": a, "set": frozenset({1}), "cyclic": cyclic,
             "dtype": np.dtype(">f4"), "obj_in_tuple": ((b,),)}
    got = loads_pickle(pickle.dumps(value, protocol=protocol), "nested.pkl")
    assert _equal(got["tuple"][0], a) and _equal(got["tuple"][1][0], b)
    assert got["same"] is got["tuple"][0] is got["tuple"][1][1]["k"][0]  # one array, as pickled
    assert got["cyclic"][1] is got["cyclic"] and got["cyclic"][0] is got["same"]
    assert got["dtype"] == np.dtype(">f4") and type(got["dtype"]) is type(np.dtype(">f4"))
    assert got["obj_in_tuple"][0][0] is got["tuple"][1][0]
    kinds = {t.__module__.split(".")[0] for t in _types(got)}
    assert kinds <= {"builtins", "numpy"}, _types(got)  # no stand-in left anywhere
    assert np.ndarray in _types(got)
