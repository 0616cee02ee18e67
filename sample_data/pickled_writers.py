"""Write SkyRL, verl and ROLL batch files from plain numpy arrays and lists, byte-shaped as the
frameworks' own writers leave them, without any of the three installed.

Each framework class is a stand-in carrying the framework's module and class name, registered
in ``sys.modules`` only while it is pickled (``standins()``), and pickling exactly the state the
real class pickles. The TensorDicts inside verl's and ROLL's files are real ``tensordict``
TensorDicts (from PyPI), saved with ``torch.save`` as those writers do. Needs torch and
tensordict (the test extra).

``write_skyrl`` mirrors NovaSky-AI/SkyRL@a9564572eb8e:

* skyrl/train/trainer.py:436-446 (``rewards`` and ``metadata["uids"]`` popped, then
  ``dump_data(training_input, file_name=f"global_step_{global_step}_training_input")``) and
  :1236-1242 (``{export_path}/dumped_data/{file_name}.pkl``);
* skyrl/backends/skyrl_train/training_batch.py:17-35 (``_serialize_tensor``: numpy bytes, or
  torch.save bytes for bfloat16), :113-117 (``_rebuild_tensor_batch``), :244-281 (``__reduce__``
  and ``__getstate__``: ``batch_dict``, ``batch_size``, ``device``, ``metadata``), :395-398
  (``save``: ``pickle.dump`` at the default protocol, 4 on Python 3.8-3.13).

``write_verl`` mirrors verl-project/verl@1dda039b9c63:

* verl/utils/skip/rollout_skip.py:95-101 (``prepare_data``: ``{step}/gen_batch.dp`` and
  ``meta.json`` as ``json.dumps({"global_steps": step})``) and :112-122 (the folder
  ``{experiment_name}_{project_name}/GBS{gbs}_N{n}_in{prompt_length}_out{response_length}/{step}``);
* verl/protocol.py:317-328 (the ``DataProto`` dataclass), :377-402 (``__getstate__``: the
  TensorDict made contiguous and consolidated, then ``torch.save`` bytes; state
  ``(bytes, non_tensor_batch, meta_info)``), :426-428 (``save_to_disk``: ``pickle.dump``, default
  protocol). numpy 2's module paths (``numpy._core``), as the numpy installed here writes them.

``write_roll`` mirrors alibaba/ROLL@8eb27cc2dc34:

* roll/distributed/scheduler/rollout_mock_mixin.py:135-153 (``_dump_batch``:
  ``{dump_dir}/{mode}/step_{global_step:06d}.pkl``, ``pickle.HIGHEST_PROTOCOL``);
* roll/distributed/scheduler/protocol.py:321-328 (``__getstate__``: consolidated only when
  ``tensordict.__version__ >= "0.5.0"`` as *strings*, false for tensordict 0.10 and later, so
  ``_make_td``; state ``(io.BytesIO, non_tensor_batch, remote_batch, meta_info)``). numpy 1's
  module paths (``numpy.core``) by default, as a ROLL environment writes them.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

SKYRL_MODULE = "skyrl.backends.skyrl_train.training_batch"
VERL_MODULE = "verl.protocol"
ROLL_MODULE = "roll.distributed.scheduler.protocol"


# --------------------------------------------------------------------------- stand-in classes


def _torch():
    import torch

    return torch


def _serialize_tensor(value: Any) -> dict:
    # training_batch.py:17-35
    try:
        arr = value.numpy()
        return {"format": "numpy", "data": arr.tobytes(), "shape": arr.shape, "dtype": str(arr.dtype)}
    except TypeError:
        buffer = io.BytesIO()
        _torch().save(value, buffer)
        return {"format": "torch", "data": buffer.getvalue()}


def _deserialize_tensor(value: dict) -> Any:
    # training_batch.py:38-49
    if value.get("format") == "torch":
        return _torch().load(io.BytesIO(value["data"]), weights_only=True)
    arr = np.frombuffer(value["data"], dtype=np.dtype(value["dtype"])).reshape(value["shape"])
    return _torch().from_numpy(arr.copy())


def _rebuild_tensor_batch(cls, state):
    """Stand-in of SkyRL's rebuild (training_batch.py:113-117): a plain-data copy of the state."""
    obj = dict.__new__(cls)
    obj.__setstate__(state)
    return obj


