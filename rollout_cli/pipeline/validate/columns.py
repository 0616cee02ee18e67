"""The column form of the rules: a whole columnar chunk (every reader's) validated at once.

The per-row fields (ids, status, reward, metadata, JSON fields) are checked on their Arrow
columns where every row passes and each column is of a plain type (a JSON reader's Python
values are first put on columns of the types the rules accept: `_typed`), else through the row rules
(rows.py) one row at a time (they are small); the long lists are checked and cast on their
buffers (lists.py). A row that fails any check is validated again on its own by
rows.validate_record, so its problem has the same wording, rule id and location as from any
other input; rows that pass are built into batches without a Python object per list.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ...core import tensors
from ...core.arrays import null_mask
from ...inputs.base import RawChunk
from . import batch
from .batch import ID_EXPLICIT, ID_MISSING, NormChunk, empty_norm, pre_schema, row_sums
from .lists import (EXPERTS, ROW_LISTS, VECTOR_LISTS, Lists, experts_ok, filled, float32, gather, in_range, int_ok,
                    list_array, null_lists, numpy_of, read_lists, top_p_ok)
from .rows import (INT64_MAX, INT64_MIN, MASK_RANGE, STATUS_SET, TOKEN_RANGE, UNKNOWN_SOURCE, Bad, build_batches,
                   check_ids, check_json_fields, check_prelude, check_remove_sample, check_response_length,
                   check_rewards, check_status, check_weight_versions, normalize_rows, validate_into)


def _row_record(chunk: RawChunk, i: int, py: dict) -> dict:
    if i in chunk.rows:
        return chunk.rows[i]
    rec = {k: vals[i] for k, vals in py.items()}
    for k, col in chunk.columns.items():
        if k not in rec:
            rec[k] = col[i] if isinstance(col, list) else col[i].as_py()
    return rec


def _by_rows(chunk: RawChunk, py: dict, base_pos: int, reward_key, keep_text, step, rewards_recorded) -> NormChunk:
    records = [None if i in chunk.problems else _row_record(chunk, i, py) for i in range(len(chunk))]
    rows = RawChunk(chunk.source, chunk.kind, chunk.numbers, records, chunk.problems)
    return normalize_rows(rows, base_pos, reward_key, keep_text, step, rewards_recorded)


# the record keys the per-row rules read besides the long lists; a chunk with another column
# among them that is not of a type handled below is checked row by row
_SCALAR_KEYS = ("rollout_id", "step", "index", "group_index", "response_length", "remove_sample", "status",
                "reward", "metadata", "source", "train_metadata", "multimodal_train_inputs", "weight_versions",
                "multimodal_train_input_id", "multimodal_inputs")


_NONE = type(None)
_INTS, _NUMBERS, _TEXTS, _BOOLS = {int, _NONE}, {int, float, _NONE}, {str, _NONE}, {bool, _NONE}
# a row-form reader's scalar fields (Python values, one list per field): the Arrow type each takes
# on columns, from values of exactly these Python types (bool is no int here, and no number);
# any other value leaves the chunk to the row rules, which word it
_PLAIN = {**dict.fromkeys(("rollout_id", "step", "index", "group_index", "response_length"), (_INTS, pa.int64())),
          "reward": (_NUMBERS, pa.float64()), "remove_sample": (_BOOLS, pa.bool_()),
          **dict.fromkeys(("status", "source", "multimodal_train_input_id", "prompt", "response", "label"),
                          (_TEXTS, pa.string()))}
# the fields of metadata the rules read (rows.check_rewards)
_METADATA = (("raw_reward", _NUMBERS, pa.float64()), ("round_number", _INTS, pa.int64()),
             ("source_name", _TEXTS, pa.string()))


def _typed(cols: dict, n: int) -> dict | None:
    """`cols` with its Python-list scalar columns as Arrow arrays of the types above; None
    where a value is of another type (or out of the type's range). A JSON reader's chunk then
    takes the column rules as a Parquet one does: the same result, without the row rules' calls
    per row (the first 6 steps of the 16-step whole JSONL run, 5,200 samples: 48 -> 36 CPU-ms
    to validate)."""
    out = dict(cols)
    try:
        for k, vals in cols.items():
            if not isinstance(vals, list):
                continue
            kinds = set(map(type, vals))
            if kinds <= {_NONE}:  # null in every row, as a Parquet column of nulls
                out[k] = pa.nulls(n)
            elif k in _PLAIN:
                allowed, typ = _PLAIN[k]
                if not kinds <= allowed:
                    return None
                out[k] = pa.array(vals, typ)
            elif k == "weight_versions":
                if not kinds <= {list, _NONE} or not all(set(map(type, v)) <= {str} for v in vals if v is not None):
                    return None
                out[k] = pa.array(vals, batch.WEIGHT_VERSIONS)
            elif k == "metadata":
                if not kinds <= {dict, _NONE}:
                    return None
                fields = []
                for name, allowed, typ in _METADATA:
                    got = [None if m is None else m.get(name) for m in vals]
                    if not set(map(type, got)) <= allowed:
                        return None
                    fields.append(pa.array(got, typ))
                out[k] = pa.StructArray.from_arrays(fields, [name for name, _, _ in _METADATA])
            elif k in _SCALAR_KEYS:  # train_metadata, multimodal inputs: on columns only when null
                return None
    except (OverflowError, pa.ArrowException):  # an integer past int64, one no double holds
        return None
    return out


@dataclass
class _Scalars:
    """A chunk's per-row fields as columns, one entry per row of the chunk: what the per-row
    rules (rows.check_ids ... check_json_fields) give each row."""

    sample_index: pa.Array  # int64
    group_index: pa.Array  # int64
    reward: pa.Array  # float64, null where not recorded
    raw_reward: pa.Array  # float64, null where not recorded
    status: pa.Array  # string
    truncated: pa.Array  # bool
    round_number: pa.Array  # int64
    source_name: pa.Array  # string
    train_metadata: pa.Array  # string
    mm: pa.Array  # core/tensors.MM_TYPE
    mm_id: pa.Array  # string
    images: pa.Array  # core/tensors.IMAGES_TYPE
    media_dropped: pa.Array  # int32
    weight_versions: pa.Array  # list<string>
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
                                             self.train_metadata, self.mm, self.mm_id, self.images, self.media_dropped,
                                             self.weight_versions)),
                        [take(c) for c in self.text])


def _scalars_of_rows(scalars: list, rows: np.ndarray, keep_text: bool) -> _Scalars:
    """The per-row rules' results (scalars[i] for each of `rows`) as columns."""
    sc = [scalars[i] for i in rows.tolist()]
    return _Scalars(
        pa.array([s[0][0] for s in sc], pa.int64()), pa.array([s[0][1] for s in sc], pa.int64()),
        pa.array([s[2][0] for s in sc], pa.float64()), pa.array([s[2][1] for s in sc], pa.float64()),
        pa.array([s[1] for s in sc], pa.string()), pa.array([s[1] == "truncated" for s in sc], pa.bool_()),
        pa.array([s[2][2] for s in sc], pa.int64()), pa.array([s[2][3] for s in sc], pa.string()),
        pa.array([s[3][0] for s in sc], pa.string()), tensors.entries_array([s[3][1] for s in sc]),
        pa.array([s[3][3][0] for s in sc], pa.string()), pa.array([s[3][3][1] for s in sc], tensors.IMAGES_TYPE),
        pa.array([s[3][3][2] for s in sc], pa.int32()), pa.array([s[4] for s in sc], batch.WEIGHT_VERSIONS),
        [pa.array([s[3][2][k] for s in sc], pa.string()) for k in range(3)] if keep_text else [],
    )


def _ints(col, n: int, lo: int, *, nullable: bool = True) -> tuple[np.ndarray, np.ndarray] | None:
    """(values as int64 with nulls as 0, null mask) of an integer column whose values all lie
    in [lo, 2**63); None for any other column (the row rules decide)."""
    if col is None or (isinstance(col, pa.Array) and pa.types.is_null(col.type)):  # every row null
        return (np.zeros(n, np.int64), np.ones(n, bool)) if nullable else None
    if not isinstance(col, pa.Array) or not pa.types.is_integer(col.type) or (col.null_count and not nullable):
        return None
    vals = filled(col)
    if len(vals) and not in_range(vals, lo, INT64_MAX):
        return None
    return vals.astype(np.int64, copy=False), null_mask(col)


def _texts(col, n: int) -> list | None:
    """A text column's values (None for null), or None when it is not text."""
    if col is None or (isinstance(col, pa.Array) and pa.types.is_null(col.type)):
        return [None] * n
    if not isinstance(col, pa.Array) or not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return None
    return col.to_pylist()


def _floats(x: np.ndarray, python: bool) -> pa.Array:
    """float64, null where NaN; from Python values, 0 under a null as the row rules' arrays
    have it (see _null_media)."""
    nan = np.isnan(x)
    return pa.array(np.where(nan, 0.0, x) if python and nan.any() else x, pa.float64(), mask=nan)


def _null_media(n: int, python: bool) -> tuple[pa.Array, pa.Array, pa.Array]:
    """The multimodal entries, their id and the images of rows that have none. From Python
    values they are built as the row rules build them (_scalars_of_rows): `pa.nulls` gives a
    nested type's empty children offsets buffers as long as the rows, which an Arrow IPC copy
    of a one-chunk step writes out: the copy's bytes would depend on the path taken."""
    none = pa.nulls(n, pa.string())
    if python:
        return tensors.entries_array([None] * n), none, pa.array([None] * n, tensors.IMAGES_TYPE)
    return pa.nulls(n, tensors.MM_TYPE), none, pa.nulls(n, tensors.IMAGES_TYPE)


def _versions(col, n: int, python: bool = False) -> pa.Array | None:
    """A weight_versions column as the pre-schema's list<string>, null where a row's list is
    empty (rows.check_weight_versions); None when it is not a list of strings. `python`: built
    from Python values (see _null_media)."""
    if col is None or pa.types.is_null(col.type):
        return pa.array([None] * n, batch.WEIGHT_VERSIONS) if python else pa.nulls(n, batch.WEIGHT_VERSIONS)
    t = col.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not (
            pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)):
        return None
    off = numpy_of(col.offsets)
    if col.values.slice(int(off[0]), int(off[-1] - off[0])).null_count:
        return None  # a null entry in a list (or under a null list): the row rule words it
    if col.type != batch.WEIGHT_VERSIONS:
        col = col.cast(batch.WEIGHT_VERSIONS)
    lengths = np.diff(numpy_of(col.offsets))
    empty = (lengths == 0) & ~null_mask(col)
    if not empty.any():
        return col
    return pa.array([None if e else v for e, v in zip(empty.tolist(), col.to_pylist())], batch.WEIGHT_VERSIONS)


