"""Stage 2 on columnar chunks (every reader's): the rules of validate.py, checked per column.

The per-row fields (ids, status, reward, metadata, JSON fields) go through validate.py's own
check functions, one row at a time (they are small); the long numeric lists (tokens, loss
mask, log-probs, top-p, routed experts) are checked and cast on their Arrow buffers for the
whole chunk at once. A row that fails any check is validated again on its own by
validate._validate, so its problem has the same wording and location as from any other
input; rows that pass are built without a Python object per list.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..core.arrays import list_lengths, null_mask, numpy_dtype
from ..core.errors import Problem
from ..core.schema import INT32_MAX
from ..inputs.base import RawChunk
from . import validate as v

# the lists checked on their buffers; a chunk where one of them is not an Arrow list of
# numbers (JSON text that did not parse into one, say) is validated row by row instead
_VECTOR_LISTS = ("tokens", "loss_mask", "rollout_log_probs", "teacher_log_probs")
_TOP_P = ("rollout_top_p_token_ids", "rollout_top_p_token_offsets")
_EXPERTS = "rollout_routed_experts"
# checked on their buffers too, but a column that is not an Arrow list of integers sends only
# the rows that hold a value to the row checks
_ROW_LISTS = _TOP_P + (_EXPERTS,)


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
    dtype = numpy_dtype(a.type)
    if buf is None:
        return np.zeros(n, dtype=dtype)
    return np.frombuffer(buf, dtype=dtype, count=off + n)[off:]


_bools = _numpy


def _filled(a: pa.Array) -> np.ndarray:
    """A numeric or bool array as numpy, its nulls as 0 (False); read from the buffers, as
    everything here (see core.arrays)."""
    out = _numpy(a)
    if a.null_count:
        out = out.copy()
        out[null_mask(a)] = 0
    return out


def _rows_of(offsets: np.ndarray, positions: np.ndarray) -> np.ndarray:
    return np.searchsorted(offsets, positions, side="right") - 1


def _lists(arr: pa.Array, n: int) -> _Lists | None:
    if pa.types.is_null(arr.type):
        return _Lists(np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(n, bool), np.ones(n, bool))
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        return None
    vt = arr.type.value_type
    if pa.types.is_null(vt):  # a writer's type for lists that are all empty (or all null items)
        big = pa.types.is_large_list(arr.type)
        arr, vt = arr.cast((pa.large_list if big else pa.list_)(pa.int64())), pa.int64()
    if not (pa.types.is_integer(vt) or pa.types.is_floating(vt) or pa.types.is_boolean(vt)):
        return None
    offsets = _numpy(arr.offsets).astype(np.int64, copy=False)
    present = ~null_mask(arr)
    if arr.null_count and (np.diff(offsets)[~present] != 0).any():
        return None  # a null list spanning values (legal, but no writer does it): row by row
    values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    offsets = offsets - offsets[0]
    clean = np.ones(n, bool)
    if values.null_count:
        clean[_rows_of(offsets, np.flatnonzero(null_mask(values)))] = False
    return _Lists(offsets, _filled(values), present, clean)  # bool stays bool: no integer list


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
    if len(lst.values) and not _in_range(lst.values, lo, hi):
        ok &= ~_bad_rows(lst, (lst.values < lo) | (lst.values > hi))
    return ok


def _in_range(values: np.ndarray, lo: int, hi: int) -> bool:
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


def _float32(lst: _Lists, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(per row: all values finite as float32, the values as float32), as _float_array casts;
    into `out` when given (their place in the step: pipeline/arena.py)."""
    vals = lst.values
    if vals.dtype.kind in "iub":
        vals = vals.astype(np.float64)
    with np.errstate(over="ignore"):
        if out is None:
            f32 = vals.astype(np.float32)
        else:
            np.copyto(out, vals, casting="unsafe")
            f32 = out
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