class TensorBatch(dict):
    """Stand-in of SkyRL's ``TensorBatch``: values are torch tensors, lists of them or None."""

    metadata: dict | None = None

    def __reduce__(self):
        return (_rebuild_tensor_batch, (type(self), self.__getstate__()))

    def __getstate__(self):
        torch = _torch()
        batch_dict, batch_size, device = {}, None, None
        for key, value in self.items():
            if value is None:
                batch_dict[key] = None
                continue
            if isinstance(value, list):
                batch_dict[key] = {"format": "tensor_list", "items": [_serialize_tensor(t.contiguous()) for t in value]}
            else:
                batch_dict[key] = _serialize_tensor(value.contiguous())
            batch_size = len(value) if batch_size is None else batch_size
            device = torch.device("cpu")
        return {"batch_dict": batch_dict, "batch_size": batch_size, "device": device, "metadata": self.metadata}

    def __setstate__(self, state):
        # training_batch.py:283-300, without its consistency checks
        for key, value in state["batch_dict"].items():
            if value is None:
                dict.__setitem__(self, key, None)
            elif value.get("format") == "tensor_list":
                dict.__setitem__(self, key, [_deserialize_tensor(v) for v in value["items"]])
            else:
                dict.__setitem__(self, key, _deserialize_tensor(value))
        self.metadata = state["metadata"]


class TrainingInputBatch(TensorBatch):
    pass


class TrainingOutputBatch(TensorBatch):
    pass


@dataclass
class VerlDataProto:
    """Stand-in of verl's ``DataProto`` dataclass (protocol.py:317-328, 377-423)."""

    batch: Any = None
    non_tensor_batch: dict = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)

    def __getstate__(self):
        batch = self.batch
        if batch is not None and len(batch.keys()) > 0:
            batch = batch.contiguous().consolidate()
        buffer = io.BytesIO()
        _torch().save(batch, buffer)
        return buffer.getvalue(), self.non_tensor_batch, self.meta_info

    def __setstate__(self, data):
        raw, self.non_tensor_batch, self.meta_info = data
        self.batch = _torch().load(io.BytesIO(raw), weights_only=False, map_location="cpu")


class RollDataProto:
    """Stand-in of ROLL's ``DataProto`` (protocol.py:153-170, 321-339)."""

    def __init__(self, batch=None, non_tensor_batch=None, meta_info=None):
        self._batch = batch
        self._non_tensor_batch = non_tensor_batch if non_tensor_batch is not None else {}
        self._remote_batch = None
        self.meta_info = meta_info if meta_info is not None else {}

    def __getstate__(self):
        import tensordict

        buffer = io.BytesIO()
        if tensordict.__version__ >= "0.5.0" and self._batch is not None:  # a str comparison, as ROLL's
            self._batch = self._batch.contiguous()
            self._batch = self._batch.consolidate()
        _torch().save(self._batch, buffer)
        return buffer, self._non_tensor_batch, self._remote_batch, self.meta_info

    def __setstate__(self, data):
        buf, self._non_tensor_batch, self._remote_batch, self.meta_info = data
        buf.seek(0)
        self._batch = _torch().load(buf, weights_only=False, map_location="cpu")


def _name(module: str, name: str, obj: Any) -> None:
    obj.__module__ = module
    obj.__qualname__ = name
    obj.__name__ = name


_STANDINS: dict[str, dict[str, Any]] = {
    SKYRL_MODULE: {"TensorBatch": TensorBatch, "TrainingInputBatch": TrainingInputBatch,
                   "TrainingOutputBatch": TrainingOutputBatch, "_rebuild_tensor_batch": _rebuild_tensor_batch},
    VERL_MODULE: {"DataProto": VerlDataProto},
    ROLL_MODULE: {"DataProto": RollDataProto},
}


