"""Tests of rollout_cli.inputs.slime_pt.pt_pickle: the torch-free restricted loader of torch.save zip files."""
from __future__ import annotations

import io
import math
import os
import pickle
import pickletools
import struct
import subprocess
import sys
import tempfile
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[3]
try:
    from rollout_cli.inputs.slime_pt import pt_pickle
except ImportError:  # run from elsewhere without the repo on sys.path
    sys.path.insert(0, str(REPO))
    from rollout_cli.inputs.slime_pt import pt_pickle

from rollout_cli.inputs.pickled import allow
from rollout_cli.inputs.slime_pt.pt_pickle import PtFormatError, UnsafePickleError, load_pt, load_pt_trusted

# slime's dumps (sample_data/prime_rl holds a stand-in checkpoint file, not a torch dump)
SAMPLE_PT = sorted(p for p in (REPO / "sample_data").rglob("*.pt") if "prime_rl" not in p.parts)

# --------------------------------------------------------------------------- comparison helpers


def _torch_expected_dtype(t: torch.Tensor) -> np.dtype:
    if t.dtype == torch.bfloat16:
        return np.dtype(np.float32)
    return torch.empty(0, dtype=t.dtype).numpy().dtype


def _torch_values(t: torch.Tensor) -> np.ndarray:
    t = t.detach().resolve_conj().resolve_neg()
    if t.dtype == torch.bfloat16:
        return t.float().numpy()
    return t.numpy()


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def assert_matches_torch(ref, got, where="$", pairs=None):
    """`got` (numpy world) equals `ref` (as torch.load returned it); tensors are collected into
    `pairs` for the storage-sharing check."""
    top = pairs is None
    if top:
        pairs = []
    if isinstance(ref, torch.Tensor):
        assert isinstance(got, np.ndarray), f"{where}: expected ndarray, got {type(got).__name__}"
        assert got.dtype == _torch_expected_dtype(ref), f"{where}: dtype {got.dtype} vs {ref.dtype}"
        assert got.shape == tuple(ref.shape), f"{where}: shape {got.shape} vs {tuple(ref.shape)}"
        assert np.array_equal(got, _torch_values(ref), equal_nan=got.dtype.kind in "fc"), f"{where}: values differ"
        if ref.numel() > 0 and not (ref.is_conj() or ref.is_neg()):
            want = tuple(s * got.itemsize for s in ref.stride())
            assert got.strides == want, f"{where}: strides {got.strides} vs {want}"
        pairs.append((where, ref, got))
    elif isinstance(ref, float):
        assert type(got) is float, where
        assert (math.isnan(ref) and math.isnan(got)) or ref == got, f"{where}: {got!r} vs {ref!r}"
    elif isinstance(ref, (dict, list, tuple)):
        assert type(got) is type(ref), f"{where}: {type(got).__name__} vs {type(ref).__name__}"
        assert len(got) == len(ref), f"{where}: length {len(got)} vs {len(ref)}"
        if isinstance(ref, dict):
            assert list(got) == list(ref), f"{where}: keys differ"
            for k in ref:
                assert_matches_torch(ref[k], got[k], f"{where}[{k!r}]", pairs)
        else:
            for i, (r, g) in enumerate(zip(ref, got)):
                assert_matches_torch(r, g, f"{where}[{i}]", pairs)
    else:
        assert type(got) is type(ref), f"{where}: {type(got).__name__} vs {type(ref).__name__}"
        assert got == ref, f"{where}: {got!r} vs {ref!r}"
    if top:
        _check_sharing(pairs)


def _check_sharing(pairs):
    """Tensors sharing a torch storage share one numpy buffer at the same relative element
    offsets; tensors of different storages do not overlap; the same tensor gives the same array."""
    for i, (wa, ta, ga) in enumerate(pairs):
        for wb, tb, gb in pairs[i + 1 :]:
            if ta is tb:
                assert ga is gb, f"{wa} and {wb} are one tensor but two arrays"
                continue
            if ta.numel() == 0 or tb.numel() == 0 or ta.is_conj() or tb.is_conj() or ta.is_neg() or tb.is_neg():
                continue
            same = ta.untyped_storage().data_ptr() == tb.untyped_storage().data_ptr()
            if same:
                delta = (ta.storage_offset() - tb.storage_offset()) * ga.itemsize
                assert _addr(ga) - _addr(gb) == delta, f"{wa} and {wb}: storage offsets not preserved"
            else:
                assert not np.shares_memory(ga, gb), f"{wa} and {wb} overlap but had distinct storages"


def save(obj, path, **kw):
    torch.save(obj, path, **kw)
    return path