def _top_p(cols: dict, n: int, rls: np.ndarray) -> tuple[np.ndarray, dict[str, _Lists]]:
    """(per row: passes validate._top_p, the two lists when both columns are Arrow lists)."""
    held = [_held(cols.get(k), n) for k in _TOP_P]
    if not (held[0].any() or held[1].any()):
        return np.ones(n, bool), {}
    got = [cols.get(k) for k in _TOP_P]
    ids, off = (None if isinstance(c, list) else _lists(pa.nulls(n) if c is None else c, n) for c in got)
    if ids is None or off is None or ids.values.dtype.kind not in "iu" or off.values.dtype.kind not in "iu":
        return ~(held[0] | held[1]), {}
    both = ids.present & off.present
    ok = _int_ok(ids, 0, INT32_MAX) & _int_ok(off, 0, INT32_MAX) & (off.lengths == rls + 1)
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
    return (ids.present == off.present) & (~both | ok), dict(zip(_TOP_P, (ids, off)))


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
    offsets = _numpy(a.offsets).astype(np.int64)
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


def _experts(col, n: int, ntok: np.ndarray) -> tuple[np.ndarray, _Lists | None, np.ndarray | None]:
    """(per row: passes validate._routed_experts, each row's ids flattened, each row's
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
    values = _Lists(o2, _filled(leaf), held, clean)
    ok &= _int_ok(values, 0, INT32_MAX)
    return ok, values, np.stack([steps, lmin, kmin], axis=1)


def _list_array(offsets: np.ndarray, values: np.ndarray, typ, nulls: np.ndarray | None = None) -> pa.Array:
    # from buffers: ListArray.from_arrays with a mask would import pyarrow.compute (see core.arrays)
    validity, null_count = None, 0
    if nulls is not None and nulls.any():
        validity, null_count = pa.py_buffer(np.packbits(~nulls, bitorder="little")), int(nulls.sum())
    return pa.Array.from_buffers(pa.list_(typ), len(offsets) - 1, [validity, pa.py_buffer(offsets.astype(np.int32))],
                                 null_count, children=[pa.array(values, typ)])


def _null_lists(m: int, typ) -> pa.Array:
    return _list_array(np.zeros(m + 1, dtype=np.int64), np.zeros(0, dtype=np.float32 if typ == pa.float32() else np.int32), typ, np.ones(m, bool))


def _row_record(chunk: RawChunk, i: int, py: dict) -> dict:
    if i in chunk.rows:
        return chunk.rows[i]
    rec = {k: vals[i] for k, vals in py.items()}
    for k, col in chunk.columns.items():
        if k not in rec:
            rec[k] = col[i] if isinstance(col, list) else col[i].as_py()
    return rec


def _by_rows(chunk: RawChunk, py: dict, base_pos: int, reward_key, keep_text, step) -> v.NormChunk:
    records = [None if i in chunk.problems else _row_record(chunk, i, py) for i in range(len(chunk))]
    rows = RawChunk(chunk.source, chunk.kind, chunk.numbers, records, chunk.problems)
    return v.normalize_rows(rows, base_pos, reward_key, keep_text, step)


_INT64_MAX = 2**63 - 1
# the record keys the per-row rules read besides the long lists; a chunk with another column
# among them that is not of a type handled below is checked row by row
_SCALAR_KEYS = ("rollout_id", "step", "index", "group_index", "response_length", "remove_sample", "status",
                "reward", "metadata", "source", "train_metadata", "multimodal_train_inputs")


@dataclass
class _Scalars:
    """A chunk's per-row fields as columns, one entry per row of the chunk: what the per-row
    rules (validate._ids ... _json_fields) give each row."""

    sample_index: pa.Array  # int64
    group_index: pa.Array  # int64
    reward: pa.Array  # float64
    raw_reward: pa.Array  # float64
    status: pa.Array  # string
    truncated: pa.Array  # bool
    round_number: pa.Array  # int64
    source_name: pa.Array  # string
    train_metadata: pa.Array  # string
    mm: pa.Array  # string
    text: list[pa.Array]  # prompt, response, label (string), with --keep-text

    def take(self, rows: np.ndarray | None) -> "_Scalars":
        """These rows only (None: all). Rebuilt from Python values: Array.take would import
        pyarrow.compute (see core.arrays), and this is the rare case of a chunk with bad rows."""
        if rows is None:
            return self
        picked = rows.tolist()

        def take(c: pa.Array) -> pa.Array:
            vals = c.to_pylist()
            return pa.array([vals[i] for i in picked], c.type)

        return _Scalars(*(take(c) for c in (self.sample_index, self.group_index, self.reward, self.raw_reward,
                                             self.status, self.truncated, self.round_number, self.source_name,
                                             self.train_metadata, self.mm)), [take(c) for c in self.text])


def _scalars_of_rows(scalars: list, rows: np.ndarray, keep_text: bool) -> _Scalars:
    """The per-row rules' results (scalars[i] for each of `rows`) as columns."""
    sc = [scalars[i] for i in rows.tolist()]
    return _Scalars(
        pa.array([s[0][0] for s in sc], pa.int64()), pa.array([s[0][1] for s in sc], pa.int64()),
        pa.array([s[2][0] for s in sc], pa.float64()), pa.array([s[2][1] for s in sc], pa.float64()),
        pa.array([s[1] for s in sc], pa.string()), pa.array([s[1] == "truncated" for s in sc], pa.bool_()),
        pa.array([s[2][2] for s in sc], pa.int64()), pa.array([s[2][3] for s in sc], pa.string()),
        pa.array([s[3][0] for s in sc], pa.string()), pa.array([s[3][1] for s in sc], pa.string()),
        [pa.array([s[3][2][k] for s in sc], pa.string()) for k in range(3)] if keep_text else [],
    )


