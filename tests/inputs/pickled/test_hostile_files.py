"""Hostile pickled inputs, end to end: each file is built here and read by `inspect` and by
`convert --workers 1` in a child process (so a crash is seen as a signal, not the end of the test
run). Every one must end in exit 3 whose last stderr line names the file, never a signal, exit 1
or a traceback; the decompression bomb is refused before any of its record is read."""
from __future__ import annotations

import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest

import pickle_fuzz
from pickle_fuzz import op_bytes, op_global, op_int, op_str

from rollout_cli.inputs.pickled import PickleFormatError, load_torch, loads_pickle
from rollout_cli.inputs.pickled.archive import _Archive

PROTO = b"\x80\x02"
NUMPY_CORE = "numpy._core.multiarray"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rollout_cli", *args], capture_output=True, text=True, timeout=300)


def assert_refused(res: subprocess.CompletedProcess, path: Path, *words: str) -> None:
    assert res.returncode == 3, f"exit {res.returncode} (a negative one is a signal): {res.stderr[-2000:]}"
    assert "Traceback" not in res.stderr, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert str(path) in last, f"the last line does not name {path}: {last}"
    for w in words:
        assert w in last, f"{w!r} not in {last!r}"


def both_commands(path: Path, tmp_path: Path, *words: str, extra: tuple[str, ...] = ()) -> None:
    assert_refused(run_cli("inspect", str(path), *extra), path, *words)
    out = tmp_path / "out"
    assert_refused(run_cli("convert", str(path), str(out), "--workers", "1", "-q", *extra), path, *words)
    assert not (out / "manifest.json").exists()


def torch_zip(path: Path, pkl: bytes, storages: dict[str, bytes] | None = None) -> Path:
    records = {"archive/byteorder": b"little", "archive/version": b"3\n",
               **{f"archive/data/{k}": v for k, v in (storages or {}).items()}}
    path.write_bytes(pickle_fuzz.torch_zip(pkl, records))
    return path


def dump(value: bytes) -> bytes:
    """A slime dump {"rollout_id": 0, "samples": [{"tokens": [1, 2], "x": value}]} around the
    pickle of one value (its opcodes, leaving it on the stack)."""
    return (PROTO + b"}" + op_str("rollout_id") + op_int(0) + b"s" + op_str("samples") + b"]}"
            + op_str("tokens") + b"]" + op_int(1) + b"a" + op_int(2) + b"as" + op_str("x") + value + b"sas.")


def dtype(type_string: str, order: str, elsize: int = -1, align: int = -1, flags: int = 0, structured: bool = False) -> bytes:
    """``numpy.dtype(type_string, False, True)`` then BUILD with the state (3, order, None,
    names, fields, elsize, align, flags); `structured`: names ("a",) and a field "a" holding an
    object dtype at offset 0."""
    names = fields = b"N"
    if structured:
        names = b"(" + op_str("a") + b"t"
        fields = b"}" + op_str("a") + op_global("numpy.dtype") + op_str("O8") + b"\x89\x88\x87R" + op_int(0) + b"\x86s"
    return (op_global("numpy.dtype") + op_str(type_string) + b"\x89\x88\x87R" + b"(" + op_int(3) + op_str(order) + b"N"
            + names + fields + op_int(elsize) + op_int(align) + op_int(flags) + b"tb")


O_FLAGS_0 = dtype("O8", "|", flags=0)  # the object dtype with its flags cleared: "holds no objects"
V8_WITH_OBJECT = dtype("V8", "|", 8, 1, 63, structured=True)  # V8 with a hidden object field

EXPLOITS = {
    # scalar(dtype, 8 bytes): the bytes read back as a PyObject*
    "scalar": op_global(f"{NUMPY_CORE}.scalar") + O_FLAGS_0 + op_bytes(b"AAAAAAAA") + b"\x86R",
    "reconstruct": op_global(f"{NUMPY_CORE}._reconstruct") + op_global("numpy.ndarray") + op_int(0) + b"\x85"
                   + op_bytes(b"b") + b"\x87R" + b"(" + op_int(1) + op_int(1) + b"\x85" + V8_WITH_OBJECT + b"\x89"
                   + op_bytes(b"AAAAAAAA") + b"tb",
    "object-array-from-bytes": op_global(f"{NUMPY_CORE}._reconstruct") + op_global("numpy.ndarray") + op_int(0) + b"\x85"
                               + op_bytes(b"b") + b"\x87R" + b"(" + op_int(1) + op_int(1) + b"\x85"
                               + dtype("O8", "|", flags=63) + b"\x89" + op_bytes(b"AAAAAAAA") + b"tb",
}
# _frombuffer(buf, dtype, shape, order) in full
EXPLOITS["frombuffer"] = (op_global("numpy._core.numeric._frombuffer") + b"(" + op_bytes(b"AAAAAAAA") + O_FLAGS_0
                          + op_int(1) + b"\x85" + op_str("C") + b"tR")