def check_roundtrip(obj, path):
    """torch.save(obj); load_pt and load_pt_trusted both equal torch.load(weights_only=True)."""
    save(obj, path)
    ref = torch.load(path, weights_only=True)
    assert_matches_torch(ref, load_pt(path))
    assert_matches_torch(ref, load_pt_trusted(path))


# --------------------------------------------------------------------------- hypothesis strategies

TENSOR_DTYPES = [
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool,
    torch.float16, torch.float32, torch.float64, torch.bfloat16,
]
_NP_GEN_DTYPE = {torch.bfloat16: np.float32}


def make_tensor(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape)) if shape else 1
    if dtype == torch.bool:
        arr = rng.integers(0, 2, n).astype(np.bool_)
    elif dtype.is_floating_point:
        arr = rng.standard_normal(n).astype(np.float32) * 100
        specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0], dtype=np.float32)
        mask = rng.random(n) < 0.15
        arr[mask] = rng.choice(specials, int(mask.sum()))
        base = torch.from_numpy(arr)
        return base.to(dtype).reshape(shape)
    else:
        np_dt = torch.empty(0, dtype=dtype).numpy().dtype
        info = np.iinfo(np_dt)
        arr = rng.integers(info.min, info.max, n, dtype=np_dt, endpoint=True)
    return torch.from_numpy(arr).reshape(shape)


def apply_view(t, op):
    """Apply a view op chosen by a tuple of small ints; always a view of t's storage."""
    kind, a, b, c = op
    nd = t.dim()
    if kind == 0 and nd >= 2:
        return t.transpose(a % nd, b % nd)
    if kind == 1 and nd >= 1:  # strided slice along a dim (storage offset + stride)
        d = a % nd
        size = t.shape[d]
        start = b % (size + 1)
        idx = [slice(None)] * nd
        idx[d] = slice(start, None, 1 + c % 3)
        return t[tuple(idx)]
    if kind == 2 and nd >= 1 and t.shape[0] > 0:  # select: drops a dim (can reach 0-d)
        return t[a % t.shape[0]]
    if kind == 3 and nd <= 3:  # a new dim of one element (an expanded one, stride 0, is refused)
        return t.unsqueeze(0).expand(1, *t.shape)
    if kind == 4 and nd >= 1:
        perm = list(range(nd))
        rng = np.random.default_rng(a * 31 + b)
        rng.shuffle(perm)
        return t.permute(*perm)
    if kind == 5 and nd >= 1:  # narrow to a sub-range
        d = a % nd
        size = t.shape[d]
        start = b % (size + 1)
        return t.narrow(d, start, c % (size - start + 1))
    return t


tensor_specs = st.tuples(
    st.sampled_from(TENSOR_DTYPES),
    st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple),
    st.integers(0, 2**32 - 1),
)
view_ops = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 7), st.integers(0, 7), st.integers(0, 7)), max_size=3)

scalar_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.binary(min_size=1, max_size=8)
)
dict_keys = st.text(max_size=6) | st.integers(-5, 5)


@st.composite
def payloads(draw):
    pool = [make_tensor(*spec) for spec in draw(st.lists(tensor_specs, min_size=1, max_size=3))]
    made: list[torch.Tensor] = []

    @st.composite
    def tensor_leaf(draw2):
        if made and draw2(st.integers(0, 5)) == 0:
            return made[draw2(st.integers(0, len(made) - 1))]  # the very same tensor again
        t = pool[draw2(st.integers(0, len(pool) - 1))]
        for op in draw2(view_ops):
            t = apply_view(t, op)
        made.append(t)
        return t

    leaves = scalar_leaves | tensor_leaf()

    def extend(children):
        return (
            st.lists(children, max_size=4)
            | st.dictionaries(dict_keys, children, max_size=4)
            | st.tuples(children, children)
            | st.dictionaries(st.text(max_size=4), children, max_size=3).map(OrderedDict)
            | st.sets(st.integers() | st.text(max_size=4), max_size=3)
        )

    value = st.recursive(leaves, extend, max_leaves=12)
    samples = draw(st.lists(st.dictionaries(st.text(max_size=10), value, max_size=5), max_size=4))
    return {"rollout_id": draw(st.integers(0, 10**6)), "samples": samples}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(payloads())
def test_property_matches_torch_load(payload):
    with tempfile.TemporaryDirectory() as d:
        check_roundtrip(payload, os.path.join(d, "dump.pt"))


@settings(max_examples=60, deadline=None)
@given(tensor_specs, view_ops)
def test_property_single_tensor(spec, ops):
    t = make_tensor(*spec)
    views = [t]
    for op in ops:
        views.append(apply_view(views[-1], op))
    with tempfile.TemporaryDirectory() as d:
        check_roundtrip({"views": views, "last": views[-1]}, os.path.join(d, "t.pt"))