def _ints(col, n: int, lo: int, *, nullable: bool = True) -> tuple[np.ndarray, np.ndarray] | None:
    """(values as int64 with nulls as 0, null mask) of an integer column whose values all lie
    in [lo, 2**63); None for any other column (the row rules decide)."""
    if col is None or (isinstance(col, pa.Array) and pa.types.is_null(col.type)):  # every row null
        return (np.zeros(n, np.int64), np.ones(n, bool)) if nullable else None
    if not isinstance(col, pa.Array) or not pa.types.is_integer(col.type) or (col.null_count and not nullable):
        return None
    vals = _filled(col)
    if len(vals) and not _in_range(vals, lo, _INT64_MAX):
        return None
    return vals.astype(np.int64, copy=False), null_mask(col)


def _texts(col, n: int) -> list | None:
    """A text column's values (None for null), or None when it is not text."""
    if col is None or (isinstance(col, pa.Array) and pa.types.is_null(col.type)):
        return [None] * n
    if not isinstance(col, pa.Array) or not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return None
    return col.to_pylist()


def _fields(md) -> dict[str, pa.Array] | None:
    """A struct column's fields, each null where the struct row is null (as a row's dict
    would lack the key); {} for no metadata; None for a column that is not a struct."""
    if md is None or pa.types.is_null(md.type):
        return {}
    if not pa.types.is_struct(md.type):
        return None
    return {md.type.field(k).name: f for k, f in enumerate(md.flatten())}


