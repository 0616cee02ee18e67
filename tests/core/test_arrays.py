"""Null masks and list lengths read from Arrow buffers, against pyarrow.compute."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_cli.core import arrays
from rollout_cli.core.arrays import list_lengths, null_mask


@pytest.mark.parametrize("typ", [pa.list_(pa.int32()), pa.large_list(pa.float32())])
def test_sliced_lists_with_nulls(typ):
    arr = pa.array([[1], None, [], [2, 3, 4], None, [5, 6]], typ).slice(1, 4)
    assert null_mask(arr).tolist() == arr.is_null().to_pylist()
    assert list_lengths(arr).tolist() == pc.fill_null(pc.list_value_length(arr), 0).to_pylist()
    assert list_lengths(arr, null=-1).tolist() == [-1, 0, 3, -1]


@pytest.mark.parametrize("by_hand", ["1", "0"])
@pytest.mark.parametrize("typ", [pa.list_(pa.int32()), pa.large_list(pa.float32())])
def test_the_switch_gives_the_same_masks_and_lengths(monkeypatch, typ, by_hand):
    """ROLLOUT_CLI_ARROW_BY_HAND=0 asks pyarrow.compute: the same results as the buffers."""
    monkeypatch.setenv("ROLLOUT_CLI_ARROW_BY_HAND", by_hand)
    arr = pa.array([[1], None, [], [2, 3, 4], None, [5, 6]], typ).slice(1, 4)
    mask, lens = null_mask(arr), list_lengths(arr, null=-1)
    assert mask.dtype == bool and mask.tolist() == [True, False, False, True]
    assert lens.dtype == np.int64 and lens.tolist() == [-1, 0, 3, -1]
    assert list_lengths(pa.array([], pa.list_(pa.int32()))).tolist() == []


def test_all_null_and_empty_arrays():
    assert null_mask(pa.nulls(3)).tolist() == [True] * 3
    assert list_lengths(pa.nulls(3, pa.list_(pa.int32())), null=-1).tolist() == [-1] * 3
    assert list_lengths(pa.array([], pa.list_(pa.int32()))).tolist() == []
    assert not null_mask(pa.array([1, 2])).any()


# --- concat_adjacent ------------------------------------------------------------------------

def _lists_over(buf: np.ndarray, lengths: list[int], typ) -> list[pa.Array]:
    """List arrays whose values are consecutive views of `buf`, `lengths` lists each."""
    out, at = [], 0
    rng = np.random.default_rng(len(lengths))
    for n in lengths:
        sizes = rng.integers(0, 4, n)
        total = int(sizes.sum())
        off = np.zeros(n + 1, np.int32)
        np.cumsum(sizes, out=off[1:])
        values = pa.array(buf[at:at + total], typ.value_type)
        out.append(pa.Array.from_buffers(typ, n, [None, pa.py_buffer(off)], 0, children=[values]))
        at += total
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=2, max_size=6), st.sampled_from(["int32", "uint8", "float32"]))
def test_adjacent_lists_combine_without_a_copy(lengths, kind):
    buf = np.arange(200).astype(kind)
    typ = pa.list_(pa.from_numpy_dtype(np.dtype(kind)))
    chunks = _lists_over(buf, lengths, typ)
    got = arrays.concat_adjacent(chunks)
    if sum(len(c.values) for c in chunks) == 0:
        assert got is None  # nothing to save
        return
    assert got is not None and got.equals(pa.concat_arrays(chunks))
    got.validate(full=True)
    assert got.values.buffers()[1].address == buf.ctypes.data  # the values were not copied


def test_lists_apart_or_with_nulls_are_not_combined_in_place():
    buf = np.arange(100, dtype=np.int32)
    typ = pa.list_(pa.int32())
    a, b = _lists_over(buf, [3, 3], typ)
    other = _lists_over(np.arange(100, dtype=np.int32), [3, 3], typ)[1]
    assert arrays.concat_adjacent([a, b]) is not None
    assert arrays.concat_adjacent([a, other]) is None  # values elsewhere in memory
    assert arrays.concat_adjacent([b, a]) is None  # out of order
    assert arrays.concat_adjacent([a]) is None
    with_null = pa.Array.from_buffers(typ, 3, [pa.py_buffer(np.packbits([1, 0, 1], bitorder="little")),
                                             b.buffers()[1]], 1, children=[b.values])
    assert arrays.concat_adjacent([a, with_null]) is None
    assert arrays.concat_adjacent([a, b.slice(1)]) is None  # a sliced list array
    assert arrays.concat_adjacent([pa.array([[1]], pa.list_(pa.int64())), pa.array([[2]], pa.list_(pa.int32()))]) is None


def test_numpy_dtype_of_every_numeric_type_without_pandas():
    from rollout_cli.core.arrays import numpy_dtype

    types = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(),
             pa.float16(), pa.float32(), pa.float64()]
    for t in types:
        assert numpy_dtype(t) == np.dtype(t.to_pandas_dtype()), t
        assert np.frombuffer(pa.array([1, 2], t).buffers()[1], numpy_dtype(t)).tolist() == [1, 2]
    with pytest.raises(TypeError):
        numpy_dtype(pa.string())