for _module, _names in _STANDINS.items():
    for _n, _obj in _names.items():
        _name(_module, _n, _obj)


@contextmanager
def standins() -> Iterator[None]:
    """Register the stand-in classes under the frameworks' module names (and their parent
    packages) while the block runs: the pickler then names them as the frameworks' own, and
    ``pickle.load`` finds them again. Everything registered is removed afterwards."""
    added: list[str] = []
    try:
        for module, names in _STANDINS.items():
            parts = module.split(".")
            for i in range(1, len(parts) + 1):
                mod = ".".join(parts[:i])
                if mod not in sys.modules:
                    sys.modules[mod] = types.ModuleType(mod)
                    added.append(mod)
            for name, obj in names.items():
                setattr(sys.modules[module], name, obj)
        yield
    finally:
        for mod in reversed(added):
            sys.modules.pop(mod, None)


# numpy 1's module paths for a file written by a numpy-1 environment (ROLL's): the reduce
# functions numpy 2 names under numpy._core, named under numpy.core while the file is pickled
_NUMPY1_NAMES = {"_reconstruct": "numpy.core.multiarray", "scalar": "numpy.core.multiarray",
                 "_frombuffer": "numpy.core.numeric"}


class _Numpy1Pickler(pickle.Pickler):
    def __init__(self, fh, protocol, standin_fns):
        super().__init__(fh, protocol=protocol)
        self._fns = standin_fns
        self._protocol = protocol

    def reducer_override(self, obj):
        if type(obj) is np.ndarray or isinstance(obj, np.generic):
            rv = obj.__reduce_ex__(self._protocol)
            fn = self._fns.get(getattr(rv[0], "__name__", None))
            if fn is not None:
                return (fn, *rv[1:])
        return NotImplemented


@contextmanager
def _numpy1_paths() -> Iterator[dict[str, Any]]:
    """Stand-in modules ``numpy.core.multiarray`` / ``numpy.core.numeric`` holding functions
    named as numpy 1 names its reduce functions, which call numpy's own when loaded."""
    from numpy._core import multiarray, numeric

    real = {"_reconstruct": multiarray._reconstruct, "scalar": multiarray.scalar, "_frombuffer": numeric._frombuffer}
    saved = {m: sys.modules.get(m) for m in ("numpy.core", "numpy.core.multiarray", "numpy.core.numeric")}
    fns: dict[str, Any] = {}
    try:
        for module in set(_NUMPY1_NAMES.values()):
            sys.modules[module] = types.ModuleType(module)
        for name, module in _NUMPY1_NAMES.items():
            def fn(*args, _real=real[name]):
                return _real(*args)

            _name(module, name, fn)
            setattr(sys.modules[module], name, fn)
            fns[name] = fn
        yield fns
    finally:
        for m, mod in saved.items():
            if mod is None:
                sys.modules.pop(m, None)
            else:
                sys.modules[m] = mod


def _dump(obj: Any, path: Path, protocol: int | None, numpy1: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with standins(), open(path, "wb") as fh:
        if numpy1:
            with _numpy1_paths() as fns:
                _Numpy1Pickler(fh, protocol if protocol is not None else pickle.DEFAULT_PROTOCOL, fns).dump(obj)
        else:
            pickle.dump(obj, fh, protocol=protocol)
    return path


def _tensordict(batch: dict[str, np.ndarray]):
    from tensordict import TensorDict

    torch = _torch()
    n = len(next(iter(batch.values()))) if batch else 0
    return TensorDict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in batch.items()}, batch_size=[n])


def _object_arrays(non_tensor_batch: dict[str, Any]) -> dict[str, np.ndarray]:
    out = {}
    for key, value in non_tensor_batch.items():
        if not isinstance(value, np.ndarray):
            arr = np.empty(len(value), dtype=object)
            for i, v in enumerate(value):
                arr[i] = v
            value = arr
        out[key] = value
    return out


# --------------------------------------------------------------------------- writers