def _scalars_on_columns(chunk: RawChunk, cols: dict, n: int, reward_key: str | None, keep_text: bool,
                        step: int | None) -> tuple[_Scalars, np.ndarray, np.ndarray, list, list] | None:
    """The per-row rules for a whole chunk at once, where every row passes them and every
    column is of a plain Arrow type: (fields, response lengths, removed, explicit ids, groups).
    None otherwise: the rows then go through the rules one by one, which word any problem."""
    if chunk.problems or chunk.rows or reward_key is not None or n == 0:
        return None
    if any(k in cols and not isinstance(cols[k], pa.Array) for k in _SCALAR_KEYS):
        return None
    for k in ("train_metadata", "multimodal_train_inputs"):  # JSON text of their values: row by row
        if k in cols and cols[k].null_count != n:
            return None
    rid = _ints(cols.get("rollout_id"), n, -(2**63))
    idx = _ints(cols.get("index"), n, 0)
    grp = _ints(cols.get("group_index"), n, 0)
    rl = _ints(cols.get("response_length"), n, -(2**63), nullable=False)
    if rid is None or idx is None or grp is None or rl is None:
        return None
    st = cols.get("step")
    if step is not None and st is not None and not pa.types.is_null(st.type):
        got = _ints(st, n, -(2**63))
        if got is None or ((got[0] != step) & ~got[1]).any():
            return None
    rm = cols.get("remove_sample")
    if rm is None or pa.types.is_null(rm.type):
        removed = np.zeros(n, bool)
    elif pa.types.is_boolean(rm.type):
        removed = _filled(rm)
    else:
        return None
    status = _texts(cols.get("status"), n)
    if status is None or not set(status) <= v._STATUS_SET:  # absent or null: [None, ...] fails too
        return None
    rw = cols.get("reward")
    if rw is None or rw.null_count or not (pa.types.is_integer(rw.type) or pa.types.is_floating(rw.type)):
        return None
    reward = _numpy(rw).astype(np.float64)
    if not np.isfinite(reward).all():
        return None
    md = _fields(cols.get("metadata"))
    if md is None:
        return None
    raw = reward
    rr = md.get("raw_reward")
    if rr is not None and not pa.types.is_null(rr.type):  # a null raw reward counts as absent
        if not (pa.types.is_integer(rr.type) or pa.types.is_floating(rr.type)):
            return None
        got = _filled(rr).astype(np.float64)
        if not np.isfinite(got).all():
            return None
        raw = np.where(null_mask(rr), reward, got)
    rn = _ints(md.get("round_number"), n, 0)
    names = _texts(md.get("source_name"), n)
    if rn is None or names is None:
        return None
    src = _texts(cols.get("source"), n)
    if src is None:
        return None
    source = [s if s else (sn if sn else "unknown") for s, sn in zip(src, names)]
    text = []
    if keep_text:
        for k in ("prompt", "response", "label"):
            t = _texts(cols.get(k), n)
            if t is None:
                return None
            text.append(pa.array(t, pa.string()))
    explicit = [None if null else int(x) for x, null in zip(rid[0].tolist(), rid[1].tolist())]
    groups = [None if null else int(x) for x, null in zip(grp[0].tolist(), grp[1].tolist())]
    none = pa.nulls(n, pa.string())
    fields = _Scalars(
        pa.array(idx[0], pa.int64(), mask=idx[1]), pa.array(grp[0], pa.int64(), mask=grp[1]),
        pa.array(reward, pa.float64()), pa.array(raw, pa.float64()), pa.array(status, pa.string()),
        pa.array(np.array([s == "truncated" for s in status], bool), pa.bool_()),
        pa.array(rn[0], pa.int64(), mask=rn[1]), pa.array(source, pa.string()), none, none, text,
    )
    return fields, rl[0], removed, explicit, groups


def _scalars_by_rows(chunk: RawChunk, py: dict, out: v.NormChunk, n: int, reward_key, keep_text, step,
                     rls: np.ndarray, removed: np.ndarray, slow: np.ndarray) -> tuple[np.ndarray, list]:
    """The per-row rules one row at a time: (rows that pass them, each such row's fields);
    `rls`, `removed` and `slow` (rows for the row checks) are filled in."""
    keys = list(py)
    fast = np.zeros(n, bool)
    scalars: list = [None] * n
    own = chunk.rows
    for i in range(n):
        rec = None if i in chunk.problems else own[i] if i in own else {k: py[k][i] for k in keys}
        if not v._prelude(out, chunk, i, rec, step):
            continue
        if i in own:  # checked from its own dict
            slow[i] = True
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
    return fast, scalars


