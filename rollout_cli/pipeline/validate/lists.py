"""The column form of the rules on the long numeric lists (tokens, loss mask, log-probs, top-p,
routed experts): read from the Arrow buffers of a whole chunk, checked against the row rules'
limits (rows.py), and cast, giving a per-row pass flag. A row that fails is worded by the row
rules; this module only decides pass or fail, and builds list arrays from buffers.

Arrays are read from their buffers by hand: pyarrow's to_numpy imports pandas and its
compute functions pyarrow.compute (see core.arrays), a cost a pool worker would pay per task.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ...core.arrays import bitmap, list_lengths, lists_of, null_mask, numpy_dtype
from .rows import EXPERTS, LOG_PROBS, TOKEN_RANGE, TOP_P

# the lists checked on their buffers; a chunk where one of them is not an Arrow list of
# numbers (JSON text that did not parse into one, say) is validated row by row instead
VECTOR_LISTS = ("tokens", "loss_mask", *LOG_PROBS)
# checked on their buffers too, but a column that is not an Arrow list of integers sends only
# the rows that hold a value to the row checks
ROW_LISTS = TOP_P + (EXPERTS,)


@dataclass
class Lists:
    """One list column: 0-based int64 offsets, values as numpy (nulls filled), per-row flags."""

    offsets: np.ndarray
    values: np.ndarray
    present: np.ndarray  # the row's list is not null
    clean: np.ndarray  # no null item in the row's list

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def numpy_of(a: pa.Array) -> np.ndarray:
    """A numeric or bool array without nulls as numpy, a view where the layout allows. Read
    from the buffers by hand: pyarrow's to_numpy imports pandas (most of a second)."""
    n, off = len(a), a.offset
    buf = a.buffers()[1]
    if pa.types.is_boolean(a.type):
        if buf is None:
            return np.zeros(n, dtype=bool)
        return bitmap(buf, off, n)
    dtype = numpy_dtype(a.type)
    if buf is None:
        return np.zeros(n, dtype=dtype)
    return np.frombuffer(buf, dtype=dtype, count=off + n)[off:]



def filled(a: pa.Array) -> np.ndarray:
    """A numeric or bool array as numpy, its nulls as 0 (False); read from the buffers, as
    everything here (see core.arrays)."""
    out = numpy_of(a)
    if a.null_count:
        out = out.copy()
        out[null_mask(a)] = 0
    return out


def _rows_of(offsets: np.ndarray, positions: np.ndarray) -> np.ndarray:
    return np.searchsorted(offsets, positions, side="right") - 1


def read_lists(arr: pa.Array, n: int) -> Lists | None:
    if pa.types.is_null(arr.type):
        return Lists(np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(n, bool), np.ones(n, bool))
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        return None
    vt = arr.type.value_type
    if pa.types.is_null(vt):  # a writer's type for lists that are all empty (or all null items)
        big = pa.types.is_large_list(arr.type)
        arr, vt = arr.cast((pa.large_list if big else pa.list_)(pa.int64())), pa.int64()
    if not (pa.types.is_integer(vt) or pa.types.is_floating(vt) or pa.types.is_boolean(vt)):
        return None
    offsets = numpy_of(arr.offsets).astype(np.int64, copy=False)
    present = ~null_mask(arr)
    if arr.null_count and (np.diff(offsets)[~present] != 0).any():
        return None  # a null list spanning values (legal, but no writer does it): row by row
    values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    offsets = offsets - offsets[0]
    clean = np.ones(n, bool)
    if values.null_count:
        clean[_rows_of(offsets, np.flatnonzero(null_mask(values)))] = False
    return Lists(offsets, filled(values), present, clean)  # bool stays bool: no integer list


def _bad_rows(lst: Lists, bad_values: np.ndarray) -> np.ndarray:
    """Per row: holds a value where `bad_values` is set."""
    out = np.zeros(len(lst.present), bool)
    hits = np.flatnonzero(bad_values)
    if len(hits):
        out[_rows_of(lst.offsets, hits)] = True
    return out