@pytest.mark.parametrize("name", sorted(EXPLOITS))
def test_crafted_numpy_pickle_is_refused_in_process(name):
    assert loads_pickle(dump(op_int(7)), "plain.pkl")["samples"] == [{"tokens": [1, 2], "x": 7}]
    with pytest.raises(PickleFormatError, match="dtype|object"):
        loads_pickle(dump(EXPLOITS[name]), "crafted.pkl")


@pytest.mark.parametrize("name", ["scalar", "reconstruct"])
def test_crafted_numpy_pt_is_exit_3_for_inspect_and_convert(tmp_path, name):
    path = torch_zip(tmp_path / f"{name}.pt", dump(EXPLOITS[name]))
    both_commands(path, tmp_path, "dtype")
    if name == "scalar":  # report and audit read it through the same readers
        assert_refused(run_cli("report", str(path), "-o", str(tmp_path / "r.html")), path, "dtype")
        assert_refused(run_cli("audit", str(path), "--train", str(path)), path, "dtype")


def test_crafted_numpy_pickle_in_a_roll_batch_is_exit_3(tmp_path):
    # ROLL's DataProto: NEWOBJ, then BUILD (BytesIO, non_tensor_batch, None, meta_info), the
    # crafted scalar in non_tensor_batch
    bytes_io = op_global("_io.BytesIO") + b")\x81(" + op_bytes(b"junk") + op_int(0) + b"Ntb"
    pkl = (PROTO + op_global("roll.distributed.scheduler.protocol.DataProto") + b")\x81(" + bytes_io
           + b"}" + op_str("x") + EXPLOITS["frombuffer"] + b"sN}tb.")
    path = tmp_path / "dump" / "train" / "step_000001.pkl"
    path.parent.mkdir(parents=True)
    path.write_bytes(pkl)
    with pytest.raises(PickleFormatError, match="dtype"):
        loads_pickle(pkl, "roll.pkl")
    dump_dir = path.parent.parent
    assert_refused(run_cli("inspect", str(dump_dir)), path, "dtype")
    assert_refused(run_cli("convert", str(dump_dir), str(tmp_path / "out"), "--workers", "1", "-q"), path, "dtype")


def test_a_dtype_build_state_numpy_never_writes_is_refused():
    # the state of ">i4" is fine; the same with flags set, or with an object dtype's flags, is not
    good = PROTO + dtype("i4", ">") + b"."
    assert loads_pickle(good, "ok.pkl").str == ">i4"
    for bad in (dtype("i4", ">", flags=63), dtype("i4", "|", flags=16), dtype("i4", "<", 1, 1), dtype("V8", "|", 8, 1, 0, True)):
        with pytest.raises(PickleFormatError, match="BUILD state"):
            loads_pickle(PROTO + bad + b".", "bad.pkl")


# --------------------------------------------------------------------------- stride 0, huge size


def _tensor(size: bytes, stride: bytes) -> bytes:
    storage = (b"(" + op_str("storage") + op_global("torch.LongStorage") + op_str("0") + op_str("cpu") + op_int(1)
               + b"tQ")
    return (op_global("torch._utils._rebuild_tensor_v2") + b"(" + storage + op_int(0) + size + stride + b"\x89"
            + op_global("collections.OrderedDict") + b")RtR")


def test_stride_0_tensor_of_8_tib_is_exit_3(tmp_path):
    huge = op_int(2**40) + b"\x85"
    path = torch_zip(tmp_path / "stride0.pt", dump(_tensor(huge, op_int(0) + b"\x85")), {"0": bytes(8)})
    assert path.stat().st_size < 1024
    with pytest.raises(PickleFormatError, match="more than once"):
        load_torch(path)
    both_commands(path, tmp_path, "more than once")


# --------------------------------------------------------------------------- deflate bomb


def _zip_with_deflated(path: Path, stored: dict[str, bytes], name: str, raw: bytes, size: int, crc: int) -> Path:
    """A zip of stored records plus one record `name` holding the raw deflate stream `raw`
    (declared `size` bytes once inflated)."""
    entries, body = [], bytearray()
    for n, data, method, csize, usize, c in ([(k, v, 0, len(v), len(v), zlib.crc32(v)) for k, v in stored.items()]
                                            + [(name, raw, 8, len(raw), size, crc)]):
        entries.append((n.encode(), len(body), method, csize, usize, c))
        body += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, method, 0, 0, c, csize, usize, len(n), 0) + n.encode() + data
    central = bytearray()
    for n, off, method, csize, usize, c in entries:
        central += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, method, 0, 0, c, csize, usize, len(n), 0, 0, 0, 0, 0,
                               off) + n
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(central), len(body), 0)
    path.write_bytes(bytes(body + central + end))
    return path


