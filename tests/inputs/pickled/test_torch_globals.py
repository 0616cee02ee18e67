"""torch.device and torch.Size as plain data (rollout_cli.inputs.pickled.torch_globals): exactly
what torch writes is read, in a bare pickle and inside a torch.save archive; nothing else."""
from __future__ import annotations

import io
import pickle

import pytest
import torch

from rollout_cli.inputs.pickled import PickleFormatError, load_torch_bytes, loads_pickle


@pytest.mark.parametrize("device,expect", [(torch.device("cpu"), "cpu"), (torch.device("cuda", 1), "cuda:1"),
                                           (torch.device("cuda"), "cuda"), (torch.device("meta"), "meta")])
@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_device_is_its_str(device, expect, protocol):
    assert loads_pickle(pickle.dumps({"d": device}, protocol=protocol), "dev") == {"d": expect}
    assert str(device) == expect


@pytest.mark.parametrize("size", [torch.Size([]), torch.Size([3]), torch.Size([2, 0, 5])])
def test_size_is_a_tuple(size):
    out = loads_pickle(pickle.dumps(size, protocol=4), "size")
    assert type(out) is tuple and out == tuple(size)
    buf = io.BytesIO()
    torch.save({"shape": size, "t": torch.zeros(size)}, buf)
    got = load_torch_bytes(buf.getvalue(), "saved")
    assert got["shape"] == tuple(size) and got["t"].shape == tuple(size)


@pytest.mark.parametrize("raw,match", [
    (b"\x80\x02ctorch\ndevice\nK\x00\x85R.", "torch.device"),  # an int type
    (b"\x80\x02ctorch\ndevice\nX\x03\x00\x00\x00cpuJ\xff\xff\xff\xff\x86R.", "torch.device"),  # negative index
    (b"\x80\x02ctorch\ndevice\nX\x06\x00\x00\x00cuda:0K\x01\x86R.", "torch.device"),  # index twice
    (b"\x80\x02ctorch\ndevice\nX\x05\x00\x00\x00a b;cK\x01\x86R.", "torch.device"),
    (b"\x80\x02ctorch\ndevice\n(X\x03\x00\x00\x00cpuK\x00K\x01tR.", "torch.device"),
    (b"\x80\x02ctorch\nSize\n]K\x01a\x85R.", "torch.Size"),  # a list, not a tuple
    (b"\x80\x02ctorch\nSize\nJ\xff\xff\xff\xff\x85\x85R.", "torch.Size"),
    (b"\x80\x02ctorch\nSize\nK\x01\x85K\x02\x86R.", "torch.Size"),
])
def test_other_arguments_are_refused(raw, match):
    with pytest.raises(PickleFormatError, match=match):
        loads_pickle(raw, "bad")
