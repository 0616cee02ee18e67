"""multimodal_train_inputs kept typed (core/tensors.py): every dtype and shape bit-exact through
the Arrow column, Parquet and the IPC copy; non-tensor values as JSON; None rows."""
from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_cli.core import tensors

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8,
          torch.bool]


def _tensor(draw, dtype) -> torch.Tensor:
    shape = draw(st.lists(st.integers(0, 5), min_size=0, max_size=3))
    n = int(np.prod(shape, dtype=np.int64))
    raw = draw(st.binary(min_size=n * torch.empty(0, dtype=dtype).element_size(),
                         max_size=n * torch.empty(0, dtype=dtype).element_size()))
    t = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype) if n else torch.empty(0, dtype=dtype)
    if dtype == torch.bool:
        t = t.view(torch.uint8).remainder(2).to(torch.bool)
    return t.reshape(shape)


@st.composite
def samples(draw):
    out = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            out.append(None)
            continue
        keys = draw(st.lists(st.sampled_from(["pixel_values", "image_grid_thw", "pixel_values_videos",
                                              "video_grid_thw", "second_per_grid_ts"]), unique=True, max_size=4))
        d = {}
        for k in keys:
            d[k] = [0.5, 1.0] if k == "second_per_grid_ts" else _tensor(draw, draw(st.sampled_from(DTYPES)))
        out.append(d)
    return out


def _same(a, b) -> None:
    assert (a is None) == (b is None)
    if a is None:
        return
    assert list(a) == list(b)
    for k, v in a.items():
        if isinstance(v, torch.Tensor):
            w = b[k]
            assert w.dtype == v.dtype and w.shape == v.shape
            assert _bytes(w) == _bytes(v)
        else:
            assert b[k] == v


def _bytes(t: torch.Tensor) -> bytes:
    return bytes(t.reshape(-1).clone().view(torch.uint8).numpy()) if t.numel() else b""


def _through_files(col: pa.Array) -> list[pa.ChunkedArray]:
    t = pa.table({"m": col})
    pbuf, ibuf = io.BytesIO(), pa.BufferOutputStream()
    pq.write_table(t, pbuf)
    with pa.ipc.new_file(ibuf, t.schema) as w:
        w.write_table(t)
    return [pq.read_table(io.BytesIO(pbuf.getvalue())).column("m"),
            pa.ipc.open_file(ibuf.getvalue()).read_all().column("m")]


@settings(max_examples=60, deadline=None)
@given(samples())
def test_every_dtype_and_shape_round_trips_bit_exactly_through_parquet_and_ipc(rows):
    col = tensors.entries_array([tensors.encode(r) for r in rows])
    assert col.type == tensors.MM_TYPE
    for back in _through_files(col):
        got = [tensors.as_torch(d, torch) for d in tensors.decode_column(back)]
        for a, b in zip(rows, got):
            _same(a, b)


def test_widened_bfloat16_from_the_restricted_reader_is_stored_as_bfloat16():
    t = torch.randn(4, 6).to(torch.bfloat16)
    widened = t.to(torch.float32).numpy().view(tensors.WidenedBFloat16)
    enc = tensors.encode({"pixel_values": widened})
    assert enc[0]["dtype"] == "bfloat16" and enc[0]["shape"] == [4, 6]
    back = tensors.as_torch(tensors.decode_column(tensors.entries_array([enc]))[0], torch)
    assert back["pixel_values"].dtype == torch.bfloat16 and torch.equal(back["pixel_values"], t)


def test_bytes_that_disagree_with_dtype_and_shape_are_refused():
    enc = tensors.encode({"x": np.arange(6, dtype=np.int64)})
    enc[0]["shape"] = [7]
    with pytest.raises(ValueError, match="48 bytes for shape \\[7\\] of int64"):
        tensors.decode_column(tensors.entries_array([enc]))


def test_values_that_are_neither_tensors_nor_json_are_refused():
    with pytest.raises(ValueError, match="expected a dict"):
        tensors.encode([1, 2])
    with pytest.raises(ValueError, match="obj: expected a tensor or JSON"):
        tensors.encode({"obj": object()})


def test_concat_is_slimes_get_batch_join():
    a = {"pixel_values": torch.ones(2, 3, dtype=torch.bfloat16), "image_grid_thw": torch.tensor([[1, 2, 2]])}
    b = {"pixel_values": torch.full((1, 3), 0.5, dtype=torch.float32), "second_per_grid_ts": [1.0]}
    out = tensors.concat([a, None, b], lambda ts: torch.cat(ts, dim=0))
    assert list(out) == ["pixel_values", "image_grid_thw"]
    assert out["pixel_values"].dtype == torch.float32 and out["pixel_values"].shape == (3, 3)
    assert torch.equal(out["pixel_values"], torch.cat([a["pixel_values"], b["pixel_values"]]))
    assert tensors.concat([None, None], torch.cat) == {}


@settings(max_examples=40, deadline=None)
@given(samples())
def test_column_from_the_tensors_buffers_is_the_column_of_their_bytes(rows):
    """entries_array copies each tensor once into one buffer: the column equals the one pyarrow
    builds from each tensor's bytes, and writes the same IPC bytes."""
    enc = [tensors.encode(r) for r in rows]
    col = tensors.entries_array(enc)
    as_bytes = [None if e is None else [dict(x, data=None if x["data"] is None else x["data"].tobytes()) for x in e]
                for e in enc]
    ref = pa.array(as_bytes, tensors.MM_TYPE)
    col.validate(full=True)
    assert col.equals(ref) and col.null_count == ref.null_count

    def ipc(a):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, pa.schema([("m", a.type)])) as w:
            w.write_table(pa.table({"m": a}))
        return sink.getvalue().to_pybytes()

    assert ipc(col) == ipc(ref)


def test_tensors_read_back_to_back_make_the_column_without_a_copy(tmp_path):
    """A .pt dump's tensors lie back to back in the reader's one buffer (inputs/pickled/archive.py):
    the column views it, and holds the same values as a copy would."""
    from rollout_cli.inputs.pickled import load_torch

    samples = [{"multimodal_train_inputs": {"pixel_values": torch.randn(4 + i, 6).to(torch.bfloat16),
                                            "image_grid_thw": torch.tensor([[1, 2, 2 + i]])}} for i in range(3)]
    samples.insert(1, {"multimodal_train_inputs": None})
    torch.save({"samples": samples}, str(tmp_path / "1.pt"))
    got = load_torch(tmp_path / "1.pt", as_stored=True)["samples"]
    enc = [tensors.encode(s["multimodal_train_inputs"]) for s in got]
    col = tensors.entries_array(enc)
    first = enc[0][0]["data"]
    assert col.values.field("data").buffers()[2].address == first.__array_interface__["data"][0]
    as_bytes = [None if e is None else [dict(x, data=None if x["data"] is None else x["data"].tobytes()) for x in e]
                for e in enc]
    assert col.equals(pa.array(as_bytes, tensors.MM_TYPE))
    back = [tensors.as_torch(d, torch) for d in tensors.decode_column(col)]
    for s, b in zip(samples, back):
        want = s["multimodal_train_inputs"]
        assert (b is None) == (want is None)
        for k, v in (want or {}).items():
            assert b[k].dtype == v.dtype and torch.equal(b[k], v)
