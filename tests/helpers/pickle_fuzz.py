"""Fuzz cases for the restricted unpickler, shared by tests/inputs/pickled/test_fuzz.py (bounded,
hypothesis) and bench/fuzz_pickles.py (a million cases): opcode programs naming the allowed
globals, and mutations of real framework pickles (SkyRL, verl and ROLL batches from
sample_data/pickled_writers.py, slime and miles style torch.save dumps, numpy arrays of every
dtype the reader makes, under protocols 2 to 5).

``run_case(data, torch_archive)`` is the property: the load gives a value (then read through,
every array's bytes and every object item touched) or raises PickleFormatError or
UnsafePickleError; anything else is raised as ``FuzzFailure``. A signal kills the process, which
the long run counts from outside."""
from __future__ import annotations

import contextlib
import io
import pickle
import random
import struct
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from rollout_cli.inputs.pickled import ALLOWED_GLOBALS, PickleFormatError, UnsafePickleError, load_torch_bytes, loads_pickle

STOP = b"."


class FuzzFailure(AssertionError):
    """The loader raised something other than its two clean errors."""


# --------------------------------------------------------------------------- opcode programs


def op_global(full: str) -> bytes:
    module, _, name = full.rpartition(".")
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def op_str(s: str) -> bytes:
    raw = s.encode("utf-8", "surrogatepass")
    return b"X" + struct.pack("<I", len(raw)) + raw


def op_bytes(b: bytes) -> bytes:
    return b"C" + bytes([len(b)]) + b if len(b) < 256 else b"B" + struct.pack("<I", len(b)) + b


def op_int(n: int) -> bytes:
    if 0 <= n < 256:
        return b"K" + bytes([n])
    if -(2**31) <= n < 2**31:
        return b"J" + struct.pack("<i", n)
    raw = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


# the globals a program names: the allow-list, and a few off it (refused as unsafe)
GLOBALS = list(ALLOWED_GLOBALS) + ["os.system", "builtins.eval", "numpy.core.multiarray.fromstring"]
# (name, bytes) of the argument-free opcodes a program mixes in
PLAIN_OPS = [(b"(", "MARK"), (b"t", "TUPLE"), (b")", "EMPTY_TUPLE"), (b"\x85", "TUPLE1"), (b"\x86", "TUPLE2"),
             (b"\x87", "TUPLE3"), (b"R", "REDUCE"), (b"b", "BUILD"), (b"}", "EMPTY_DICT"), (b"]", "EMPTY_LIST"),
             (b"s", "SETITEM"), (b"u", "SETITEMS"), (b"a", "APPEND"), (b"e", "APPENDS"), (b"N", "NONE"),
             (b"\x88", "NEWTRUE"), (b"\x89", "NEWFALSE"), (b"0", "POP"), (b"2", "DUP"), (b"\x81", "NEWOBJ"),
             (b"\x94", "MEMOIZE"), (b"\x8f", "EMPTY_SET"), (b"\x90", "ADDITEMS"), (b"\x91", "FROZENSET"), (b"1", "POP_MARK")]
# strings that mean something to an allowed global
WORDS = ["O8", "V8", "f4", "i8", "u2", "U5", "S3", "b1", "c8", "M8", "<", ">", "|", "=", "C", "F", "latin1", "cpu",
         "cuda:0", "storage", "0", "1", "data", "shape", "dtype", "format", "numpy", "torch", "items", "torch.int64",
         "batch_dict", "batch_size", "device", "metadata", "_tensordict", "_batch_size", "leaves", "non_tensors",
         "cls", "cls_metadata", "TensorDict", "tensor_list"]


def opcode_program(rng: random.Random, length: int | None = None) -> bytes:
    """A pickle of random opcodes, heavy on the allowed globals and their arguments."""
    out = [b"\x80" + bytes([rng.choice((2, 3, 4, 5))])]
    memo = 0
    for _ in range(length if length is not None else rng.randint(1, 40)):
        r = rng.random()
        if r < 0.18:
            out.append(op_global(rng.choice(GLOBALS)))
        elif r < 0.28:
            out.append(op_str(rng.choice(WORDS)))
        elif r < 0.38:
            out.append(op_int(rng.choice((0, 1, 2, 3, 8, 63, -1, 2**31, 2**63, 2**64, rng.randint(-5, 300)))))
        elif r < 0.45:
            out.append(op_bytes(bytes(rng.getrandbits(8) for _ in range(rng.choice((0, 1, 2, 4, 8, 16, 24))))))
        elif r < 0.50:
            out.append(b"q" + bytes([memo % 256]))
            memo += 1
        elif r < 0.56:
            out.append(b"h" + bytes([rng.randrange(max(memo, 1))]))
        else:
            out.append(rng.choice(PLAIN_OPS)[0])
    out.append(STOP)
    return b"".join(out)


