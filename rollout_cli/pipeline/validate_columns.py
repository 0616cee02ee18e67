"""Stage 2 on columnar chunks (Parquet): the same rules as validate.py, checked per column.

The per-row fields (ids, status, reward, metadata, JSON fields) go through validate.py's own
check functions, one row at a time (they are small); the long numeric lists (tokens, loss
mask, log-probs) are checked and cast on their Arrow buffers for the whole chunk at once. A
row that fails any check, and a row with top-p or routed-expert data, is validated again on
its own by validate._validate, so its problem has the same wording and location as from any
other input; rows that pass are built without a Python object per list.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.errors import Problem
from ..core.schema import INT32_MAX
from ..inputs.base import RawChunk
from . import validate as v

# the lists checked on their buffers; a chunk where one of them is not an Arrow list of
# numbers (JSON text that did not parse into one, say) is validated row by row instead
_VECTOR_LISTS = ("tokens", "loss_mask", "rollout_log_probs", "teacher_log_probs")
# rows holding these go through the row checks (few dumps carry them)
_ROW_LISTS = ("rollout_top_p_token_ids", "rollout_top_p_token_offsets", "rollout_routed_experts")


@dataclass
class _Lists:
    """One list column: 0-based int64 offsets, values as numpy (nulls filled), per-row flags."""

    offsets: np.ndarray
    values: np.ndarray
    present: np.ndarray  # the row's list is not null
    clean: np.ndarray  # no null item in the row's list

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def _numpy(a: pa.Array) -> np.ndarray:
    """A numeric or bool array without nulls as numpy, a view where the layout allows. Read
    from the buffers by hand: pyarrow's to_numpy imports pandas (most of a second)."""
    n, off = len(a), a.offset
    buf = a.buffers()[1]
    if pa.types.is_boolean(a.type):
        if buf is None:
            return np.zeros(n, dtype=bool)
        bits = np.frombuffer(buf, dtype=np.uint8)
        return np.unpackbits(bits, bitorder="little", count=off + n)[off:].astype(bool)
    dtype = np.dtype(a.type.to_pandas_dtype()) if not pa.types.is_floating(a.type) else {16: np.float16, 32: np.float32, 64: np.float64}[a.type.bit_width]
    if buf is None:
        return np.zeros(n, dtype=dtype)
    return np.frombuffer(buf, dtype=dtype, count=off + n)[off:]


_bools = _numpy


def _rows_of(offsets: np.ndarray, positions: np.ndarray) -> np.ndarray:
    return np.searchsorted(offsets, positions, side="right") - 1


def _lists(arr: pa.Array, n: int) -> _Lists | None:
    if pa.types.is_null(arr.type):
        return _Lists(np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(n, bool), np.ones(n, bool))
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        return None
    vt = arr.type.value_type
    if not (pa.types.is_integer(vt) or pa.types.is_floating(vt) or pa.types.is_boolean(vt)):
        return None
    offsets = _numpy(arr.offsets).astype(np.int64, copy=False)
    present = ~_bools(arr.is_null()) if arr.null_count else np.ones(n, bool)
    if arr.null_count and (np.diff(offsets)[~present] != 0).any():
        return None  # a null list spanning values (legal, but no writer does it): row by row
    values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    offsets = offsets - offsets[0]
    clean = np.ones(n, bool)
    if values.null_count:
        nulls = np.flatnonzero(_bools(values.is_null()))
        clean[_rows_of(offsets, nulls)] = False
        values = pc.fill_null(values, pa.scalar(0, vt) if not pa.types.is_boolean(vt) else False)
    np_values = _numpy(values)  # bool stays bool: no integer list
    return _Lists(offsets, np_values, present, clean)


def _bad_rows(lst: _Lists, bad_values: np.ndarray) -> np.ndarray:
    """Per row: holds a value where `bad_values` is set."""
    out = np.zeros(len(lst.present), bool)
    hits = np.flatnonzero(bad_values)
    if len(hits):
        out[_rows_of(lst.offsets, hits)] = True
    return out


def _int_ok(lst: _Lists, lo: int, hi: int) -> np.ndarray:
    """Per row: a list of integers in [lo, hi] without a null item (bool masks were cast)."""
    if lst.values.dtype.kind not in "iu":
        return ~lst.present & lst.clean  # no vectorised answer for floats: the row checks word it
    ok = lst.clean.copy()
    if len(lst.values):
        mn, mx = int(lst.values.min()), int(lst.values.max())
        if mn < lo or mx > hi:
            ok &= ~_bad_rows(lst, (lst.values < lo) | (lst.values > hi))
    return ok


