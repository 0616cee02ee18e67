"""The one allow-list (rollout_cli.inputs.pickled.allow, with plain.py's objects): exactly these
globals, each inert (no attribute written, no BUILD, not picklable), the rest refused by name."""
from __future__ import annotations

import pickle

import pytest

from rollout_cli.inputs.pickled import ALLOWED_GLOBALS, PickleFormatError, PlainData, UnsafePickleError, allow, loads_pickle

EXPECTED = {
    # builtins as pickle protocols 0-2 write bytes, sets and frozensets
    "__builtin__.bytes", "__builtin__.frozenset", "__builtin__.set", "builtins.bytes", "builtins.frozenset",
    "builtins.set", "_codecs.encode", "collections.OrderedDict",
    # torch: tensors, their storages, devices and sizes
    "torch._utils._rebuild_tensor_v2", "torch.storage._load_from_bytes", "torch.device", "torch.Size",
    *(f"torch.{k}Storage" for k in ("BFloat16", "Bool", "Byte", "Char", "Double", "Float", "Half", "Int", "Long", "Short")),
    # numpy, under numpy 1's and numpy 2's module paths
    "numpy.dtype", "numpy.ndarray",
    *(f"{core}.{name}" for core in ("numpy.core", "numpy._core")
      for name in ("multiarray._reconstruct", "multiarray.scalar", "numeric._frombuffer")),
    # tensordict, consolidated and not
    "tensordict._reductions._make_td", "tensordict._reductions._rebuild_tensordict_files_consolidated",
    "tensordict._td.TensorDict",
    # the frameworks' classes and rebuild functions
    "_io.BytesIO", "verl.protocol.DataProto", "roll.distributed.scheduler.protocol.DataProto",
    *(f"skyrl.backends.skyrl_train.training_batch.{n}"
      for n in ("TensorBatch", "TrainingInputBatch", "TrainingOutputBatch", "_rebuild_tensor_batch")),
    "miles.utils.types.AdapterRef", "miles.utils.types.RewardSpec",
    # PIL images (slime's multimodal_inputs), read as their checked state (images.py)
    "PIL.Image.Image", "PIL.PngImagePlugin.PngImageFile", "PIL.JpegImagePlugin.JpegImageFile",
    "PIL.GifImagePlugin.GifImageFile", "PIL.WebPImagePlugin.WebPImageFile", "PIL.BmpImagePlugin.BmpImageFile",
    "PIL.TiffImagePlugin.TiffImageFile", "PIL.MpoImagePlugin.MpoImageFile", "PIL.PpmImagePlugin.PpmImageFile",
}


def test_exactly_these_globals():
    assert set(ALLOWED_GLOBALS) == EXPECTED and list(ALLOWED_GLOBALS) == sorted(ALLOWED_GLOBALS)
    for name in EXPECTED:
        module, _, attr = name.rpartition(".")
        assert allow.resolve(module, attr) is not None, name
    assert allow.resolve("verl.protocol", "collate_fn") is None and allow.resolve("numpy", "load") is None


@pytest.mark.parametrize("name", sorted(EXPECTED - {n for n in EXPECTED if n.endswith(("DataProto", "Batch", "BytesIO", "AdapterRef", "RewardSpec", "Image.Image", "ImageFile"))}))
def test_allowed_objects_are_inert(name):
    obj = allow._ALLOWED[name]
    assert getattr(obj, "__dict__", None) is None
    with pytest.raises((PickleFormatError, AttributeError, TypeError)):
        obj._fn = print
    with pytest.raises(TypeError):
        pickle.dumps(obj)
    module, _, attr = name.rpartition(".")
    raw = b"\x80\x02c" + module.encode() + b"\n" + attr.encode() + b"\n}X\x01\x00\x00\x00aK\x01sb."  # BUILD on it
    with pytest.raises(PickleFormatError):
        loads_pickle(raw, "build")


def test_plain_data_classes():
    cls = allow._PLAIN_TYPES["miles.utils.types.AdapterRef"]
    out = loads_pickle(b"\x80\x02cmiles.utils.types\nAdapterRef\n)\x81}X\x04\x00\x00\x00nameX\x01\x00\x00\x00asb.", "ok")
    assert type(out) is cls and isinstance(out, PlainData) and out == {"name": "a"}
    assert out.class_name == "miles.utils.types.AdapterRef" and "AdapterRef" in repr(out)
    with pytest.raises(TypeError):
        pickle.dumps(out)


@pytest.mark.parametrize("name", ["verl.protocol\ncollate_fn", "verl.protocol\nDataProtoItem", "skyrl.backends.skyrl_train.training_batch\nTensorList",
                                  "roll.distributed.scheduler.remote_protocol\nRemoteBatch", "tensordict\nTensorDict",
                                  "torch\nload", "io\nBytesIO", "_io\nopen", "builtins\neval", "copyreg\n_reconstructor"])
def test_neighbours_of_allowed_names_are_refused(name):
    with pytest.raises(UnsafePickleError) as ei:
        loads_pickle(b"\x80\x02c" + name.encode() + b"\n)R.", "neighbour")
    assert ei.value.global_name == name.replace("\n", ".") and ei.value.path == "neighbour"