# --------------------------------------------------------------------------- real pickles


def _numpy_values() -> list:
    rng = np.random.default_rng(0)
    arrays = [np.arange(6).astype(dt).reshape(2, 3) for dt in ("<i8", "<i4", "<i2", "i1", "u1", "<u2", "<u4", "<u8",
                                                             "<f2", "<f4", "<f8", ">f8", ">i4", "?", "<c8", "<c16")]
    arrays += [np.asfortranarray(np.arange(6.0).reshape(2, 3)), np.array(["ab", "c"]), np.array([b"xy", b"z"]),
               np.zeros(3, "V4"), np.array(["s", {"k": [1, 2]}, None, np.arange(2)], dtype=object),
               np.array([np.array(["a", "b"], dtype=object), np.array(["c"], dtype=object)], dtype=object),
               np.empty((0, 3), np.float32), rng.standard_normal(5).astype(np.float32)[::2]]
    nested = np.empty(2, object)
    nested[0], nested[1] = {"in": np.ones(2)}, (np.arange(2), [np.zeros(1, np.int8)])
    arrays.append(nested)
    scalars = [np.float32(1.5), np.int64(-3), np.bool_(True), np.dtype(">i2")]
    return [{"a": a} for a in arrays] + [scalars, {"mix": [arrays[0], arrays[-1], (arrays[3], "t")]}]


def _zip_inner(data: bytes) -> tuple[bytes, dict[str, bytes], str]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = zf.namelist()
        pkl = next(n for n in names if n.endswith("/data.pkl"))
        prefix = pkl[: -len("data.pkl")]
        return zf.read(pkl), {n: zf.read(n) for n in names if n != pkl}, prefix


def torch_zip(pickle_bytes: bytes, records: dict[str, bytes], prefix: str = "archive/") -> bytes:
    """A torch.save-shaped zip: `prefix`data.pkl and the other records as given, all stored."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(prefix + "data.pkl", pickle_bytes)
        for name, raw in records.items():
            zf.writestr(name, raw)
    return buf.getvalue()


def seeds() -> list[tuple[str, bytes, bool]]:
    """(name, bytes, is a torch archive) of real pickles: numpy values under protocols 2-5,
    slime/miles-style torch.save dumps, and SkyRL, verl and ROLL batches (torch and tensordict
    needed for the last two kinds; left out without them)."""
    out = [(f"numpy-p{p}-{i}", pickle.dumps(v, protocol=p), False) for i, v in enumerate(_numpy_values()) for p in (2, 3, 4, 5)]
    try:
        import torch
    except ImportError:
        return out
    samples = [{"tokens": list(range(8)), "response_length": 3, "reward": 1.0, "loss_mask": [1, 1, 0],
                "rollout_log_probs": torch.randn(3), "ids": torch.arange(6).reshape(2, 3).t(),
                "bf16": torch.ones(4, dtype=torch.bfloat16), "half": torch.zeros(2, dtype=torch.float16)[1:],
                "rollout_routed_experts": np.arange(24, dtype=np.int32).reshape(2, 3, 4),
                "metadata": {"np": np.float32(2.0), "obj": np.array(["x"], dtype=object)}}]
    buf = io.BytesIO()
    torch.save({"rollout_id": 3, "samples": samples}, buf)
    out.append(("slime-pt", buf.getvalue(), True))
    try:
        import pickled_dumps as W
    except ImportError:
        return out
    batch = {"input_ids": np.arange(12).reshape(2, 6), "attention_mask": np.ones((2, 6), np.int64),
             "response_mask": np.ones((2, 3), np.int64), "log_probs": np.zeros((2, 3), np.float32)}
    nt = {"uid": ["a", "b"], "extra": [{"k": 1}, {"k": [2]}], "nested": [np.array(["x"], dtype=object), None],
          # lone tensors in an object array: their storages as torch.save's legacy bytes (legacy.py)
          "multi_modal_inputs": [{"pixel_values": torch.ones(4, 3, dtype=torch.bfloat16),
                                  "image_grid_thw": torch.tensor([[1, 2, 2]])}, None]}
    with tempfile.TemporaryDirectory() as d:
        paths = [("verl", W.write_verl(d, 1, batch, nt, {"step": 1}, gbs=2, n=1, prompt_length=3, response_length=3)),
                 ("roll", W.write_roll(d, 1, batch, nt, {"m": [1]})),
                 ("skyrl", W.write_skyrl(d, 1, {"sequences": batch["input_ids"], "loss_mask": batch["log_probs"],
                                                 "values": None, "pixel_values": [np.zeros((2, 2), np.float32)]},
                                          {"response_length": 3}, bf16=("loss_mask",)))]
        out += [(name, Path(p).read_bytes(), False) for name, p in paths]
    return out


# --------------------------------------------------------------------------- mutations


def mutate(data: bytes, rng: random.Random) -> bytes:
    """`data` with a few random edits: byte flips, small-int and length tweaks, cuts, splices,
    duplicated or dropped runs."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not b:
            b = bytearray(b"\x80\x02.")
        r = rng.random()
        i = rng.randrange(len(b))
        if r < 0.35:
            b[i] = rng.getrandbits(8)
        elif r < 0.5:
            b[i] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, b[i] ^ 1, (b[i] + 1) % 256))
        elif r < 0.6:
            del b[i:i + rng.randint(1, 16)]
        elif r < 0.7:
            j = rng.randrange(len(b))
            b[i:i] = b[j:j + rng.randint(1, 32)]
        elif r < 0.8:
            b[i:i] = rng.choice([op_global(rng.choice(GLOBALS)), op_str(rng.choice(WORDS)), b"b", b"R", b"(", b"t",
                                 b"h\x00", b"q\x00", op_int(rng.choice((0, 63, 2**40)))])
        elif r < 0.9:
            del b[rng.randrange(len(b)):]
        else:
            b[i:i + 4] = struct.pack("<I", rng.choice((0, 1, 255, 2**16, 2**31 - 1, 2**32 - 1)))
    return bytes(b)


