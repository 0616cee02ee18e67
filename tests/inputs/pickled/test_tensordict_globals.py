"""TensorDicts as plain data (rollout_cli.inputs.pickled.tensordict_globals): what torch.save of
a real TensorDict (tensordict from PyPI) writes, consolidated and not, nested, bfloat16; and
each rebuild refusing what tensordict never writes."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rollout_cli.inputs.pickled import PickleFormatError, TensorDictData, UnsafePickleError, load_torch_bytes


def _td():
    return TensorDict({
        "ids": torch.arange(12).reshape(3, 4),
        "lp": torch.linspace(-1, 0, 12, dtype=torch.float32).reshape(3, 4),
        "mask": torch.tensor([[True, False, True, True]] * 3),
        "half": torch.ones(3, 2, dtype=torch.float16),
        "bf": torch.tensor([[1.5, -2.25]] * 3, dtype=torch.bfloat16),
        "sub": TensorDict({"x": torch.arange(3, dtype=torch.int32)}, batch_size=[3]),
    }, batch_size=[3])


def _saved(td) -> bytes:
    buf = io.BytesIO()
    torch.save(td, buf)
    return buf.getvalue()


def _check(out, td):
    assert isinstance(out, TensorDictData) and out.batch_size == (3,) and out.device is None
    assert set(out) == set(td.keys())
    for key in ("ids", "lp", "mask", "half"):
        np.testing.assert_array_equal(out[key], td[key].numpy())
        assert out[key].dtype == td[key].numpy().dtype
    np.testing.assert_array_equal(out["bf"], td["bf"].float().numpy())  # bfloat16 widened exactly
    assert out["bf"].dtype == np.float32
    assert isinstance(out["sub"], TensorDictData) and out["sub"]["x"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("consolidated", [True, False])
def test_tensordict_as_torch_saves_it(consolidated):
    td = _td().contiguous()
    if consolidated:
        td = td.consolidate()
    raw = _saved(td)
    assert (b"_rebuild_tensordict_files_consolidated" in raw) == consolidated and (b"_make_td" in raw) != consolidated
    _check(load_torch_bytes(raw, "td"), td)


def test_empty_and_none():
    assert load_torch_bytes(_saved(None), "none") is None
    out = load_torch_bytes(_saved(TensorDict({}, batch_size=[5])), "empty")
    assert out == {} and out.batch_size == (5,)


def _consolidated_pickle(metadata_tail: bytes) -> bytes:
    """A torch archive whose pickle calls the consolidated rebuild with the given metadata."""
    import zipfile


    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", metadata_tail)
        z.writestr("archive/byteorder", b"little")
        z.writestr("archive/data/0", bytes(range(16)))
    return buf.getvalue()


def _storage_tensor() -> bytes:
    return (b"ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nByteStorage\nX\x01\x00\x00\x000"
            b"X\x03\x00\x00\x00cpuK\x10tQK\x00K\x10\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtR")


def _leaves(leaf: bytes, cls: bytes = b"X\x0a\x00\x00\x00TensorDict") -> bytes:
    return (b"\x80\x02ctensordict._reductions\n_rebuild_tensordict_files_consolidated\n"
            b"(X\x03\x00\x00\x00cls" + cls + b"X\x0b\x00\x00\x00non_tensors}X\x06\x00\x00\x00leaves}X\x01\x00\x00\x00a"
            + leaf + b"sX\x0c\x00\x00\x00cls_metadata}X\x0a\x00\x00\x00batch_size]K\x02asd" + _storage_tensor() + b"\x86R.")


def test_consolidated_leaf_by_hand():
    ok = _leaves(b"(X\x0b\x00\x00\x00torch.int32]K\x02aK\x00K\x08\x89t")
    out = load_torch_bytes(_consolidated_pickle(ok), "ok")
    assert out["a"].dtype == np.int32 and out["a"].tolist() == np.frombuffer(bytes(range(8)), "<i4").tolist()


@pytest.mark.parametrize("leaf,match", [
    (b"(X\x0b\x00\x00\x00torch.int32]K\x02aK\x00K\x14\x89t", "outside its storage"),  # past the storage's 16 bytes
    (b"(X\x0b\x00\x00\x00torch.int32]K\x02aK\x08K\x04\x89t", "outside its storage"),  # stop before start
    (b"(X\x0b\x00\x00\x00torch.int32]K\x03aK\x00K\x08\x89t", "bytes for shape"),  # 8 bytes, 3 int32
    (b"(X\x0d\x00\x00\x00torch.complex]K\x01aK\x00K\x08\x89t", "not read"),
    (b"(X\x05\x00\x00\x00int32]K\x02aK\x00K\x08\x89t", "dtype"),
    (b"(X\x0b\x00\x00\x00torch.int32]K\x02aK\x00t", "expected"),
])
def test_consolidated_leaf_refused(leaf, match):
    with pytest.raises(PickleFormatError, match=match):
        load_torch_bytes(_consolidated_pickle(_leaves(leaf)), "bad")


def test_consolidated_other_classes_refused():
    with pytest.raises(PickleFormatError, match="class"):
        load_torch_bytes(_consolidated_pickle(_leaves(b"(X\x0b\x00\x00\x00torch.int32]K\x02aK\x00K\x08\x89t",
                                                      cls=b"X\x0e\x00\x00\x00<class 'Evil'>")), "cls")


def test_make_td_refuses_other_classes_and_state():
    head = b"\x80\x02ctensordict._reductions\n_make_td\n"
    cases = [
        (head + b"ccollections\nOrderedDict\n}\x86R.", PickleFormatError, "only"),  # not TensorDict
        (head + b"ctensordict._td\nTensorDict\n]\x86R.", PickleFormatError, "only"),  # state not a dict
        (head + b"ctensordict._td\nTensorDict\n}X\x0b\x00\x00\x00_tensordict}X\x04\x00\x00\x00evilK\x01ssX\x0b\x00\x00\x00_batch_size)s\x86R.",
         PickleFormatError, "not a tensor"),  # an entry that is not a tensor
        (head + b"ctensordict._td\nTensorDict\n}X\x05\x00\x00\x00_evilK\x01s\x86R.", PickleFormatError, "unexpected keys"),
        (b"\x80\x02ctensordict._td\nTensorDict\n)R.", PickleFormatError, "only names"),  # the class is a name only
        (b"\x80\x02ctensordict._td\nTensorDict\n)\x81.", PickleFormatError, "must be a type"),
        (b"\x80\x02ctensordict.tensorclass\nNonTensorData\n)\x81.", UnsafePickleError, "NonTensorData"),
        (b"\x80\x02ctensordict._reductions\n_rebuild_tensordict_files\n)R.", UnsafePickleError, "_rebuild_tensordict_files"),
    ]
    import zipfile

    for i, (pkl, err, match) in enumerate(cases):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
            z.writestr("archive/data.pkl", pkl)
        with pytest.raises(err, match=match):
            load_torch_bytes(buf.getvalue(), f"case {i}")
