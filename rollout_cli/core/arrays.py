"""Arrow arrays as numpy: numeric dtypes, null masks and list lengths. The masks and lengths
come from pyarrow.compute (reading them from the buffers by hand saved its import when a worker
lived one task; with workers that live as long as the pool it bought 2.7-2.9% of the CPU of the
16-step whole run, under the 5% a fast path must buy: bench/machinery.py)."""
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
    if validity is None or pa.types.is_null(a.type) or pa.types.is_union(a.type) or pa.types.is_dictionary(a.type):
        return a.is_null().to_numpy(zero_copy_only=False)
    # the validity bitmap (Arrow's format: bit i of the array's offset + i, least significant first)
    bits = np.unpackbits(np.frombuffer(validity, np.uint8), count=a.offset + len(a), bitorder="little")
    return bits[a.offset:] == 0


def list_lengths(a: pa.Array, null: int = 0) -> np.ndarray:
    """Each list's length (int64) from a list or large-list array's offsets; `null` for a null list."""
    if not a.null_count:
        return np.diff(a.offsets.to_numpy()).astype(np.int64, copy=False)
    if a.null_count == len(a):
        return np.full(len(a), null, np.int64)
    import pyarrow.compute as pc

    return pc.list_value_length(a).fill_null(null).to_numpy(zero_copy_only=False).astype(np.int64)