# --------------------------------------------------------------------------- specific behaviour


@pytest.mark.parametrize("path", SAMPLE_PT, ids=lambda p: str(p.relative_to(REPO)))
def test_sample_data_files(path):
    if "miles" in path.parts:  # its samples hold miles' dataclasses: loaded with their stand-ins
        from framework_dumps import miles_types, plain

        miles_types()
        ref, got = plain(torch.load(path, weights_only=False)), plain(load_pt(path))
    else:
        ref, got = torch.load(path, weights_only=True), load_pt(path)
    assert_matches_torch(ref, got)


def test_slime_like_dump(tmp_path):
    routed = torch.randint(0, 64, (37, 2, 4), dtype=torch.int32)
    samples = [
        {
            "tokens": list(range(50)),
            "rollout_log_probs": [-0.5] * 20,
            "rollout_top_p_token_ids": torch.arange(10, dtype=torch.int32),
            "rollout_top_p_token_offsets": torch.tensor([0, 3, 10], dtype=torch.int32),
            "rollout_routed_experts": routed,
            "logp_bf16": torch.randn(20).to(torch.bfloat16),
            "tokens_i64": torch.arange(5),
            "reward": {"accuracy": 1.0},
            "status": "completed",
            "metadata": OrderedDict(a=1),
        }
    ]
    path = tmp_path / "7.pt"
    check_roundtrip({"rollout_id": 7, "samples": samples}, path)
    out = load_pt(path)
    arr = out["samples"][0]["rollout_routed_experts"]
    assert arr.dtype == np.int32 and arr.shape == (37, 2, 4)
    np.testing.assert_array_equal(arr, routed.numpy())


def test_bfloat16_is_exact_float32(tmp_path):
    t = torch.tensor([1.0, -2.5, 3.140625, 1e38, -1e-38, float("inf"), float("nan"), 0.0], dtype=torch.bfloat16)
    out = load_pt(save({"x": t, "v": t[2:], "s": t[::3]}, tmp_path / "b.pt"))
    assert out["x"].dtype == np.float32
    np.testing.assert_array_equal(out["x"], t.float().numpy())
    assert np.shares_memory(out["x"], out["v"]) and np.shares_memory(out["x"], out["s"])
    np.testing.assert_array_equal(out["s"], t[::3].float().numpy())


def test_shared_storage_views_are_shared_and_writable(tmp_path):
    base = torch.arange(24, dtype=torch.int64).reshape(4, 6)
    payload = {"a": base, "b": base[1:, 2:], "c": base.t(), "d": base[2], "e": base[2, 3]}
    out = load_pt(save(payload, tmp_path / "s.pt"))
    assert out["b"].strides == (48, 8) and out["c"].strides == (8, 48)
    assert out["d"].shape == (6,) and out["e"].shape == ()
    for k in "bcde":
        assert out[k].flags.writeable
        assert np.shares_memory(out["a"], out[k])
    out["b"][0, 0] = -1  # base[1, 2]
    assert out["a"][1, 2] == -1 and out["c"][2, 1] == -1


def test_empty_and_zero_dim(tmp_path):
    payload = {
        "empty": torch.empty(0, 3),
        "empty_t": torch.empty(4, 0, dtype=torch.int32).t(),
        "scalar": torch.tensor(5),
        "scalar_f": torch.tensor(2.5, dtype=torch.float16),
        "slice_end": torch.arange(5)[5:],
    }
    check_roundtrip(payload, tmp_path / "e.pt")
    out = load_pt(tmp_path / "e.pt")
    assert out["empty"].shape == (0, 3) and out["empty_t"].shape == (0, 4)
    assert out["scalar"].shape == () and out["scalar"] == 5
    assert out["slice_end"].shape == (0,) and out["slice_end"].dtype == np.int64


def test_dtypes_no_dump_holds_are_refused(tmp_path):
    """uint16/32/64 (torch's _rebuild_tensor_v3), complex storages and conj/neg views: no rollout
    dump holds them, so the restricted loader refuses them and names --trust-pickle."""
    for name, payload, globl in (
        ("u16", {"u16": torch.tensor([1, 65535], dtype=torch.uint16)}, "torch._utils._rebuild_tensor_v3"),
        ("c64", {"c": torch.tensor([1 + 2j])}, "torch.ComplexFloatStorage"),
        ("c128", {"c": torch.tensor([1 + 1j], dtype=torch.complex128)}, "torch.ComplexDoubleStorage"),
    ):
        with pytest.raises(UnsafePickleError) as ei:
            load_pt(save(payload, tmp_path / f"{name}.pt"))
        assert ei.value.global_name == globl and "--trust-pickle" in str(ei.value)
        assert load_pt_trusted(tmp_path / f"{name}.pt")  # the trusted path still reads them
    with pytest.raises(PtFormatError, match="metadata"):
        load_pt(save({"neg": torch._neg_view(torch.tensor([1.0, -2.0]))}, tmp_path / "neg.pt"))


