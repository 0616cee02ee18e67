"""The restricted unpickler's entry points (rollout_cli.inputs.pickled.unpickle, with context.py
and errors.py): no code from a file runs and no module it names is imported, whatever it names;
errors name the file (and, for embedded torch.save bytes, the file they sit in)."""
from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from pickled_dumps import write_roll, write_skyrl, write_verl

from rollout_cli.inputs.pickled import (PickleFormatError, UnsafePickleError, load_pickle, load_torch, load_torch_bytes,
                                        loads_pickle)
from rollout_cli.inputs.pickled.context import current

REPO = Path(__file__).resolve().parents[3]

# A fake framework tree: every module leaves a marker when imported, every hook a file would
# reach (a class's __setstate__ / __reduce__, a rebuild function) leaves one when called.
_HOOK = """
import os as _os
def _mark(what):
    open(_os.path.join(_os.environ["PICKLED_MARKERS"], what.replace("/", "_")), "w").close()
_mark("import " + __name__)
"""
_FAKES = {
    "verl/__init__.py": "",
    "verl/protocol.py": """
class DataProto:
    def __setstate__(self, state): _mark("verl DataProto.__setstate__")
    def __reduce__(self): _mark("verl DataProto.__reduce__")
def evil_hook(*a): _mark("verl evil_hook")
""",
    "skyrl/__init__.py": "", "skyrl/backends/__init__.py": "", "skyrl/backends/skyrl_train/__init__.py": "",
    "skyrl/backends/skyrl_train/training_batch.py": """
def _rebuild_tensor_batch(cls, state): _mark("skyrl _rebuild_tensor_batch")
class TensorBatch(dict):
    def __setstate__(self, state): _mark("skyrl TensorBatch.__setstate__")
class TrainingInputBatch(TensorBatch): pass
class TrainingOutputBatch(TensorBatch): pass
""",
    "roll/__init__.py": "", "roll/distributed/__init__.py": "", "roll/distributed/scheduler/__init__.py": "",
    "roll/distributed/scheduler/protocol.py": """
class DataProto:
    def __setstate__(self, state): _mark("roll DataProto.__setstate__")
""",
    "tensordict/__init__.py": "",
    "tensordict/_reductions.py": """
def _make_td(cls, state): _mark("tensordict _make_td")
def _rebuild_tensordict_files_consolidated(metadata, storage): _mark("tensordict consolidated")
""",
    "tensordict/_td.py": "class TensorDict:\n    def __new__(cls, *a): _mark('tensordict TensorDict')\n",
    "torch/__init__.py": """
def device(*a): _mark("torch.device")
def Size(*a): _mark("torch.Size")
class LongStorage: pass
class ByteStorage: pass
class FloatStorage: pass
class IntStorage: pass
""",
    "torch/_utils.py": "def _rebuild_tensor_v2(*a): _mark('torch _rebuild_tensor_v2')\n",
    "miles/__init__.py": "", "miles/utils/__init__.py": "",
    "miles/utils/types.py": "class AdapterRef:\n    def __setstate__(self, s): _mark('miles AdapterRef')\n",
}
FAKE_MODULES = sorted({p[: -len(".py")].replace("/__init__", "").replace("/", ".") for p in _FAKES})

# numpy's own pickle hooks (numpy cannot be shadowed: it is imported by the package) replaced by
# lookalikes that leave a marker, under numpy 1's and numpy 2's paths, and io.BytesIO's
_NUMPY_LOOKALIKES = """
import numpy, numpy._core.multiarray as m2, numpy._core.numeric as n2, _io, warnings
warnings.simplefilter("ignore")
import numpy.core.multiarray as m1, numpy.core.numeric as n1
def _hook(name):
    def f(*a, **k):
        _mark("numpy " + name)
    return f
for mod in (m1, m2):
    mod._reconstruct = _hook("_reconstruct")
    mod.scalar = _hook("scalar")
for mod in (n1, n2):
    mod._frombuffer = _hook("_frombuffer")
numpy.dtype.__setstate__  # (a C method: calling it on a dtype the loader made is numpy's own code)
class _EvilBytesIO:
    def __setstate__(self, s): _mark("_io.BytesIO.__setstate__")
_io.BytesIO = _EvilBytesIO
"""


def _write_fakes(root: Path) -> None:
    for rel, body in _FAKES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(_HOOK + textwrap.dedent(body))


