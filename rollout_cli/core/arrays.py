"""Arrow arrays read from their buffers: null masks and list lengths (pyarrow.compute would
give both, but importing it cost a pool worker 50 ms at the start of every task when a worker
lived one task, and the stages need nothing else from it), and list arrays combined without
copying values that already lie end to end. Reading the buffers by hand is a fast path, off
with `ROLLOUT_CLI_ARROW_BY_HAND=0` (core/tuning.py): null_mask and list_lengths then ask
pyarrow.compute, with the same results."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from .tuning import arrow_by_hand


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
    n = len(a)
    if not a.null_count:
        return np.zeros(n, bool)
    if not arrow_by_hand():
        return a.is_null().to_numpy(zero_copy_only=False)
    bitmap = a.buffers()[0]
    if bitmap is None:  # the null type (or a union): every item null
        return np.ones(n, bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little", count=a.offset + n)
    return bits[a.offset:] == 0


def list_lengths(a: pa.Array, null: int = 0) -> np.ndarray:
    """Each list's length (int64) from a list or large-list array's offsets; `null` for a null list."""
    n = len(a)
    if not arrow_by_hand():
        import pyarrow.compute as pc

        return pc.list_value_length(a).fill_null(null).to_numpy(zero_copy_only=False).astype(np.int64)
    buf = a.buffers()[1]
    if buf is None:
        lens = np.zeros(n, dtype=np.int64)
    else:
        dtype = np.int64 if pa.types.is_large_list(a.type) else np.int32
        lens = np.diff(np.frombuffer(buf, dtype=dtype, count=a.offset + n + 1)[a.offset:]).astype(np.int64)
    if a.null_count:
        lens[null_mask(a)] = null
    return lens


def concat_adjacent(chunks: list[pa.Array]) -> pa.Array | None:
    """List arrays without nulls as one array, their values not copied, when each one's values
    start where the one before's end in memory (a step's values gathered in one buffer:
    pipeline/arena.py); None when they do not, or another layout makes it unsafe."""
    if len(chunks) < 2:
        return None
    t = chunks[0].type
    if not pa.types.is_list(t) or not pa.types.is_primitive(t.value_type) or pa.types.is_boolean(t.value_type):
        return None
    width = t.value_type.bit_width // 8
    offsets, addr, total = [], None, 0
    for c in chunks:
        if c.type != t or c.null_count or c.offset:
            return None
        child = c.values
        offs = np.frombuffer(c.buffers()[1], dtype=np.int32, count=len(c) + 1)
        if child.null_count or child.offset or offs[0] != 0 or offs[-1] != len(child):
            return None
        buf = child.buffers()[1]
        if len(child) and buf is None:
            return None
        if len(child):
            if addr is None:
                addr = buf.address
            elif buf.address != addr + total * width:
                return None
        offsets.append(offs[1:].astype(np.int64) + total)
        total += len(child)
    if total >= 2**31:
        return None
    if addr is None:  # no values at all: nothing to save
        return None
    off = np.concatenate([np.zeros(1, np.int64)] + offsets).astype(np.int32)
    values = pa.Array.from_buffers(t.value_type, total, [None, pa.foreign_buffer(addr, total * width, base=chunks)])
    return pa.Array.from_buffers(t, len(off) - 1, [None, pa.py_buffer(off)], 0, children=[values])