def test_requires_grad_is_plain_data(tmp_path):
    check_roundtrip({"grad": torch.ones(3, requires_grad=True)}, tmp_path / "g.pt")


def test_plain_values_torch_weights_only_rejects(tmp_path):
    # protocol 2 writes b"" as __builtin__.bytes() and frozensets via __builtin__.frozenset
    payload = {"empty": b"", "bytes": b"\x00\xff", "fs": frozenset([1, "a"]),
               "set": {1, 2}, "big": 2**100, "tuple": (1, (2,)), "od": OrderedDict(z=1, a=2)}
    out = load_pt(save(payload, tmp_path / "p.pt"))
    assert out == payload
    assert [type(v) for v in out.values()] == [type(v) for v in payload.values()]
    assert load_pt_trusted(tmp_path / "p.pt") == payload


def test_bytearray_and_complex_values_are_refused(tmp_path):
    for name, value, globl in (("ba", bytearray(b"xy"), "__builtin__.bytearray"), ("cx", 1 + 2j, "__builtin__.complex")):
        with pytest.raises(UnsafePickleError) as ei:
            load_pt(save({name: value}, tmp_path / f"{name}.pt"))
        assert ei.value.global_name == globl


def _big_endian(src, dst, item: str):
    """`src`'s archive rewritten as a big-endian machine saves it: its storages' `item`-typed
    values byte-swapped, its byteorder record `big`."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("/byteorder"):
                data = b"big"
            elif "/data/" in info.filename:
                data = np.frombuffer(data, "<" + item).astype(">" + item).tobytes()
            zout.writestr(info.filename, data)
    return dst


def test_big_endian_archive(tmp_path):
    base = torch.arange(6, dtype=torch.int32)
    dst = _big_endian(save({"i": base.reshape(2, 3), "w": base[1::2]}, tmp_path / "le.pt"), tmp_path / "be.pt", "i4")
    out = load_pt(dst)
    np.testing.assert_array_equal(out["i"], np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(out["w"], [1, 3, 5])
    assert out["i"].dtype.byteorder in "=<" and np.shares_memory(out["i"], out["w"])


def test_module_does_not_import_torch(tmp_path):
    path = save({"samples": [{"t": torch.arange(3, dtype=torch.int32)}]}, tmp_path / "x.pt")
    evil = _torch_zip(tmp_path / "evil.pt", b"\x80\x02cantigravity\nfly\n)R.")
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
        "import rollout_cli.inputs.slime_pt.pt_pickle as m\n"
        "assert 'torch' not in sys.modules, 'import'\n"
        f"out = m.load_pt({str(path)!r}); assert out['samples'][0]['t'].tolist() == [0, 1, 2]\n"
        "try:\n"
        f"    m.load_pt({str(evil)!r})\n"
        "except m.UnsafePickleError as e:\n"
        "    assert e.global_name == 'antigravity.fly'\n"
        "assert 'torch' not in sys.modules, 'load'\n"
        "assert 'antigravity' not in sys.modules\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


# --------------------------------------------------------------------------- malicious pickles


def _torch_zip(path, pkl: bytes, storages: dict[str, bytes] | None = None, prefix="archive"):
    """A zip laid out exactly like torch.save's, with the given data.pkl and storage records."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{prefix}/data.pkl", pkl)
        z.writestr(f"{prefix}/.format_version", b"1")
        z.writestr(f"{prefix}/byteorder", b"little")
        for key, data in (storages or {}).items():
            z.writestr(f"{prefix}/data/{key}", data)
        z.writestr(f"{prefix}/version", b"3\n")
    return path