def _files(tmp: Path) -> dict[str, tuple[str, Path]]:
    """(loader, path) of every kind of pickled file the package reads."""
    rng = np.random.default_rng(0)
    batch = {"input_ids": rng.integers(0, 100, (4, 6)), "logp": rng.standard_normal((4, 6)).astype(np.float32)}
    nt = {"traj_group_id": ["a", "a", "b", "b"], "nested": [np.array([np.arange(2), "x"], dtype=object)] * 4,
          "index": np.arange(4)}
    out = {
        "skyrl": ("load_pickle", write_skyrl(tmp / "skyrl", 1, {"sequences": batch["input_ids"], "lp": batch["logp"], "none": None,
                                                              "pv": [np.ones((2, 2), np.float32)] * 4},
                                             {"policy_prompt_boundaries": [(0, 2), (2, 4)]}, bf16=["lp"])),
        "verl": ("load_pickle", write_verl(tmp / "verl", 2, batch, nt, {"m": 1}, gbs=2, n=2, prompt_length=3, response_length=3)),
        "roll-numpy1": ("load_pickle", write_roll(tmp / "roll", 3, batch, nt, {"m": 1})),
        "roll-numpy2": ("load_pickle", write_roll(tmp / "roll2", 3, batch, nt, {"m": 1}, numpy1=False)),
    }
    pt = tmp / "miles_r3.pt"
    torch.save({"rollout_id": 4, "samples": [{"tokens": [1, 2, 3], "rollout_routed_experts": np.zeros((2, 2, 2), np.int32),
                                              "score": np.float64(1.0), "t": torch.arange(3)}]}, pt)
    out["pt-numpy"] = ("load_torch", pt)
    evil = tmp / "evil.dp"
    evil.write_bytes(b"\x80\x04\x8c\rverl.protocol\x8c\tevil_hook\x93)R.")
    out["evil-global"] = ("load_pickle", evil)
    evil_torch = tmp / "evil_torch.dp"  # a verl file whose embedded torch.save bytes call a fake hook
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02ctensordict._reductions\n_private_hook\n)R.")
    evil_torch.write_bytes(b"\x80\x04\x8c\rverl.protocol\x8c\tDataProto\x93)\x81" + pickle.dumps((buf.getvalue(), {}, {}), 4)[2:-1] + b"b.")
    out["evil-embedded"] = ("load_pickle", evil_torch)
    return out