def _fields(md) -> dict[str, pa.Array] | None:
    """A struct column's fields, each null where the struct row is null (as a row's dict
    would lack the key); {} for no metadata; None for a column that is not a struct."""
    if md is None or pa.types.is_null(md.type):
        return {}
    if not pa.types.is_struct(md.type):
        return None
    return {md.type.field(k).name: f for k, f in enumerate(md.flatten())}


def _scalars_on_columns(chunk: RawChunk, cols: dict, n: int, reward_key: str | None, keep_text: bool,
                        step: int | None, rewards_recorded: bool = True
                        ) -> tuple[_Scalars, np.ndarray, np.ndarray, list, list] | None:
    """The per-row rules for a whole chunk at once, where every row passes them and every
    column is of a plain Arrow type: (fields, response lengths, removed, explicit ids, groups).
    None otherwise: the rows then go through the rules one by one, which word any problem."""
    if chunk.problems or chunk.rows or reward_key is not None or n == 0:
        return None
    python = any(isinstance(c, list) for c in cols.values())  # a JSON or .pt reader's values
    if python:
        cols = _typed(cols, n)
        if cols is None:
            return None
    if any(k in cols and not isinstance(cols[k], pa.Array) for k in _SCALAR_KEYS):
        return None
    for k in ("train_metadata", "multimodal_train_inputs", "multimodal_train_input_id",
              "multimodal_inputs"):  # checked row by row
        if k in cols and cols[k].null_count != n:
            return None
    rid = _ints(cols.get("rollout_id"), n, INT64_MIN)
    idx = _ints(cols.get("index"), n, 0)
    grp = _ints(cols.get("group_index"), n, 0)
    rl = _ints(cols.get("response_length"), n, INT64_MIN, nullable=False)
    if rid is None or idx is None or grp is None or rl is None:
        return None
    st = cols.get("step")
    if step is not None and st is not None and not pa.types.is_null(st.type):
        got = _ints(st, n, INT64_MIN)
        if got is None or ((got[0] != step) & ~got[1]).any():
            return None
    rm = cols.get("remove_sample")
    if rm is None or pa.types.is_null(rm.type):
        removed = np.zeros(n, bool)
    elif pa.types.is_boolean(rm.type):
        removed = filled(rm)
    else:
        return None
    status = _texts(cols.get("status"), n)
    if status is None or not set(status) <= STATUS_SET:  # absent or null: [None, ...] fails too
        return None
    rw = cols.get("reward")
    if not rewards_recorded and (rw is None or pa.types.is_null(rw.type)):  # none recorded
        reward = np.full(n, np.nan)
    elif rw is None or rw.null_count or not (pa.types.is_integer(rw.type) or pa.types.is_floating(rw.type)):
        return None
    else:
        reward = numpy_of(rw).astype(np.float64)
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
        got = filled(rr).astype(np.float64)
        if not np.isfinite(got).all():
            return None
        raw = np.where(null_mask(rr), reward, got)
    rn = _ints(md.get("round_number"), n, 0)
    names = _texts(md.get("source_name"), n)
    if rn is None or names is None:
        return None
    src = _texts(cols.get("source"), n)
    versions = _versions(cols.get("weight_versions"), n, python)
    if src is None or versions is None:
        return None
    source = [s if s else (sn if sn else UNKNOWN_SOURCE) for s, sn in zip(src, names)]
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
        _floats(reward, python), _floats(raw, python),
        pa.array(status, pa.string()), pa.array(np.array([s == "truncated" for s in status], bool), pa.bool_()),
        pa.array(rn[0], pa.int64(), mask=rn[1]), pa.array(source, pa.string()), none,
        *_null_media(n, python), pa.array(np.zeros(n, np.int32)),
        versions, text,
    )
    return fields, rl[0], removed, explicit, groups