class _Reduce:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def _malicious_pickles(marker: Path):
    import builtins
    import subprocess as sp

    cmd = f"touch {marker}"
    code = f"open({str(marker)!r}, 'w').write('pwned')"
    inner_tensor = torch.arange(3, dtype=torch.int32)
    out = {
        "os.system": pickle.dumps(_Reduce(os.system, cmd), protocol=2),
        "os.system-manual": b"\x80\x02cos\nsystem\n(X" + struct.pack("<I", len(cmd)) + cmd.encode() + b"tR.",
        "eval-p2": pickle.dumps(_Reduce(builtins.eval, code), protocol=2),
        "eval-p4": pickle.dumps(_Reduce(builtins.eval, code), protocol=4),
        "exec-p0": pickle.dumps(_Reduce(builtins.exec, code), protocol=0),
        "popen": pickle.dumps(_Reduce(sp.Popen, ["touch", str(marker)]), protocol=2),
        "inst-p0": f"(S'{cmd}'\nios\nsystem\n.".encode(),
        "nested": pickle.dumps({"rollout_id": 1, "samples": [{"tokens": [1, 2], "x": _Reduce(os.system, cmd)}]}, protocol=2),
        "getattr": b"\x80\x02c__builtin__\ngetattr\n(cos\npath\nX\x06\x00\x00\x00systemtR.",
    }
    # a real torch dump whose pickle continues into an os.system call after a valid tensor
    buf = io.BytesIO()
    torch.save({"t": inner_tensor, "s": "ok"}, buf)
    with zipfile.ZipFile(buf) as z:
        real = z.read("archive/data.pkl")
        storage = z.read("archive/data/0")
    assert real.endswith(b"u.")
    after_tensor = real[:-2] + b"X\x04\x00\x00\x00evil" + pickle.dumps(_Reduce(os.system, cmd), protocol=2)[2:-1] + b"u."
    out["after-tensor"] = (after_tensor, {"0": storage})
    return out


@pytest.mark.parametrize(
    "name",
    ["os.system", "os.system-manual", "eval-p2", "eval-p4", "exec-p0", "popen", "inst-p0", "nested", "getattr", "after-tensor"],
)
def test_malicious_pickle_is_refused(tmp_path, name):
    marker = tmp_path / "PWNED"
    payload = _malicious_pickles(marker)[name]
    pkl, storages = payload if isinstance(payload, tuple) else (payload, None)
    path = _torch_zip(tmp_path / "evil.pt", pkl, storages)
    globals_in_stream = {str(arg) for op, arg, _ in pickletools.genops(pkl) if op.name in ("GLOBAL", "INST")}
    assert globals_in_stream or b"\x93" in pkl  # sanity: the stream does reference a global
    with pytest.raises(UnsafePickleError) as ei:
        load_pt(path)
    e = ei.value
    assert e.global_name in {"posix.system", "os.system", "builtins.eval", "__builtin__.eval", "builtins.exec",
                             "__builtin__.exec", "subprocess.Popen", "commands.Popen", "builtins.getattr", "__builtin__.getattr"}
    assert "--trust-pickle" in str(e) and "needs full unpickling" in str(e)
    assert not marker.exists()
    assert not marker.exists()


@pytest.mark.parametrize(
    "global_line",
    [
        b"torch._utils\n_rebuild_parameter\n",
        b"torch\nload\n",
        b"torch._utils\n_rebuild_tensor\n",
        b"torch.serialization\nload\n",
        b"collections\nOrderedDict.__init__\n",
        b"collections\nCounter\n",
        b"torch\nfrom_numpy\n",
        b"torch\nfloat8_e4m3fn\n",
        b"numpy\nload\n",
        b"numpy.core.multiarray\n_vec_string\n",
        b"never_imported_module_xyz\nfunc\n",
    ],
)
def test_other_globals_refused_without_import(tmp_path, global_line):
    path = _torch_zip(tmp_path / "g.pt", b"\x80\x02c" + global_line + b")R.")
    mod = global_line.split(b"\n")[0].decode()
    before = mod in sys.modules
    with pytest.raises(UnsafePickleError) as ei:
        load_pt(path)
    assert ei.value.global_name == ".".join(global_line.decode().split("\n")[:2])
    assert (mod in sys.modules) == before


def test_numpy_arrays_in_a_dump_are_read(tmp_path):
    """numpy arrays inside a torch.save payload (miles R3's rollout_routed_experts) come back as
    numpy arrays, through the same restricted unpickler: numeric, object (items restricted too)
    and scalars."""
    routed = np.arange(24, dtype=np.int32).reshape(3, 4, 2)
    payload = {"samples": [{"rollout_routed_experts": routed, "obj": np.array([np.arange(2), "x"], dtype=object),
                            "s": np.float64(0.5)}]}
    out = load_pt(save(payload, tmp_path / "np.pt"))["samples"][0]
    assert out["rollout_routed_experts"].dtype == np.int32 and out["rollout_routed_experts"].shape == (3, 4, 2)
    np.testing.assert_array_equal(out["rollout_routed_experts"], routed)
    assert out["obj"].dtype == object and out["obj"][0].tolist() == [0, 1] and out["obj"][1] == "x"
    assert type(out["s"]) is np.float64 and out["s"] == 0.5
    evil = pickle.dumps({"a": np.array([_Reduce(os.system, "true")], dtype=object)}, protocol=2)
    with pytest.raises(UnsafePickleError) as ei:
        load_pt(_torch_zip(tmp_path / "evil.pt", evil))
    assert ei.value.global_name in ("posix.system", "os.system")