def test_no_code_from_a_file_runs(tmp_path):
    fakes, markers = tmp_path / "fakes", tmp_path / "markers"
    markers.mkdir()
    _write_fakes(fakes)
    files = {k: (fn, str(p)) for k, (fn, p) in _files(tmp_path / "files").items()}
    code = textwrap.dedent(f"""
        import json, os, pickle, sys
        sys.path.insert(0, {str(fakes)!r}); sys.path.insert(1, {str(REPO)!r})
        def _mark(what):
            open(os.path.join(os.environ["PICKLED_MARKERS"], what), "w").close()
    """) + _NUMPY_LOOKALIKES + textwrap.dedent(f"""
        from rollout_cli.inputs import pickled
        files = json.loads({json.dumps(json.dumps(files))})
        got = {{}}
        for name, (fn, path) in files.items():
            try:
                obj = getattr(pickled, fn)(path)
                got[name] = getattr(obj, "class_name", type(obj).__name__)
            except pickled.UnsafePickleError as e:
                got[name] = "refused " + e.global_name
        fake = {FAKE_MODULES!r}
        imported = sorted(m for m in sys.modules if m in fake or m.split(".")[0] in ("torch", "tensordict", "verl", "skyrl", "roll"))
        print(json.dumps({{"got": got, "imported": imported, "markers": sorted(os.listdir(os.environ["PICKLED_MARKERS"]))}}))
        # the fakes are live: plain pickle.load of the same files runs their hooks
        for name in ("verl", "skyrl"):
            with open(files[name][1], "rb") as fh:
                try:
                    pickle.load(fh)
                except Exception:  # (a hook returned None where the file expects an object)
                    pass
        print(json.dumps(sorted(os.listdir(os.environ["PICKLED_MARKERS"]))))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PICKLED_MARKERS=str(markers), PYTHONPATH=""))
    assert res.returncode == 0, res.stderr[-3000:]
    first, after = res.stdout.strip().splitlines()
    report = json.loads(first)
    assert report["markers"] == [] and report["imported"] == []
    assert report["got"] == {
        "skyrl": "skyrl.backends.skyrl_train.training_batch.TrainingInputBatch",
        "verl": "verl.protocol.DataProto",
        "roll-numpy1": "roll.distributed.scheduler.protocol.DataProto",
        "roll-numpy2": "roll.distributed.scheduler.protocol.DataProto",
        "pt-numpy": "dict",
        "evil-global": "refused verl.protocol.evil_hook",
        "evil-embedded": "refused tensordict._reductions._private_hook",
    }
    assert {"import verl.protocol", "numpy _reconstruct", "skyrl _rebuild_tensor_batch", "torch.device"} <= set(json.loads(after))


def test_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(b"\x80\x04\x8c\x02os\x8c\x06system\x93\x8c\x04true\x85R.")
    with pytest.raises(UnsafePickleError) as ei:
        load_pickle(bad)
    assert ei.value.path == str(bad) and ei.value.global_name in ("os.system", "posix.system")
    assert "--trust-pickle" in str(ei.value)
    bad.write_bytes(b"\x80\x04}\x94(K\x01")  # truncated
    with pytest.raises(PickleFormatError) as ef:
        load_pickle(bad)
    assert ef.value.path == str(bad) and "corrupt pickle stream" in str(ef.value)
    with pytest.raises(PickleFormatError, match="persistent id"):
        loads_pickle(b"\x80\x02X\x01\x00\x00\x00aQ.", "pid")
    with pytest.raises(OSError):
        load_pickle(tmp_path / "missing.pkl")


def test_embedded_bytes_errors_name_the_outer_file(tmp_path):
    state = (b"PK\x03\x04 not really a zip", {}, {})
    path = tmp_path / "gen_batch.dp"
    path.write_bytes(b"\x80\x04\x8c\rverl.protocol\x8c\tDataProto\x93)\x81" + pickle.dumps(state, 4)[2:-1] + b"b.")
    with pytest.raises(PickleFormatError) as ei:
        load_pickle(path)
    assert str(path) in ei.value.path and "embedded torch.save bytes" in ei.value.path


def test_torch_entry_points_agree(tmp_path):
    payload = {"t": torch.arange(6, dtype=torch.int32).reshape(2, 3), "a": np.arange(3), "s": "x"}
    path = tmp_path / "x.pt"
    torch.save(payload, path)
    a, b = load_torch(path), load_torch_bytes(path.read_bytes(), "x")
    for got in (a, b):
        assert got["t"].tolist() == [[0, 1, 2], [3, 4, 5]] and got["a"].tolist() == [0, 1, 2] and got["s"] == "x"


def test_no_load_no_context():
    with pytest.raises(RuntimeError):
        current()


@pytest.mark.parametrize("numel", [16, 1 << 19])  # a storage checked at once, and one checked on a thread
def test_embedded_storage_crc_is_checked(tmp_path, numel):
    """Embedded torch.save storages are views of the file's bytes, not copies; a flipped byte in
    one is still found (its CRC), and the error names the file."""
    td_bytes = io.BytesIO()
    torch.save({"t": torch.arange(numel)}, td_bytes)
    raw = bytearray(td_bytes.getvalue())
    good = loads_pickle(pickle.dumps({"b": bytes(raw)}, 4), "good")["b"]
    out = load_torch_bytes(good, "good")
    assert out["t"][numel - 1] == numel - 1 and not out["t"].flags.writeable  # a view of the bytes
    with zipfile.ZipFile(io.BytesIO(bytes(raw))) as z:
        info = z.getinfo("archive/data/0")
    n, m = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little"), \
        int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
    raw[info.header_offset + 30 + n + m + 8] ^= 0xFF
    with pytest.raises(PickleFormatError, match="CRC mismatch") as ei:
        load_torch_bytes(bytes(raw), "the batch")
    assert ei.value.path == "the batch"
    # inside a verl file: its consolidated storage is found corrupt, the error names the file
    path = write_verl(tmp_path, 1, {"ids": np.arange(numel).reshape(-1, 8)}, gbs=1, n=1, prompt_length=1, response_length=1)
    data = bytearray(path.read_bytes())
    at = data.index(b"archive/data/0") + len(b"archive/data/0")
    head = data.rindex(b"PK\x03\x04", 0, at)
    extra = int.from_bytes(data[head + 28:head + 30], "little")
    data[at + extra + 8] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(PickleFormatError, match="CRC mismatch") as ei:
        load_pickle(path)
    assert str(path) in ei.value.path and "embedded torch.save bytes" in ei.value.path