def int_ok(lst: Lists, lo: int, hi: int) -> np.ndarray:
    """Per row: a list of integers in [lo, hi] without a null item (bool masks were cast)."""
    if lst.values.dtype.kind not in "iu":
        return ~lst.present & lst.clean  # no vectorised answer for floats: the row checks word it
    ok = lst.clean.copy()
    if len(lst.values) and not in_range(lst.values, lo, hi):
        ok &= ~_bad_rows(lst, (lst.values < lo) | (lst.values > hi))
    return ok


def in_range(values: np.ndarray, lo: int, hi: int) -> bool:
    """Every integer of `values` in [lo, hi]. From 0, one pass: the largest value read as
    unsigned (a negative one reads as huge), rather than a pass for the minimum and one for the
    maximum over values that have just been decoded, not yet in the cache."""
    kind, size = values.dtype.kind, values.dtype.itemsize
    if lo == 0 and kind == "u":
        return int(values.max()) <= hi
    if lo == 0 and kind == "i":
        if hi >= 2 ** (8 * size - 1) - 1:  # no value of the type is above hi
            return int(values.min()) >= 0
        return int(values.view(np.dtype(f"u{size}")).max()) <= hi  # a negative one is above 2**(bits-1)
    return int(values.min()) >= lo and int(values.max()) <= hi


def float32(lst: Lists) -> tuple[np.ndarray, np.ndarray]:
    """(per row: all values finite as float32, the values as float32), as the row rule (rows._float_array) casts."""
    vals = lst.values
    if vals.dtype.kind in "iub":
        vals = vals.astype(np.float64)
    with np.errstate(over="ignore"):
        f32 = vals.astype(np.float32)
    ok = lst.clean.copy()
    finite = np.isfinite(f32)
    if not finite.all():
        ok &= ~_bad_rows(lst, ~finite)
    return ok, f32


def gather(offsets: np.ndarray, values: np.ndarray, rows: np.ndarray | None):
    """The lists of `rows` (None: all), as (new 0-based offsets, values)."""
    if rows is None:
        return offsets, values
    lens = np.diff(offsets)[rows]
    out = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lens, out=out[1:])
    # one slice per run of consecutive rows (the rows left out are few), not an index per
    # value: routed experts hold tens of thousands of values a row
    if not len(rows):
        return out, values[:0]
    cut = np.flatnonzero(np.diff(rows) != 1) + 1
    firsts, lasts = rows[np.r_[0, cut]], rows[np.r_[cut - 1, len(rows) - 1]]
    parts = [values[offsets[a]:offsets[b + 1]] for a, b in zip(firsts.tolist(), lasts.tolist())]
    return out, np.concatenate(parts) if parts else values[:0]


def _held(col, n: int) -> np.ndarray:
    """Per row: the column holds a value (not null)."""
    if col is None:
        return np.zeros(n, bool)
    if isinstance(col, list):
        return np.fromiter((x is not None for x in col), bool, n)
    return ~null_mask(col)


def top_p_ok(cols: dict, n: int, rls: np.ndarray) -> tuple[np.ndarray, dict[str, Lists]]:
    """(per row: passes the row rule (rows._top_p), the two lists when both columns are Arrow lists)."""
    held = [_held(cols.get(k), n) for k in TOP_P]
    if not (held[0].any() or held[1].any()):
        return np.ones(n, bool), {}
    got = [cols.get(k) for k in TOP_P]
    ids, off = (None if isinstance(c, list) else read_lists(pa.nulls(n) if c is None else c, n) for c in got)
    if ids is None or off is None or ids.values.dtype.kind not in "iu" or off.values.dtype.kind not in "iu":
        return ~(held[0] | held[1]), {}
    both = ids.present & off.present
    ok = int_ok(ids, *TOKEN_RANGE) & int_ok(off, *TOKEN_RANGE) & (off.lengths == rls + 1)
    vals = off.values.astype(np.int64, copy=False)  # out-of-range rows already fail: no wrap matters
    starts, ends = off.offsets[:-1], off.offsets[1:]
    filled = ends > starts
    first, last = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    first[filled], last[filled] = vals[starts[filled]], vals[ends[filled] - 1]
    ok &= filled & (first == 0) & (last == ids.lengths)
    if len(vals) > 1:
        down = np.zeros(len(vals), bool)
        down[1:] = vals[1:] < vals[:-1]
        down[starts[filled]] = False  # a row's first offset follows the previous row's last
        ok &= ~_bad_rows(off, down)
    return (ids.present == off.present) & (~both | ok), dict(zip(TOP_P, (ids, off)))