def _float32(lst: _Lists) -> tuple[np.ndarray, np.ndarray]:
    """(per row: all values finite as float32, the values as float32), as _float_array casts."""
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


def _gather(offsets: np.ndarray, values: np.ndarray, rows: np.ndarray | None):
    """The lists of `rows` (None: all), as (new 0-based offsets, values)."""
    if rows is None:
        return offsets, values
    lens = np.diff(offsets)[rows]
    out = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lens, out=out[1:])
    idx = np.repeat(offsets[:-1][rows] - out[:-1], lens) + np.arange(out[-1])
    return out, values[idx]


def _list_array(offsets: np.ndarray, values: np.ndarray, typ, nulls: np.ndarray | None = None) -> pa.Array:
    mask = pa.array(nulls) if nulls is not None and nulls.any() else None
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values, typ), mask=mask)


def _null_lists(m: int, typ) -> pa.Array:
    return _list_array(np.zeros(m + 1, dtype=np.int64), np.zeros(0, dtype=np.float32 if typ == pa.float32() else np.int32), typ, np.ones(m, bool))


def _row_record(chunk: RawChunk, i: int, py: dict) -> dict:
    rec = {k: vals[i] for k, vals in py.items()}
    for k, col in chunk.columns.items():
        if k not in rec:
            rec[k] = col[i] if isinstance(col, list) else col[i].as_py()
    return rec


def _by_rows(chunk: RawChunk, py: dict, base_pos: int, reward_key, keep_text, step) -> v.NormChunk:
    records = [None if i in chunk.problems else _row_record(chunk, i, py) for i in range(len(chunk))]
    rows = RawChunk(chunk.source, chunk.kind, chunk.numbers, records, chunk.problems)
    return v._normalize(rows, base_pos, reward_key, keep_text, step, lazy=False)


def normalize_columns(chunk: RawChunk, base_pos: int, *, reward_key: str | None, keep_text: bool,
                      step: int | None = None) -> v.NormChunk:
    """validate.normalize_chunk for a columnar chunk: the same rows, problems and batches."""
    n = len(chunk)
    cols = dict(chunk.columns)
    lm = cols.get("loss_mask")
    if isinstance(lm, pa.Array) and pa.types.is_list(lm.type) and pa.types.is_boolean(lm.type.value_type):
        cols["loss_mask"] = lm.cast(pa.list_(pa.uint8()))  # bool masks are 0/1
    chunk = RawChunk(chunk.source, chunk.kind, chunk.numbers, None, chunk.problems, cols)
    py = {k: (c if isinstance(c, list) else c.to_pylist()) for k, c in cols.items()
          if k not in _VECTOR_LISTS and k not in _ROW_LISTS}
    lists: dict[str, _Lists] = {}
    for k in _VECTOR_LISTS:
        if k in cols:
            lst = _lists(cols[k], n) if isinstance(cols[k], pa.Array) else None
            if lst is None:
                return _by_rows(chunk, py, base_pos, reward_key, keep_text, step)
            lists[k] = lst
    out = v.empty_norm(chunk)
    keys = list(py)
    # per-row fields, and which rows need the row checks
    fast = np.zeros(n, bool)
    slow = np.zeros(n, bool)
    scalars: list = [None] * n
    rls = np.zeros(n, dtype=np.int64)
    removed = np.zeros(n, bool)
    for i in range(n):
        rec = None if i in chunk.problems else {k: py[k][i] for k in keys}
        if not v._prelude(out, chunk, i, rec, step):
            continue
        try:
            ids = v._ids(rec)
            rl = v._response_length(rec)
            rm = v._remove_sample(rec)
            status = v._status(rec)
            rewards = v._rewards_and_metadata(rec, reward_key)
            js = v._json_fields(rec, keep_text)
        except v._Bad:
            slow[i] = True
            continue
        fast[i] = True
        rls[i], removed[i] = rl, rm
        scalars[i] = (ids, status, rewards, js)
    for k in _ROW_LISTS:
        c = cols.get(k)
        if c is not None:
            held = np.fromiter((x is not None for x in c), bool, n) if isinstance(c, list) else ~_bools(c.is_null())
            slow |= fast & held
            fast &= ~held
    # the long lists, for the whole chunk
    tok = lists.get("tokens")
    if tok is None:
        slow |= fast
        fast[:] = False
    else:
        ntok = tok.lengths
        ok = tok.present & (ntok >= 1) & _int_ok(tok, 0, INT32_MAX) & (rls >= 0) & (rls <= ntok)
        mask = lists.get("loss_mask")
        if mask is not None:
            ok &= ~mask.present | ((mask.lengths == rls) & _int_ok(mask, 0, 1))
        f32 = {}
        for k in ("rollout_log_probs", "teacher_log_probs"):
            lst = lists.get(k)
            if lst is not None:
                finite, f32[k] = _float32(lst)
                ok &= ~lst.present | ((lst.lengths == rls) & finite)
        slow |= fast & ~ok
        fast &= ok
    batches = []
    if fast.any():
        batches.append(_fast_batch(chunk, fast, base_pos, keep_text, scalars, rls, removed, lists, f32))
        out.valid = fast.tolist()
    if slow.any():
        rows, pos = [], []
        for i in np.flatnonzero(slow).tolist():
            rec = _row_record(chunk, i, py)
            try:
                row = v._validate(rec, reward_key, keep_text)
            except v._Bad as e:
                out.problems.append((i, Problem(chunk.location(i), e.field, e.message)))
                continue
            out.valid[i] = True
            rows.append(row)
            pos.append(base_pos + i)
        out.problems.sort(key=lambda t: t[0])
        batches.extend(v.build_batches(rows, pos, keep_text))
    if len(batches) > 1:  # rows in record order, as validate.normalize_chunk gives them
        t = pa.Table.from_batches(batches)
        t = t.take(pa.array(np.argsort(t.column("_pos").to_numpy(), kind="stable")))
        batches = t.combine_chunks().to_batches()
    out.batches = batches
    return out