def _scalars_by_rows(chunk: RawChunk, py: dict, out: NormChunk, n: int, reward_key, keep_text, step,
                     rls: np.ndarray, removed: np.ndarray, slow: np.ndarray,
                     rewards_recorded: bool = True) -> tuple[np.ndarray, list]:
    """The per-row rules one row at a time: (rows that pass them, each such row's fields);
    `rls`, `removed` and `slow` (rows for the row checks) are filled in."""
    keys = list(py)
    fast = np.zeros(n, bool)
    scalars: list = [None] * n
    own = chunk.rows
    for i in range(n):
        rec = None if i in chunk.problems else own[i] if i in own else {k: py[k][i] for k in keys}
        if not check_prelude(out, chunk, i, rec, step):
            continue
        if i in own:  # checked from its own dict
            slow[i] = True
            continue
        try:
            ids = check_ids(rec)
            rl = check_response_length(rec)
            if not INT64_MIN <= rl <= INT64_MAX:  # no int64 holds it: the row's own checks word it
                slow[i] = True
                continue
            rm = check_remove_sample(rec)
            status = check_status(rec)
            rewards = check_rewards(rec, reward_key, rewards_recorded)
            js = check_json_fields(rec, keep_text)
            wv = check_weight_versions(rec)
        except Bad:
            slow[i] = True
            continue
        fast[i] = True
        rls[i], removed[i] = rl, rm
        scalars[i] = (ids, status, rewards, js, wv)
    return fast, scalars