def _nested_ints(t: pa.DataType) -> bool:
    """list<list<list<integer>>> at any list width (a null leaf: only empty inner lists)."""
    for _ in range(3):
        if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
            return False
        t = t.value_type
    return pa.types.is_integer(t) or pa.types.is_null(t)


def _flat(a: pa.Array) -> pa.Array:
    """The values of a list array's non-null lists, in order, as ListArray.flatten gives
    them, sliced from its values (flatten imports pyarrow.compute, see core.arrays)."""
    offsets = numpy_of(a.offsets).astype(np.int64)
    if a.null_count and (np.diff(offsets)[null_mask(a)] != 0).any():
        return a.flatten()  # a null list spanning values: legal, but no writer does it
    return a.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))


def _starts(lens: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(np.maximum(lens, 0), out=out[1:])
    return out


def _spread(lens: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the min and max of `lens` over the row's span of `offsets` (-1, -2 when empty)."""
    n = len(offsets) - 1
    mn, mx = np.full(n, -1, np.int64), np.full(n, -2, np.int64)
    filled = offsets[1:] > offsets[:-1]
    if filled.any():
        mn[filled] = np.minimum.reduceat(lens, offsets[:-1][filled])
        mx[filled] = np.maximum.reduceat(lens, offsets[:-1][filled])
    return mn, mx


def experts_ok(col, n: int, ntok: np.ndarray) -> tuple[np.ndarray, Lists | None, np.ndarray | None]:
    """(per row: passes the row rule (rows._routed_experts), each row's ids flattened, each row's
    [len(tokens)-1, layers, topk]). A row is such an array when every list at each level has
    the same length (rectangular) and holds no null, with at least one layer: numpy gives the
    row path another shape for `[]` and `[[], ...]`, which it rejects."""
    held = _held(col, n)
    if not held.any():
        return np.ones(n, bool), None, None
    if isinstance(col, list) or not _nested_ints(col.type):
        return ~held, None, None
    steps = len0 = list_lengths(col, null=-1)
    mid = _flat(col)  # flatten leaves out what null lists span
    len1 = list_lengths(mid, null=-1)
    inner = _flat(mid)
    len2 = list_lengths(inner, null=-1)
    leaf = _flat(inner)
    if pa.types.is_null(leaf.type):
        leaf = leaf.cast(pa.int64())
    o0 = _starts(len0)
    o1 = _starts(len1)[o0]  # per row: where its inner lists start
    o2 = _starts(len2)[o1]  # per row: its values
    lmin, lmax = _spread(len1, o0)
    kmin, kmax = _spread(len2, o1)
    ok = ~held | ((steps >= 1) & (steps == ntok - 1) & (lmin == lmax) & (lmin >= 1) & (kmin == kmax) & (kmin >= 0))
    clean = np.ones(n, bool)
    if leaf.null_count:
        clean[_rows_of(o2, np.flatnonzero(null_mask(leaf)))] = False
    values = Lists(o2, filled(leaf), held, clean)
    ok &= int_ok(values, *TOKEN_RANGE)
    return ok, values, np.stack([steps, lmin, kmin], axis=1)


def list_array(offsets: np.ndarray, values: np.ndarray, typ, nulls: np.ndarray | None = None) -> pa.Array:
    return lists_of(offsets.astype(np.int32), pa.array(values, typ), nulls)


def null_lists(m: int, typ) -> pa.Array:
    return list_array(np.zeros(m + 1, dtype=np.int64), np.zeros(0, dtype=np.float32 if typ == pa.float32() else np.int32), typ, np.ones(m, bool))