def deflate_bomb(tmp_path: Path, gib: float = 1.5) -> Path:
    """A .pt whose one storage record inflates about 1,030 times, to `gib` GiB of zeros: its
    deflate stream is one compressed 16 MiB block repeated."""
    block = bytes(16 << 20)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    one = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    n = int(gib * 64)
    raw = one * n + c.flush()
    crc = 0
    for _ in range(n):
        crc = zlib.crc32(block, crc)
    numel = (16 << 20) * n // 8
    storage = (b"(" + op_str("storage") + op_global("torch.LongStorage") + op_str("0") + op_str("cpu") + op_int(numel)
               + b"tQ")
    pkl = dump(op_global("torch._utils._rebuild_tensor_v2") + b"(" + storage + op_int(0) + op_int(numel) + b"\x85"
               + op_int(1) + b"\x85\x89" + op_global("collections.OrderedDict") + b")RtR")
    return _zip_with_deflated(tmp_path / "bomb.pt", {"archive/data.pkl": pkl, "archive/byteorder": b"little",
                                                     "archive/version": b"3\n"}, "archive/data/0", raw, (16 << 20) * n, crc)


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    return deflate_bomb(tmp_path_factory.mktemp("bomb"))


def test_deflate_bomb_is_refused_before_its_record_is_read(bomb, monkeypatch):
    assert bomb.stat().st_size < 3 << 20
    opened = []
    real_open = zipfile.ZipFile.open
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda self, name, *a, **k: opened.append(getattr(name, "filename", name))
                        or real_open(self, name, *a, **k))
    monkeypatch.setattr(_Archive, "storage_bytes", lambda *a: pytest.fail("a storage was read"))
    with pytest.raises(PickleFormatError, match="over 1000x"):
        load_torch(bomb)
    assert "archive/data/0" not in opened and "archive/data.pkl" not in opened


def test_deflate_bomb_is_exit_3_in_bounded_memory(bomb, tmp_path):
    # the child's peak RSS, from a parent that has no other children
    probe = ("import resource, subprocess, sys; r = subprocess.run([sys.executable, '-m', 'rollout_cli', *sys.argv[1:]],"
             " capture_output=True, text=True); sys.stderr.write(r.stderr);"
             " print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)")
    for args in (["inspect", str(bomb)], ["convert", str(bomb), str(tmp_path / "out"), "--workers", "1", "-q"]):
        res = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=300)
        assert_refused(res, bomb, "over 1000x")
        peak_kib = int(res.stdout.split()[-1])
        assert peak_kib < 1 << 20, f"peak RSS {peak_kib} KiB"


def test_max_storage_bytes_refuses_a_large_stored_record(tmp_path):
    storage = (b"(" + op_str("storage") + op_global("torch.ByteStorage") + op_str("0") + op_str("cpu") + op_int(4096)
               + b"tQ")
    pkl = dump(op_global("torch._utils._rebuild_tensor_v2") + b"(" + storage + op_int(0) + op_int(4096) + b"\x85"
               + op_int(1) + b"\x85\x89" + op_global("collections.OrderedDict") + b")RtR")
    path = torch_zip(tmp_path / "big.pt", pkl, {"0": bytes(4096)})
    assert run_cli("inspect", str(path)).returncode == 0
    assert_refused(run_cli("inspect", str(path), "--max-storage-bytes", "4000"), path, "--max-storage-bytes")


@pytest.mark.parametrize("protocol", [2, 5])
def test_text_array_past_u10ffff_is_refused(protocol):
    import pickle

    import numpy as np

    bad = np.frombuffer(np.array([0x41, 0x110000], "<u4").tobytes(), "<U1")  # found by bench/fuzz_pickles.py
    with pytest.raises(PickleFormatError, match="U\\+10FFFF"):
        loads_pickle(pickle.dumps(bad, protocol=protocol), "text.pkl")


def test_encrypted_record_is_refused(tmp_path):
    # found by bench/fuzz_pickles.py: zipfile raised RuntimeError (a password needed)
    raw = bytearray(torch_zip(tmp_path / "plain.pt", dump(op_int(1))).read_bytes())
    assert raw[:4] == b"PK\x03\x04"  # data.pkl is the first record: set its encrypted flag
    raw[6] |= 1
    central = raw.index(b"PK\x01\x02")
    raw[central + 8] |= 1
    path = tmp_path / "enc.pt"
    path.write_bytes(bytes(raw))
    with pytest.raises(PickleFormatError, match="encrypted"):
        load_torch(path)
