"""Arrow arrays as numpy: numeric dtypes, null masks and list lengths, read through Arrow's
public layout (the validity bitmap, `ListArray.offsets`) rather than pyarrow.compute, whose
import (26 ms) nothing else in a plain conversion needs: each worker of a 16-step whole run
then spends 35 (JSONL) to 66 (Parquet) CPU-ms less, 10 alternating runs."""
from __future__ import annotations

import numpy as np
import pyarrow as pa


def numpy_dtype(t: pa.DataType) -> np.dtype:
    """The numpy dtype of a fixed-width numeric Arrow type (integers, floats), for viewing its
    values buffer. `DataType.to_pandas_dtype` gives the same, but in pyarrow 25 and earlier it
    imports pandas, and fails where pandas is missing."""
    if pa.types.is_integer(t):
        return np.dtype(f"{'u' if pa.types.is_unsigned_integer(t) else 'i'}{t.bit_width // 8}")
    if pa.types.is_floating(t):
        return np.dtype(f"f{t.bit_width // 8}")
    raise TypeError(f"not a fixed-width numeric type: {t}")


def null_mask(a: pa.Array) -> np.ndarray:
    """Per item: null, from the validity bitmap."""
    if not a.null_count:
        return np.zeros(len(a), bool)
    if a.null_count == len(a):
        return np.ones(len(a), bool)
    validity = a.buffers()[0]
    if validity is None or pa.types.is_union(a.type):  # no bitmap of its own (union, run-end)
        return a.is_null().to_numpy(zero_copy_only=False)
    return ~bitmap(validity, a.offset, len(a))


def bitmap(buf: pa.Buffer, offset: int, n: int) -> np.ndarray:
    """Bits offset .. offset + n - 1 of an Arrow bitmap (validity, booleans) as bool; bit
    offset + i is item i, least significant bit first (Arrow's format)."""
    # unpackbits gives 0 and 1 bytes, which numpy's bool is: a view, not a copy
    return np.unpackbits(np.frombuffer(buf, np.uint8), count=offset + n, bitorder="little")[offset:].view(bool)


def lists_of(offsets: np.ndarray, child: pa.Array, nulls: np.ndarray | None = None, typ=None) -> pa.Array:
    """A list array over `child` from its offsets (int32; int64 makes a large list) and the null
    rows' mask, built from the buffers: ListArray.from_arrays with a mask would import
    pyarrow.compute. `typ`: the list type, when it names more than the child's (a field)."""
    validity, null_count = None, 0
    if nulls is not None and nulls.any():
        validity, null_count = pa.py_buffer(np.packbits(~nulls, bitorder="little")), int(nulls.sum())
    if typ is None:
        typ = pa.large_list(child.type) if offsets.dtype == np.int64 else pa.list_(child.type)
    return pa.Array.from_buffers(typ, len(offsets) - 1, [validity, pa.py_buffer(offsets)], null_count,
                                 children=[child])


def list_lengths(a: pa.Array, null: int = 0) -> np.ndarray:
    """Each list's length (int64) from a list or large-list array's offsets; `null` for a null list."""
    lengths = np.diff(a.offsets.to_numpy()).astype(np.int64)
    if a.null_count:
        lengths[null_mask(a)] = null  # a null list's offsets may span values
    return lengths