def mutated_case(seed: tuple[str, bytes, bool], rng: random.Random) -> tuple[bytes, bool]:
    """A mutation of a seed; a torch archive's data.pkl is mutated and re-zipped (the records
    kept), or now and then the zip bytes themselves."""
    _, data, archive = seed
    if not archive or rng.random() < 0.1:
        return mutate(data, rng), archive
    pkl, records, prefix = _zip_inner(data)
    if rng.random() < 0.15 and records:  # a storage record cut or grown
        name = rng.choice(sorted(records))
        raw = records[name]
        records[name] = raw[: rng.randrange(len(raw) + 1)] if rng.random() < 0.5 else raw + raw
    return torch_zip(mutate(pkl, rng), records, prefix), True


# --------------------------------------------------------------------------- the property


def _touch(value, depth: int = 0, seen: set | None = None) -> None:
    """Read every byte of every array and every item of the value (what a reader would do)."""
    seen = set() if seen is None else seen
    if depth > 200 or id(value) in seen:
        return
    if isinstance(value, np.ndarray):
        seen.add(id(value))
        if value.dtype.hasobject:
            for v in value.ravel(order="K"):
                _touch(v, depth + 1, seen)
        else:
            np.ascontiguousarray(value).tobytes()
            repr(value)
    elif isinstance(value, dict):
        seen.add(id(value))
        for k, v in list(value.items()):
            _touch(k, depth + 1, seen)
            _touch(v, depth + 1, seen)
    elif isinstance(value, (list, tuple, set, frozenset)):
        seen.add(id(value))
        for v in list(value):
            _touch(v, depth + 1, seen)
    elif isinstance(value, np.generic):
        repr(value)
        value.tobytes()
    else:
        getattr(value, "data", None)


@contextlib.contextmanager
def memory_cap(extra: int = 1 << 30):
    """The process's data segment capped at its size now plus `extra` bytes while the block runs:
    CPython's C unpickler sizes its memo by the largest index a LONG_BINPUT names (up to 2**32
    entries), so a five-byte opcode can ask for gigabytes; under the cap that is a MemoryError,
    at once, and the run's time stays bounded."""
    import resource

    with open("/proc/self/status") as f:
        data = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmData:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    cap = data + extra if hard == resource.RLIM_INFINITY else min(data + extra, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def run_case(data: bytes, torch_archive: bool) -> str:
    """The property for one input: "value" or "refused"; anything else raises FuzzFailure."""
    try:
        with memory_cap():
            value = load_torch_bytes(data, "case.pt") if torch_archive else loads_pickle(data, "case.pkl")
    except (PickleFormatError, UnsafePickleError):
        return "refused"
    except Exception as e:  # noqa: BLE001 - the property: nothing else may come out
        raise FuzzFailure(f"{type(e).__name__}: {e}"[:300]) from e
    try:
        _touch(value)
    except Exception as e:  # noqa: BLE001
        raise FuzzFailure(f"reading the value: {type(e).__name__}: {e}"[:300]) from e
    return "value"