def write_skyrl(export_path: str | os.PathLike, global_step: int, batch: dict[str, Any],
                metadata: dict | None = None, bf16: Iterable[str] = (),
                cls: type = TrainingInputBatch) -> Path:
    """``{export_path}/dumped_data/global_step_{global_step}_training_input.pkl``: `batch` maps a
    key to a numpy array (a tensor), a list of arrays (a ``TensorList``) or None; keys in
    `bf16` are saved as bfloat16 tensors (torch.save bytes, as SkyRL's fallback does)."""
    torch = _torch()
    bf16 = set(bf16)

    def tensor(key: str, arr: np.ndarray):
        t = torch.from_numpy(np.ascontiguousarray(arr))
        return t.to(torch.bfloat16) if key in bf16 else t

    data = cls()
    for key, value in batch.items():
        if value is None:
            dict.__setitem__(data, key, None)
        elif isinstance(value, list):
            dict.__setitem__(data, key, [tensor(key, v) for v in value])
        else:
            dict.__setitem__(data, key, tensor(key, value))
    data.metadata = metadata
    path = Path(export_path) / "dumped_data" / f"global_step_{global_step}_training_input.pkl"
    return _dump(data, path, protocol=4)


def verl_step_dir(dump_dir: str | os.PathLike, step: int, *, gbs: int, n: int, prompt_length: int,
                  response_length: int, experiment_name: str = "default_experiment_name",
                  project_name: str = "default_project_name") -> Path:
    """The folder verl's rollout skip writes step `step` to (rollout_skip.py:112-122)."""
    return (Path(dump_dir) / f"{experiment_name}_{project_name}"
            / f"GBS{gbs}_N{n}_in{prompt_length}_out{response_length}" / str(step))


def write_verl(dump_dir: str | os.PathLike, step: int, batch: dict[str, np.ndarray] | None,
               non_tensor_batch: dict[str, Any] | None = None, meta_info: dict | None = None, **folder: Any) -> Path:
    """``.../GBS{gbs}_N{n}_in{P}_out{R}/{step}/gen_batch.dp`` and ``meta.json`` beside it;
    `folder` takes ``verl_step_dir``'s keywords. `batch` (arrays of one batch size) becomes the
    TensorDict; each `non_tensor_batch` value is a numpy array, or a list made an object array."""
    step_dir = verl_step_dir(dump_dir, step, **folder)
    proto = VerlDataProto(batch=None if batch is None else _tensordict(batch),
                          non_tensor_batch=_object_arrays(non_tensor_batch or {}), meta_info=dict(meta_info or {}))
    path = _dump(proto, step_dir / "gen_batch.dp", protocol=None)
    (step_dir / "meta.json").write_text(json.dumps({"global_steps": step}))
    return path


def write_roll(dump_dir: str | os.PathLike, global_step: int, batch: dict[str, np.ndarray] | None,
               non_tensor_batch: dict[str, Any] | None = None, meta_info: dict | None = None,
               mode: str = "train", numpy1: bool = True) -> Path:
    """``{dump_dir}/{mode}/step_{global_step:06d}.pkl`` (`mode` ``train`` or ``val``); numpy 1's
    module paths unless `numpy1` is False."""
    proto = RollDataProto(batch=None if batch is None else _tensordict(batch),
                          non_tensor_batch=_object_arrays(non_tensor_batch or {}), meta_info=dict(meta_info or {}))
    path = Path(dump_dir) / mode / f"step_{global_step:06d}.pkl"
    return _dump(proto, path, protocol=pickle.HIGHEST_PROTOCOL, numpy1=numpy1)


def load_with_standins(path: str | os.PathLike) -> Any:
    """The frameworks' own way back: ``pickle.load`` with the stand-in classes, whose
    ``__setstate__`` ``torch.load``s the embedded TensorDict bytes (tensordict imported). For
    the bench's baseline and for checking the writers; never on a file one does not trust."""
    import warnings

    import tensordict  # noqa: F401  (registers its pickle reductions with torch.load)

    with standins(), open(path, "rb") as fh, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # numpy 2 on numpy 1's module paths
        return pickle.load(fh)
