"""core/arrays.py: null masks and list lengths of Arrow arrays as numpy, numpy dtypes of Arrow types."""
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


def test_all_null_and_empty_arrays():
    assert null_mask(pa.nulls(3)).tolist() == [True] * 3
    assert list_lengths(pa.nulls(3, pa.list_(pa.int32())), null=-1).tolist() == [-1] * 3
    assert list_lengths(pa.array([], pa.list_(pa.int32()))).tolist() == []
    assert not null_mask(pa.array([1, 2])).any()


def test_numpy_dtype_of_every_numeric_type_without_pandas():
    from rollout_cli.core.arrays import numpy_dtype

    types = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(),
             pa.float16(), pa.float32(), pa.float64()]
    for t in types:
        assert numpy_dtype(t) == np.dtype(t.to_pandas_dtype()), t
        assert np.frombuffer(pa.array([1, 2], t).buffers()[1], numpy_dtype(t)).tolist() == [1, 2]
    with pytest.raises(TypeError):
        numpy_dtype(pa.string())


_VALUES = {
    "int64": (st.integers(-5, 5), pa.int64()),
    "string": (st.text(max_size=3), pa.string()),
    "list": (st.lists(st.integers(0, 9), max_size=4), pa.list_(pa.int32())),
    "large_list": (st.lists(st.floats(-1, 1), max_size=4), pa.large_list(pa.float32())),
    "struct": (st.fixed_dictionaries({"a": st.integers(0, 3)}), pa.struct([("a", pa.int64())])),
    "dictionary": (st.sampled_from(["x", "y"]), None),
}


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.sampled_from(sorted(_VALUES)), st.data())
def test_masks_and_lengths_match_arrow_compute_on_any_slice(kind, data):
    """Read from the bitmap and the offsets, they are what pyarrow.compute gives, whatever the
    array's slice offset (bits within a byte) and nulls."""
    values, typ = _VALUES[kind]
    items = data.draw(st.lists(st.one_of(st.none(), values), max_size=40))
    arr = pa.array(items, typ) if typ is not None else pa.array(items).dictionary_encode()
    start = data.draw(st.integers(0, len(items)))
    arr = arr.slice(start, data.draw(st.integers(0, len(items) - start)))
    assert null_mask(arr).tolist() == arr.is_null().to_pylist()
    if kind in ("list", "large_list"):
        want = pc.fill_null(pc.list_value_length(arr), -1).to_pylist()
        assert list_lengths(arr, null=-1).tolist() == want
