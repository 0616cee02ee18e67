"""The column form's list readers and checks (pipeline/validate/lists.py): the buffers read by
hand agree with pyarrow.compute, and the one-pass range check with a minimum and maximum."""
from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.lists(st.one_of(st.none(), st.integers(-5, 5)), max_size=4)), max_size=12),
       st.integers(0, 3), st.integers(0, 3))
def test_buffer_readers_agree_with_pyarrow_compute(rows, lo, hi):
    """null_mask, list_lengths, filled and _flat read validity and offsets by hand; on
    sliced arrays with nulls at both levels they give what pyarrow.compute gives."""
    import numpy as np
    import pyarrow.compute as pc

    from rollout_cli.core.arrays import list_lengths, null_mask
    from rollout_cli.pipeline.validate import lists

    arr = pa.array(rows, pa.list_(pa.int16()))
    arr = arr.slice(min(lo, len(arr)), max(0, len(arr) - lo - hi))
    assert null_mask(arr).tolist() == arr.is_null().to_pylist()
    assert list_lengths(arr, null=-1).tolist() == pc.fill_null(pc.list_value_length(arr), -1).to_pylist()
    flat = arr.flatten()
    assert lists._flat(arr).to_pylist() == flat.to_pylist()
    assert lists.filled(flat).tolist() == pc.fill_null(flat, 0).to_pylist()
    assert null_mask(pa.nulls(len(flat))).all()
    nulls = np.array([r is None for r in rows], bool)
    offsets = np.concatenate([[0], np.cumsum([len(r or []) for r in rows])])
    values = np.array([x or 0 for r in rows for x in (r or [])], np.int64)
    built = lists.list_array(offsets, values, pa.int32(), nulls)
    built.validate(full=True)
    assert built.to_pylist() == [None if r is None else [x or 0 for x in r] for r in rows]


@given(st.sampled_from(["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"]), st.data(),
       st.sampled_from([(0, 1), (0, 2**31 - 1), (0, 0), (-5, 7), (3, 2**40)]))
@settings(max_examples=300, deadline=None)
def test_range_check_equals_a_minimum_and_maximum(dtype, data, bounds):
    import numpy as np

    from rollout_cli.pipeline.validate.lists import in_range

    info = np.iinfo(np.dtype(dtype))
    values = np.array(data.draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=1, max_size=40)),
                      dtype=dtype)
    lo, hi = bounds
    assert in_range(values, lo, hi) == (int(values.min()) >= lo and int(values.max()) <= hi)
    assert in_range(values[::2], lo, hi) == (int(values[::2].min()) >= lo and int(values[::2].max()) <= hi)
