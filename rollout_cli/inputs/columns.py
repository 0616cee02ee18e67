"""Records to the reader contract's columnar form: what the JSONL and `.pt` readers hand on.

Their parsers give one dict per sample, with the long numeric lists already numpy arrays
(jsonl/simd.py for JSON, the restricted unpickler or slime_pt/reader._as_arrays for `.pt`).
Each list field becomes one Arrow list array over the chunk (the arrays concatenated once,
offsets from their lengths), every other field a list of the records' values. A record whose
list field is anything else (a Python list the JSON fallback parsed, a nested array, a string)
keeps its dict in `RawChunk.rows`, and validation checks it on its own, so its problem is
worded as before; its entries in the columns are null.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

# list field -> the numpy kinds its arrays may have (anything else: the record's own checks)
from ..core.arrays import lists_of
from ..core.sample_fields import LIST_KINDS
from .base import SAMPLE_FIELDS, KEPT_TEXT_FIELDS, RawChunk

_WANTED = SAMPLE_FIELDS | set(KEPT_TEXT_FIELDS)


def _fits(v, kinds: str) -> bool:
    # uint64 may not fit the int64 column: such a record is checked on its own
    return (isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind in kinds
            and not (v.dtype.kind == "u" and v.dtype.itemsize == 8))


def columnar(chunk: RawChunk) -> RawChunk:
    """The chunk in columnar form (a chunk already columnar is returned as it is)."""
    if chunk.records is None:
        return chunk
    records = chunk.records
    own: dict[int, dict] = {}
    names: dict[str, None] = {}
    for i, rec in enumerate(records):
        if rec is None:
            continue
        for k in rec:
            if k in _WANTED:
                names[k] = None
        for k, kinds in LIST_KINDS.items():
            v = rec.get(k)
            if v is not None and not _fits(v, kinds):
                own[i] = rec
                break
    columns: dict = {}
    for k in names:
        kinds = LIST_KINDS.get(k)
        values = [None if rec is None or i in own else rec.get(k) for i, rec in enumerate(records)]
        columns[k] = list_array(values)[0] if kinds else values
    return RawChunk(chunk.source, chunk.kind, chunk.numbers, None, dict(chunk.problems), columns, own)


def list_array(arrays: list, dtype=None) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """One Arrow list array of the rows' 1-D arrays (None: a null row), with its offsets and
    values. Values are cast to `dtype`, or by default widened to their common type
    (np.concatenate's promotion; integers as int64, bools as uint8)."""
    n = len(arrays)
    lens = np.fromiter((0 if a is None else len(a) for a in arrays), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    present = [a for a in arrays if a is not None]
    values = np.concatenate(present) if present else np.zeros(0, dtype=dtype or np.int64)
    if dtype is not None:
        values = values.astype(dtype, copy=False)
    elif values.dtype.kind == "b":
        values = values.view(np.uint8)
    elif values.dtype.kind in "iu" and values.dtype != np.int64:
        values = values.astype(np.int64)
    nulls = None if len(present) == n else np.fromiter((a is None for a in arrays), bool, n)
    if offsets[-1] < 2**31:
        offsets = offsets.astype(np.int32)
    return lists_of(offsets, pa.array(values), nulls), offsets, values


def spans(arr: np.ndarray, start: np.ndarray, length: np.ndarray, dtype, valid: np.ndarray | None = None) -> pa.Array:
    """One Arrow list array over the rows of a 2-D array: row i is
    ``arr[i, start[i]:start[i] + length[i]]`` cast to `dtype`, null where `valid` is False.
    One concatenate of the rows' views and one cast per column: the same array as list_array of
    the rows' slices, without a numpy call per row and field."""
    n = arr.shape[0]
    length = np.asarray(length, dtype=np.int64)
    if valid is not None:
        length = np.where(valid, length, 0)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(length, out=offsets[1:])
    starts = np.asarray(start, dtype=np.int64)
    if n and arr.ndim == 2 and (starts == starts[0]).all() and (length == arr.shape[1] - starts[0]).all():
        # every row's span runs to the end from one column (no padding): one strided cast
        values = np.ascontiguousarray(arr[:, int(starts[0]):], dtype=dtype).reshape(-1)
    else:
        # each row's span cast straight into its place: one pass over the bytes, not a
        # concatenate and then a cast (two)
        values = np.empty(int(offsets[-1]), dtype=dtype)
        for i, s, k, o in zip(range(n), starts.tolist(), length.tolist(), offsets[:-1].tolist()):
            if k:
                values[o:o + k] = arr[i, s:s + k]
    mask = None if valid is None or valid.all() else pa.array(~valid)
    if offsets[-1] < 2**31:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values), mask=mask)
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values), mask=mask)