def normalize_columns(chunk: RawChunk, base_pos: int, *, reward_key: str | None, keep_text: bool,
                      step: int | None = None, rewards_recorded: bool = True) -> NormChunk:
    """normalize_chunk (the entry point) for a columnar chunk: the same rows, problems and batches."""
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
                         if k not in VECTOR_LISTS and k not in ROW_LISTS})
        return lazy[0]

    lists: dict[str, Lists] = {}
    for k in VECTOR_LISTS:
        if k in cols:
            lst = read_lists(cols[k], n) if isinstance(cols[k], pa.Array) else None
            if lst is None:
                return _by_rows(chunk, py(), base_pos, reward_key, keep_text, step, rewards_recorded)
            lists[k] = lst
    out = empty_norm(chunk)
    rls = np.zeros(n, dtype=np.int64)
    removed = np.zeros(n, bool)
    slow = np.zeros(n, bool)
    on_columns = _scalars_on_columns(chunk, cols, n, reward_key, keep_text, step, rewards_recorded)
    if on_columns is not None:  # every row passes the per-row rules
        fields, rls, removed, explicit, groups = on_columns
        out.id_state = [ID_MISSING if x is None else ID_EXPLICIT for x in explicit]
        out.explicit_id, out.group_index = explicit, groups
        fast = np.ones(n, bool)
        scalars = None
    else:
        fields = None
        fast, scalars = _scalars_by_rows(chunk, py(), out, n, reward_key, keep_text, step, rls, removed, slow,
                                         rewards_recorded)
    # the long lists, for the whole chunk
    tok = lists.get("tokens")
    shape = None
    if tok is None:
        slow |= fast
        fast[:] = False
    else:
        ntok = tok.lengths
        ok = tok.present & (ntok >= 1) & int_ok(tok, *TOKEN_RANGE) & (rls >= 0) & (rls <= ntok)
        mask = lists.get("loss_mask")
        if mask is not None:
            ok &= ~mask.present | ((mask.lengths == rls) & int_ok(mask, *MASK_RANGE))
        f32 = {}
        for k in ("rollout_log_probs", "teacher_log_probs"):
            lst = lists.get(k)
            if lst is not None:
                finite, f32[k] = float32(lst)
                ok &= ~lst.present | ((lst.lengths == rls) & finite)
        tp_ok, tp = top_p_ok(cols, n, rls)
        ok &= tp_ok
        lists.update(tp)
        ex_ok, ex, shape = experts_ok(cols.get(EXPERTS), n, ntok)
        ok &= ex_ok
        if ex is not None:
            lists[EXPERTS] = ex
        slow |= fast & ~ok
        fast &= ok
    batches = []
    if fast.any():
        for part in _parts(fast, lists):
            rows = None if part.all() else np.flatnonzero(part)
            sc = fields.take(rows) if fields is not None else _scalars_of_rows(scalars, np.flatnonzero(part), keep_text)
            batches.append(_fast_batch(part, base_pos, keep_text, sc, rls, removed, lists, f32, shape))
        out.valid = fast.tolist()
    if slow.any():
        rows, pos = [], []
        for i in np.flatnonzero(slow).tolist():
            row = validate_into(out, chunk, i, _row_record(chunk, i, py()), reward_key, keep_text, rewards_recorded)
            if row is not None:
                rows.append(row)
                pos.append(base_pos + i)
        out.problems.sort(key=lambda t: t[0])
        batches.extend(build_batches(rows, pos, keep_text))
    if len(batches) > 1:
        batches = _in_record_order(batches)
    out.batches = batches
    return out