def test_allowlisted_objects_cannot_be_mutated_or_misused(tmp_path):
    snapshot = dict(allow._ALLOWED)
    cases = [
        # BUILD on an allowlisted callable / storage token (would set attributes on module state)
        b"\x80\x02ccollections\nOrderedDict\n}X\x03\x00\x00\x00_fnK\x01sb.",
        b"\x80\x02ccollections\nOrderedDict\nN}X\x03\x00\x00\x00_fnK\x01s\x86b.",
        b"\x80\x02ctorch\nIntStorage\nN}X\x05\x00\x00\x00dtypeNs\x86b.",
        b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n}X\x0b\x00\x00\x00__globals__K\x01sb.",
        # calling a storage token, NEWOBJ on a function, bad OrderedDict/encode arguments
        b"\x80\x02ctorch\nIntStorage\n)R.",
        b"\x80\x02ccollections\nOrderedDict\n)\x81.",
        b"\x80\x02ccollections\nOrderedDict\nK\x05\x85R.",
        b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00aX\x05\x00\x00\x00rot13\x86R.",
        b"\x80\x02c__builtin__\nbytearray\nJ\x00\x00\x00\x7f\x85R.",
        # tensor rebuild with something that is not a storage
        b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(]K\x00)))\x89NtR.",
        # persistent id that is not a storage record
        b"\x80\x02X\x03\x00\x00\x00abcQ.",
        b"\x80\x02(X\x07\x00\x00\x00storagecos\nsystem\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x01tQ.",
    ]
    for i, pkl in enumerate(cases):
        path = _torch_zip(tmp_path / f"m{i}.pt", pkl)
        with pytest.raises((PtFormatError, UnsafePickleError)):
            load_pt(path)
    assert allow._ALLOWED == snapshot
    for name, obj in snapshot.items():
        assert getattr(obj, "__dict__", None) is None, name


def _storage_pid(cls=b"IntStorage", key=b"0", numel=b"K\x04"):
    return b"(X\x07\x00\x00\x00storagectorch\n" + cls + b"\nX" + len(key).to_bytes(4, "little") + key + b"X\x03\x00\x00\x00cpu" + numel + b"tQ"