def _fast_batch(chunk, fast, base_pos, keep_text, scalars, rls, removed, lists, f32) -> pa.RecordBatch:
    rows = np.flatnonzero(fast)
    every = len(rows) == len(fast)
    sel = None if every else rows
    m = len(rows)
    tok = lists["tokens"]
    t_off, t_val = _gather(tok.offsets, tok.values, sel)
    if t_val.dtype != np.int32:
        t_val = t_val.astype(np.int32)
    rl = rls[rows]
    # the loss mask: the row's own, all ones where null, all zeros for a removed sample
    m_off = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(rl, out=m_off[1:])
    mask = lists.get("loss_mask")
    own = (mask.present[rows] if mask is not None else np.zeros(m, bool)) & ~removed[rows]
    if own.all():
        m_val = _gather(mask.offsets, mask.values, sel)[1].astype(np.uint8, copy=False)
    else:
        m_val = np.repeat((~own & ~removed[rows]).astype(np.uint8), rl)
        if own.any():
            src = np.flatnonzero(own)
            _, vals = _gather(mask.offsets, mask.values, rows[src])
            dst_off = m_off[:-1][src]
            idx = np.repeat(dst_off - np.concatenate([[0], np.cumsum(rl[src])[:-1]]), rl[src]) + np.arange(len(vals))
            m_val[idx] = vals
    mask_total = v._row_sums(m_val, m_off)
    sc = [scalars[i] for i in rows.tolist()]
    cols = [
        pa.array(rows + base_pos, pa.int64()),
        pa.array([s[0][0] for s in sc], pa.int64()),
        pa.array([s[0][1] for s in sc], pa.int64()),
        _list_array(t_off, t_val, pa.int32()),
        pa.array(rl, pa.int32()),
        pa.array(np.diff(t_off), pa.int32()),
        _list_array(m_off, m_val, pa.uint8()),
        pa.array([s[2][0] for s in sc], pa.float64()),
        pa.array([s[2][1] for s in sc], pa.float64()),
        pa.array([s[1] == "truncated" for s in sc], pa.bool_()),
        pa.array([s[1] for s in sc], pa.string()),
        pa.array(mask_total, pa.int64()),
    ]
    for k in ("rollout_log_probs", "teacher_log_probs"):
        lst = lists.get(k)
        if lst is None or not lst.present[rows].any():
            cols.append(_null_lists(m, pa.float32()))
            continue
        present = lst.present[rows]
        offs, vals = _gather(lst.offsets, f32[k], sel)
        cols.append(_list_array(offs, vals, pa.float32(), ~present))
    for _ in range(4):  # top-p ids and offsets, routed experts and their shape: rows with them are slow
        cols.append(_null_lists(m, pa.int32()))
    cols += [
        pa.array([s[2][2] for s in sc], pa.int64()),
        pa.array([s[2][3] for s in sc], pa.string()),
        pa.array([s[3][0] for s in sc], pa.string()),
        pa.array([s[3][1] for s in sc], pa.string()),
    ]
    if keep_text:
        for k in range(3):
            cols.append(pa.array([s[3][2][k] for s in sc], pa.string()))
    return pa.RecordBatch.from_arrays(cols, schema=v.pre_schema(keep_text))