# the list columns that hold the most values of a row (as rows._row_values counts them)
_LONGEST = ("tokens", "rollout_top_p_token_ids", EXPERTS)


def _parts(fast: np.ndarray, lists: dict[str, Lists]) -> list[np.ndarray]:
    """The fast rows in runs of at most batch.MAX_BATCH_VALUES values per list column,
    cut where rows.build_batches cuts (Arrow list offsets are int32)."""
    sizes = np.zeros(len(fast), np.int64)
    for k in _LONGEST:
        if k in lists:
            sizes = np.maximum(sizes, lists[k].lengths)
    sizes[~fast] = 0
    if sizes.sum() <= batch.MAX_BATCH_VALUES:
        return [fast]
    cuts, acc = [], 0
    for i in np.flatnonzero(fast).tolist():
        if acc + sizes[i] > batch.MAX_BATCH_VALUES and acc:
            cuts.append(i)
            acc = 0
        acc += int(sizes[i])
    bounds = [0, *cuts, len(fast)]
    idx = np.arange(len(fast))
    return [fast & (idx >= a) & (idx < b) for a, b in zip(bounds[:-1], bounds[1:])]


def _in_record_order(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """The rows of `batches` in record order (`_pos`), as the row form gives them:
    one batch, or where one would pass batch.MAX_BATCH_VALUES, slices of the batches."""
    pos = np.concatenate([numpy_of(b.column(0)) for b in batches])
    order = np.argsort(pos, kind="stable")
    held = max(sum(len(b.column(k).flatten()) for b in batches) for k in _LONGEST)
    if held <= batch.MAX_BATCH_VALUES:
        t = pa.Table.from_batches(batches).take(pa.array(order))
        return t.combine_chunks().to_batches()
    src = np.repeat(np.arange(len(batches)), [b.num_rows for b in batches])[order]
    at = np.concatenate([np.arange(b.num_rows) for b in batches])[order]
    cut = np.flatnonzero(src[1:] != src[:-1]) + 1  # each batch's rows are in order already
    firsts, ends = np.r_[0, cut], np.r_[cut, len(order)]
    return [batches[src[a]].slice(int(at[a]), int(b - a)) for a, b in zip(firsts.tolist(), ends.tolist())]


def _fast_batch(fast, base_pos, keep_text, sc: _Scalars, rls, removed, lists, f32, shape) -> pa.RecordBatch:
    rows = np.flatnonzero(fast)
    every = len(rows) == len(fast)
    sel = None if every else rows
    m = len(rows)
    tok = lists["tokens"]
    t_off, t_val = gather(tok.offsets, tok.values, sel)
    if t_val.dtype != np.int32:
        t_val = t_val.astype(np.int32)
    rl = rls[rows]
    # the loss mask: the row's own, all ones where null, all zeros for a removed sample
    m_off = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(rl, out=m_off[1:])
    mask = lists.get("loss_mask")
    own = (mask.present[rows] if mask is not None else np.zeros(m, bool)) & ~removed[rows]
    if own.all():
        src = gather(mask.offsets, mask.values, sel)[1]
        m_val = src.astype(np.uint8, copy=False)
        m_sum = src  # summed as they came (0 or 1): reduceat would widen the bytes again
    else:
        m_val = np.repeat((~own & ~removed[rows]).astype(np.uint8), rl)
        if own.any():
            src = np.flatnonzero(own)
            _, vals = gather(mask.offsets, mask.values, rows[src])
            dst_off = m_off[:-1][src]
            idx = np.repeat(dst_off - np.concatenate([[0], np.cumsum(rl[src])[:-1]]), rl[src]) + np.arange(len(vals))
            m_val[idx] = vals
        m_sum = m_val
    mask_total = row_sums(m_sum, m_off)
    cols = [
        pa.array(rows + base_pos, pa.int64()),
        sc.sample_index,
        sc.group_index,
        list_array(t_off, t_val, pa.int32()),
        pa.array(rl, pa.int32()),
        pa.array(np.diff(t_off), pa.int32()),
        list_array(m_off, m_val, pa.uint8()),
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
            cols.append(null_lists(m, pa.float32()))
            continue
        present = lst.present[rows]
        offs, vals = gather(lst.offsets, f32[k], sel)
        cols.append(list_array(offs, vals, pa.float32(), ~present))
    for k in ROW_LISTS:
        lst = lists.get(k)
        if lst is None or not lst.present[rows].any():
            cols.append(null_lists(m, pa.int32()))
            continue
        present = lst.present[rows]
        offs, vals = gather(lst.offsets, lst.values, sel)
        cols.append(list_array(offs, vals.astype(np.int32, copy=False), pa.int32(), ~present))
    ex = lists.get(EXPERTS)
    if ex is None or not ex.present[rows].any():
        cols.append(null_lists(m, pa.int32()))
    else:
        present = ex.present[rows]
        s_off = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(present * 3, out=s_off[1:])
        cols.append(list_array(s_off, shape[rows][present].reshape(-1).astype(np.int32), pa.int32(), ~present))
    cols += [sc.round_number, sc.source_name, sc.train_metadata, sc.mm, sc.mm_id, sc.images, sc.media_dropped, sc.weight_versions,
             *sc.text]
    return pa.RecordBatch.from_arrays(cols, schema=pre_schema(keep_text))