@pytest.mark.parametrize(
    "tail,storages",
    [
        (b"K\x00K\x05\x85K\x01\x85\x89NtR.", {"0": b"\x00" * 16}),  # size 5 > 4 elements
        (b"K\x03K\x02\x85K\x01\x85\x89NtR.", {"0": b"\x00" * 16}),  # offset 3 + 2 elements
        (b"K\x00K\x02K\x02\x86K\x03K\x01\x86\x89NtR.", {"0": b"\x00" * 16}),  # stride reaches element 4
        (b"J\x00\x00\x00\x80K\x01\x85K\x01\x85\x89NtR.", {"0": b"\x00" * 16}),  # negative offset
        (b"\x8a\x05\x00\x00\x00\x00\x01K\x01\x85K\x01\x85\x89NtR.", {"0": b"\x00" * 16}),  # offset 2**32
        (b"K\x00\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01\x85K\x01\x85\x89NtR.", {"0": b"\x00" * 16}),  # size 2**64
        (b"K\x00K\x01\x85J\xff\xff\xff\xff\x85\x89NtR.", {"0": b"\x00" * 16}),  # negative stride
        (b"K\x00K\x04\x85K\x01\x85\x89NtR.", {"0": b"\x00" * 8}),  # record shorter than numel
        (b"K\x00K\x04\x85K\x01\x85\x89NtR.", {}),  # record missing
        (b"K\x00K\x03\x85K\x00\x85\x89NtR.", {"0": b"\x00" * 16}),  # stride 0: an expanded view
        (b"K\x00\x8a\x05\x00\x00\x00\x00\x01\x85K\x00\x85\x89NtR.", {"0": b"\x00" * 16}),  # stride 0, 2**32 elements
        (b"K\x00K\x02K\x02\x86K\x01K\x01\x86\x89NtR.", {"0": b"\x00" * 16}),  # overlapping rows
    ],
)
def test_out_of_bounds_tensor_refused(tmp_path, tail, storages):
    pkl = b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(" + _storage_pid() + tail
    path = _torch_zip(tmp_path / "oob.pt", pkl, storages)
    with pytest.raises(PtFormatError):
        load_pt(path)


def test_handmade_archive_loads(tmp_path):
    # sanity for the hand-assembled pickles above: a valid one loads
    pkl = b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(" + _storage_pid() + b"K\x01K\x03\x85K\x01\x85\x89NtR."
    path = _torch_zip(tmp_path / "ok.pt", pkl, {"0": np.arange(4, dtype="<i4").tobytes()})
    np.testing.assert_array_equal(load_pt(path), [1, 2, 3])


# --------------------------------------------------------------------------- format errors


def test_legacy_format(tmp_path):
    path = save({"a": torch.arange(3)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(PtFormatError, match="legacy") as ei:
        load_pt(path)
    assert "--trust-pickle" in str(ei.value)
    out = load_pt_trusted(path)  # the trusted path still reads it
    np.testing.assert_array_equal(out["a"], [0, 1, 2])


@pytest.mark.parametrize(
    "content,match",
    [
        (b"", "empty"),
        (b"hello world, not a zip", "not a torch zip"),
        (pickle.dumps({"a": 1}, protocol=2), "bare pickle"),
        (b"PK\x03\x04" + b"\x00" * 40, "truncated or corrupt zip"),
    ],
)
def test_not_a_torch_zip(tmp_path, content, match):
    path = tmp_path / "bad.pt"
    path.write_bytes(content)
    with pytest.raises(PtFormatError, match=match):
        load_pt(path)


def test_zip_without_data_pkl(tmp_path):
    path = tmp_path / "z.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("foo/bar.txt", b"x")
    with pytest.raises(PtFormatError, match="data.pkl"):
        load_pt(path)


def test_missing_file_is_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_pt(tmp_path / "nope.pt")


def test_every_truncation_is_a_format_error(tmp_path):
    src = save({"rollout_id": 1, "samples": [{"t": torch.arange(4, dtype=torch.int32), "s": "x"}]}, tmp_path / "full.pt")
    data = src.read_bytes()
    cut = tmp_path / "cut.pt"
    for n in range(len(data)):
        cut.write_bytes(data[:n])
        with pytest.raises(PtFormatError):
            load_pt(cut)


def test_corrupted_storage_bytes_crc(tmp_path):
    src = save({"t": torch.arange(64, dtype=torch.int32)}, tmp_path / "c.pt")
    data = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as z:
        info = z.getinfo("c/data/0")
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    data[start + 10] ^= 0xFF
    src.write_bytes(bytes(data))
    with pytest.raises(PtFormatError, match="CRC"):
        load_pt(src)


def test_corrupted_pickle_record_crc(tmp_path):
    # a flipped byte inside a string keeps the pickle valid: only the record's CRC tells
    src = save({"text": "x" * 64}, tmp_path / "c.pt")
    data = bytearray(src.read_bytes())
    at = data.index(b"x" * 64)
    data[at + 5] = ord("y")
    src.write_bytes(bytes(data))
    with pytest.raises(PtFormatError, match="CRC"):
        load_pt(src)


@pytest.mark.parametrize(
    "pkl",
    [b"", b"\x80\x02", b"\x80\x02}q\x00(X\x01\x00\x00\x00a", b"garbage", b"\x80\x02K\x01K\x02s.", b"\x80\x02]h\x05.",
     b"\x80\x02(((((", b"\x80\x05\x95\xff\xff\xff\xff\x00\x00\x00\x00."],
)
def test_corrupt_pickle_stream(tmp_path, pkl):
    path = _torch_zip(tmp_path / "p.pt", pkl)
    with pytest.raises(PtFormatError, match="corrupt pickle stream"):
        load_pt(path)


_VALID_STREAM = None


def _valid_stream():
    global _VALID_STREAM
    if _VALID_STREAM is None:
        buf = io.BytesIO()
        torch.save({"rollout_id": 3, "samples": [{"t": torch.arange(6, dtype=torch.int32).reshape(2, 3)[:, 1:],
                                                    "b": torch.ones(2, dtype=torch.bfloat16), "l": [1.5, "x", None]}]}, buf)
        with zipfile.ZipFile(buf) as z:
            _VALID_STREAM = (z.read("archive/data.pkl"), {"0": z.read("archive/data/0"), "1": z.read("archive/data/1")})
    return _VALID_STREAM


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_fuzzed_pickle_streams_fail_cleanly(tmp_path, data):
    pkl, storages = _valid_stream()
    mutated = bytearray(pkl)
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.integers(0, 2))
        pos = data.draw(st.integers(0, len(mutated) - 1))
        if kind == 0:
            mutated[pos] = data.draw(st.integers(0, 255))
        elif kind == 1:
            del mutated[pos]
        else:
            mutated[pos:pos] = data.draw(st.binary(min_size=1, max_size=4))
    path = _torch_zip(tmp_path / "fuzz.pt", bytes(mutated), storages)
    try:
        load_pt(path)
    except (PtFormatError, UnsafePickleError):
        pass


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_random_pickle_bytes_fail_cleanly(tmp_path, pkl):
    path = _torch_zip(tmp_path / "rand.pt", b"\x80\x02" + pkl)
    try:
        load_pt(path)
    except (PtFormatError, UnsafePickleError):
        pass


def test_trusted_matches_restricted_on_shared_bf16(tmp_path):
    base = torch.randn(4, 5).to(torch.bfloat16)
    path = save({"a": base, "b": base[1:, ::2], "same": [base, base]}, tmp_path / "t.pt")
    fast, slow = load_pt(path), load_pt_trusted(path)
    for k in ("a", "b"):
        assert fast[k].dtype == slow[k].dtype == np.float32
        np.testing.assert_array_equal(fast[k], slow[k])
        assert fast[k].strides == slow[k].strides
    assert np.shares_memory(slow["a"], slow["b"]) and np.shares_memory(fast["a"], fast["b"])
    assert fast["same"][0] is fast["same"][1] and slow["same"][0] is slow["same"][1]


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_other_pickle_protocols(tmp_path, protocol):
    # torch.save(pickle_protocol=N) changes opcodes and builtins' module name (__builtin__ -> builtins)
    base = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    payload = {"rollout_id": 2, "samples": [{"t": base, "v": base[:, 1::2], "bf": torch.ones(2, dtype=torch.bfloat16),
                                             "x": [1.5, "s", None, True],
                                             "b": b"\x01", "set": {3}, "od": OrderedDict(k=[1])}]}
    path = tmp_path / "p.pt"
    torch.save(payload, path, pickle_protocol=protocol)
    ref = torch.load(path, weights_only=protocol == 2)  # torch's weights_only unpickler only reads protocol 2
    assert_matches_torch(ref, load_pt(path))


def test_bfloat16_bits_on_request_are_views_of_the_storage(tmp_path):
    from rollout_cli.core.tensors import BFloat16Bits
    from rollout_cli.inputs.pickled import load_torch

    t = torch.tensor([1.0, -2.5, 3.140625, 1e38, float("nan"), 0.0], dtype=torch.bfloat16)
    out = load_torch(save({"x": t, "s": t[::2], "m": t.reshape(2, 3).t()}, tmp_path / "b.pt"), as_stored=True)
    bits = t.view(torch.int16).numpy().view(np.uint16)
    assert type(out["x"]) is BFloat16Bits and out["x"].dtype == np.uint16
    np.testing.assert_array_equal(out["x"], bits)
    np.testing.assert_array_equal(out["s"], bits[::2])
    np.testing.assert_array_equal(out["m"], bits.reshape(2, 3).T)
    assert np.shares_memory(out["x"], out["s"]) and np.shares_memory(out["x"], out["m"])
    assert load_torch(tmp_path / "b.pt")["x"].dtype == np.float32  # widened unless asked


def test_bfloat16_bits_of_a_big_endian_archive(tmp_path):
    from rollout_cli.inputs.pickled import load_torch

    t = torch.tensor([1.0, -2.5, 3.140625], dtype=torch.bfloat16)
    dst = _big_endian(save({"x": t}, tmp_path / "le.pt"), tmp_path / "be.pt", "u2")
    np.testing.assert_array_equal(load_torch(dst, as_stored=True)["x"], t.view(torch.int16).numpy().view(np.uint16))
    np.testing.assert_array_equal(load_torch(dst)["x"], t.float().numpy())


def test_slime_reader_keeps_multimodal_bfloat16_as_bits_and_widens_the_rest(tmp_path):
    from rollout_cli.core.tensors import BFloat16Bits, WidenedBFloat16
    from rollout_cli.inputs.slime_pt import reader

    pv = torch.randn(4, 6).to(torch.bfloat16)
    lp = torch.randn(3).to(torch.bfloat16)
    sample = {"tokens": [1, 2, 3], "multimodal_train_inputs": {"pixel_values": pv},
              "rollout_log_probs": lp, "metadata": {"extra": [lp, lp[:1]]}}
    path = save({"rollout_id": 1, "samples": [sample]}, tmp_path / "1.pt")
    got = reader.load_payload(str(path), "1.pt", False, as_stored=True)["samples"][0]
    reader._widen_outside_mm(got)
    mm = got["multimodal_train_inputs"]["pixel_values"]
    assert type(mm) is BFloat16Bits
    np.testing.assert_array_equal(mm, pv.view(torch.int16).numpy().view(np.uint16))
    for v in (got["rollout_log_probs"], got["metadata"]["extra"][0], got["metadata"]["extra"][1]):
        assert isinstance(v, WidenedBFloat16) and v.dtype == np.float32
    np.testing.assert_array_equal(got["metadata"]["extra"][0], lp.float().numpy())
    # the trusted path (torch.load) marks bfloat16 the same way, so it is stored as bfloat16 too
    assert isinstance(load_pt_trusted(path)["samples"][0]["multimodal_train_inputs"]["pixel_values"], WidenedBFloat16)
