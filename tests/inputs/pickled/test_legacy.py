"""A storage pickled on its own (`torch.storage._load_from_bytes`, torch.save's legacy form),
as a tensor inside a plain pickle holds it: read exactly, and every hostile variant refused
(PickleFormatError or UnsafePickleError: exit 3 from every reader)."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from rollout_cli.inputs.pickled import PickleFormatError, UnsafePickleError, loads_pickle


def test_tensors_of_every_dtype_in_an_object_array_read_exactly():
    arrs = [torch.randn(3, 4).to(torch.bfloat16), torch.randn(5).half(), torch.arange(6).reshape(2, 3),
            torch.tensor([True, False]), torch.randn(2, 2)[:, 1]]
    got = loads_pickle(pickle.dumps({"mm": np.array([{"t": t} for t in arrs] + [None], dtype=object)}), "x.pkl")["mm"]
    assert got[-1] is None
    for t, d in zip(arrs, got):
        want = t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()
        assert d["t"].dtype == want.dtype and np.array_equal(d["t"], want)


def _with_storage(data: bytes, change) -> bytes:
    """`data` (a protocol 3 pickle) with the first legacy storage bytes in it changed by `change`
    and their BINBYTES length prefix made to follow."""
    start = data.index(b"\x80\x02\x8a\n")
    assert data[start - 5:start - 4] == b"B"
    length = int.from_bytes(data[start - 4:start], "little")
    inner = data[start:start + length]
    bad = change(inner)
    assert bad != inner
    return data[:start - 4] + len(bad).to_bytes(4, "little") + bad + data[start + length:]


@pytest.mark.parametrize("change, words", [
    (lambda b: b.replace(b"\x06\x00\x00\x00\x00\x00\x00\x00", b"\x07\x00\x00\x00\x00\x00\x00\x00", 1), "7 elements"),
    (lambda b: b.replace(b"little_endianq\x02\x88", b"little_endianq\x02\x89", 1), "little-endian"),
    (lambda b: b.replace(b"\x8a\nl\xfc\x9cF", b"\x8a\nl\xfc\x9cG", 1), "magic number"),
    (lambda b: b.replace(b"ctorch\nLongStorage", b"cos\nsystem", 1), "os.system"),
])
def test_a_hostile_storage_inside_a_plain_pickle_is_refused(change, words):
    data = pickle.dumps({"mm": np.array([{"image_grid_thw": torch.arange(6)}], dtype=object)}, protocol=3)
    with pytest.raises((PickleFormatError, UnsafePickleError), match=words):
        loads_pickle(_with_storage(data, change), "x.pkl")


def test_a_storage_with_bytes_past_its_count_is_refused():
    data = pickle.dumps({"t": torch.arange(3)}, protocol=3)
    assert np.array_equal(loads_pickle(data, "x.pkl")["t"], [0, 1, 2])
    with pytest.raises(PickleFormatError, match="32 bytes after the element count, 24 expected"):
        loads_pickle(_with_storage(data, lambda b: b + bytes(8)), "x.pkl")


def test_two_storages_in_one_legacy_blob_are_refused():
    data = pickle.dumps({"t": torch.arange(3)}, protocol=3)
    with pytest.raises(PickleFormatError, match="storage keys"):
        loads_pickle(_with_storage(data, lambda b: b.replace(b"]q\x00X", b"]q\x00(X", 1).replace(b"q\x01a.", b"q\x01h\x01e.", 1)), "x.pkl")