def normalize_columns(chunk: RawChunk, base_pos: int, *, reward_key: str | None, keep_text: bool,
                      step: int | None = None, arena=None) -> v.NormChunk:
    """validate.normalize_chunk for a columnar chunk: the same rows, problems and batches."""
    n = len(chunk)
    cols = dict(chunk.columns)
    lm = cols.get("loss_mask")
    if isinstance(lm, pa.Array) and pa.types.is_list(lm.type) and pa.types.is_boolean(lm.type.value_type):
        cols["loss_mask"] = lm.cast(pa.list_(pa.uint8()))  # bool masks are 0/1
    chunk = RawChunk(chunk.source, chunk.kind, chunk.numbers, None, chunk.problems, cols, chunk.rows)
    lazy: list[dict] = []

    def py() -> dict:
        """The per-row columns as Python lists, for the row rules (the column checks need none)."""
        if not lazy:
            lazy.append({k: c if isinstance(c, list) else c.to_pylist() for k, c in cols.items()
                         if k not in _VECTOR_LISTS and k not in _ROW_LISTS})
        return lazy[0]

    lists: dict[str, _Lists] = {}
    for k in _VECTOR_LISTS:
        if k in cols:
            lst = _lists(cols[k], n) if isinstance(cols[k], pa.Array) else None
            if lst is None:
                return _by_rows(chunk, py(), base_pos, reward_key, keep_text, step)
            lists[k] = lst
    out = v.empty_norm(chunk)
    rls = np.zeros(n, dtype=np.int64)
    removed = np.zeros(n, bool)
    slow = np.zeros(n, bool)
    on_columns = _scalars_on_columns(chunk, cols, n, reward_key, keep_text, step)
    if on_columns is not None:  # every row passes the per-row rules
        fields, rls, removed, explicit, groups = on_columns
        out.id_state = [v.ID_MISSING if x is None else v.ID_EXPLICIT for x in explicit]
        out.explicit_id, out.group_index = explicit, groups
        fast = np.ones(n, bool)
        scalars = None
    else:
        fields = None
        fast, scalars = _scalars_by_rows(chunk, py(), out, n, reward_key, keep_text, step, rls, removed, slow)
    # the long lists, for the whole chunk
    tok = lists.get("tokens")
    shape = None
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
                finite, f32[k] = _float32(lst, arena.take(k, len(lst.values)) if arena is not None else None)
                ok &= ~lst.present | ((lst.lengths == rls) & finite)
        tp_ok, tp = _top_p(cols, n, rls)
        ok &= tp_ok
        lists.update(tp)
        ex_ok, ex, shape = _experts(cols.get(_EXPERTS), n, ntok)
        ok &= ex_ok
        if ex is not None:
            lists[_EXPERTS] = ex
        slow |= fast & ~ok
        fast &= ok
    batches = []
    if fast.any():
        for part in _parts(fast, lists):
            rows = None if part.all() else np.flatnonzero(part)
            sc = fields.take(rows) if fields is not None else _scalars_of_rows(scalars, np.flatnonzero(part), keep_text)
            batches.append(_fast_batch(part, base_pos, keep_text, sc, rls, removed, lists, f32, shape, arena))
        out.valid = fast.tolist()
    if slow.any():
        rows, pos = [], []
        for i in np.flatnonzero(slow).tolist():
            rec = _row_record(chunk, i, py())
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
    if len(batches) > 1:
        batches = _in_record_order(batches)
    out.batches = batches
    return out


# the list columns that hold the most values of a row (as validate._row_values counts them)
_LONGEST = ("tokens", "rollout_top_p_token_ids", _EXPERTS)


def _parts(fast: np.ndarray, lists: dict[str, _Lists]) -> list[np.ndarray]:
    """The fast rows in runs of at most validate._MAX_BATCH_VALUES values per list column,
    cut where validate.build_batches cuts (Arrow list offsets are int32)."""
    sizes = np.zeros(len(fast), np.int64)
    for k in _LONGEST:
        if k in lists:
            sizes = np.maximum(sizes, lists[k].lengths)
    sizes[~fast] = 0
    if sizes.sum() <= v._MAX_BATCH_VALUES:
        return [fast]
    cuts, acc = [], 0
    for i in np.flatnonzero(fast).tolist():
        if acc + sizes[i] > v._MAX_BATCH_VALUES and acc:
            cuts.append(i)
            acc = 0
        acc += int(sizes[i])
    bounds = [0, *cuts, len(fast)]
    idx = np.arange(len(fast))
    return [fast & (idx >= a) & (idx < b) for a, b in zip(bounds[:-1], bounds[1:])]


