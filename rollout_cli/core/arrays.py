"""Arrow arrays read from their buffers: null masks and list lengths. pyarrow.compute would
give both, but importing it costs a pool worker 50 ms at the start of every task, and the
stages need nothing else from it."""
from __future__ import annotations

import numpy as np
import pyarrow as pa


def null_mask(a: pa.Array) -> np.ndarray:
    """Per item: null, from the validity bitmap."""
    n = len(a)
    if not a.null_count:
        return np.zeros(n, bool)
    bitmap = a.buffers()[0]
    if bitmap is None:  # the null type (or a union): every item null
        return np.ones(n, bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little", count=a.offset + n)
    return bits[a.offset:] == 0


def list_lengths(a: pa.Array, null: int = 0) -> np.ndarray:
    """Each list's length (int64) from a list or large-list array's offsets; `null` for a null list."""
    n = len(a)
    buf = a.buffers()[1]
    if buf is None:
        lens = np.zeros(n, dtype=np.int64)
    else:
        dtype = np.int64 if pa.types.is_large_list(a.type) else np.int32
        lens = np.diff(np.frombuffer(buf, dtype=dtype, count=a.offset + n + 1)[a.offset:]).astype(np.int64)
    if a.null_count:
        lens[null_mask(a)] = null
    return lens