def _in_record_order(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """The rows of `batches` in record order (`_pos`), as validate.normalize_chunk gives them:
    one batch, or where one would pass validate._MAX_BATCH_VALUES, slices of the batches."""
    pos = np.concatenate([_numpy(b.column(0)) for b in batches])
    order = np.argsort(pos, kind="stable")
    held = max(sum(len(b.column(k).flatten()) for b in batches) for k in _LONGEST)
    if held <= v._MAX_BATCH_VALUES:
        t = pa.Table.from_batches(batches).take(pa.array(order))
        return t.combine_chunks().to_batches()
    src = np.repeat(np.arange(len(batches)), [b.num_rows for b in batches])[order]
    at = np.concatenate([np.arange(b.num_rows) for b in batches])[order]
    cut = np.flatnonzero(src[1:] != src[:-1]) + 1  # each batch's rows are in order already
    firsts, ends = np.r_[0, cut], np.r_[cut, len(order)]
    return [batches[src[a]].slice(int(at[a]), int(b - a)) for a, b in zip(firsts.tolist(), ends.tolist())]


def _placed(arena, name: str, values: np.ndarray) -> np.ndarray:
    """`values` cast to the column's type in its place in the step's buffer (pipeline/arena.py),
    or as they are when there is no arena or no room."""
    out = arena.take(name, len(values)) if arena is not None else None
    if out is None:
        return values
    np.copyto(out, values, casting="unsafe")  # in range: checked before
    return out


def _fast_batch(fast, base_pos, keep_text, sc: _Scalars, rls, removed, lists, f32, shape, arena=None) -> pa.RecordBatch:
    rows = np.flatnonzero(fast)
    every = len(rows) == len(fast)
    sel = None if every else rows
    m = len(rows)
    tok = lists["tokens"]
    t_off, t_val = _gather(tok.offsets, tok.values, sel)
    t_val = _placed(arena, "tokens", t_val)
    if t_val.dtype != np.int32:
        t_val = t_val.astype(np.int32)
    rl = rls[rows]
    # the loss mask: the row's own, all ones where null, all zeros for a removed sample
    m_off = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(rl, out=m_off[1:])
    mask = lists.get("loss_mask")
    own = (mask.present[rows] if mask is not None else np.zeros(m, bool)) & ~removed[rows]
    if own.all():
        src = _gather(mask.offsets, mask.values, sel)[1]
        m_val = _placed(arena, "loss_mask", src).astype(np.uint8, copy=False)
        m_sum = src  # summed as they came (0 or 1): reduceat would widen the bytes again
    else:
        m_val = np.repeat((~own & ~removed[rows]).astype(np.uint8), rl)
        if own.any():
            src = np.flatnonzero(own)
            _, vals = _gather(mask.offsets, mask.values, rows[src])
            dst_off = m_off[:-1][src]
            idx = np.repeat(dst_off - np.concatenate([[0], np.cumsum(rl[src])[:-1]]), rl[src]) + np.arange(len(vals))
            m_val[idx] = vals
        m_sum = m_val
        m_val = _placed(arena, "loss_mask", m_val)
    mask_total = v._row_sums(m_sum, m_off)
    cols = [
        pa.array(rows + base_pos, pa.int64()),
        sc.sample_index,
        sc.group_index,
        _list_array(t_off, t_val, pa.int32()),
        pa.array(rl, pa.int32()),
        pa.array(np.diff(t_off), pa.int32()),
        _list_array(m_off, m_val, pa.uint8()),
        pa.array(removed[rows], pa.bool_()),
        sc.reward,
        sc.raw_reward,
        sc.truncated,
        sc.status,
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
    for k in _ROW_LISTS:
        lst = lists.get(k)
        if lst is None or not lst.present[rows].any():
            cols.append(_null_lists(m, pa.int32()))
            continue
        present = lst.present[rows]
        offs, vals = _gather(lst.offsets, lst.values, sel)
        cols.append(_list_array(offs, vals.astype(np.int32, copy=False), pa.int32(), ~present))
    ex = lists.get(_EXPERTS)
    if ex is None or not ex.present[rows].any():
        cols.append(_null_lists(m, pa.int32()))
    else:
        present = ex.present[rows]
        s_off = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(present * 3, out=s_off[1:])
        cols.append(_list_array(s_off, shape[rows][present].reshape(-1).astype(np.int32), pa.int32(), ~present))
    cols += [sc.round_number, sc.source_name, sc.train_metadata, sc.mm, *sc.text]
    return pa.RecordBatch.from_arrays(cols, schema=v.pre_schema(keep_text))
