"""Stage 2: validate and coerce samples into columnar Arrow batches.

`normalize_chunk` is the entry: every chunk goes through the columnar checks
(validate_columns.py); this module holds the rules for one record (`_validate`), which word
each problem and run only for a record that fails on columns. Every problem names the file, line/row/position, the field, and expected vs got. A record that
fails keeps a small summary (its explicit rollout id and group) so that ids are assigned over
all parsed samples and a rejection never shifts a sibling's id.
"""
from __future__ import annotations

import array
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from ..core.errors import Problem
from ..inputs.base import RawChunk
from ..inputs.columns import list_array
from ..core.schema import INT32_MAX, STATUSES

# id_state values
ID_MISSING, ID_EXPLICIT, ID_INVALID = 0, 1, 2

_STATUS_SET = frozenset(STATUSES)
# Arrow list offsets are int32: keep every list column of one batch below this many values.
_MAX_BATCH_VALUES = 1 << 30


class _Bad(Exception):
    def __init__(self, fld: str, message: str):
        self.field = fld
        self.message = message


def _tname(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, np.ndarray):
        return f"array of {v.dtype}"
    return type(v).__name__


def _got(v: Any) -> str:
    if v is None:
        return "null"
    r = repr(v)
    return f"{_tname(v)} {r[:60] + '...' if len(r) > 60 else r}"


def _is_int(v: Any) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, np.integer)


def _opt_int(rec: dict, key: str, fld: str | None = None) -> int | None:
    """A non-negative 64-bit integer or None (slime's counters never go below 0)."""
    v = rec.get(key)
    fld = fld or key
    if v is None:
        return None
    if not _is_int(v):
        raise _Bad(fld, f"expected a non-negative integer or null, got {_got(v)}")
    v = int(v)
    if not 0 <= v < 2**63:
        raise _Bad(fld, f"expected a non-negative 64-bit integer, got {v}")
    return v


def _number(fld: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        if isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind in "iuf":
            v = v.item()
        else:
            raise _Bad(fld, f"expected a number, got {_got(v)}")
    f = float(v)
    if not math.isfinite(f):
        raise _Bad(fld, f"expected a finite number, got {v}")
    return f


def _typed_list(v: list, lo: int, hi: int) -> np.ndarray | None:
    """Fast path for a JSON list of ints: a C-typed copy, or None when the exact checks below
    must decide (a float, string, null, nested or out-of-range item, or a leading bool)."""
    if type(v[0]) is bool:
        return None
    try:
        if lo >= 0 and hi <= 255:
            a = np.frombuffer(bytes(v), dtype=np.uint8)  # bytes() takes ints in [0, 256) only
            tmin, tmax = 0, 255
        elif lo >= -(2**31) and hi <= INT32_MAX:
            a = np.frombuffer(array.array("i", v), dtype=np.int32)
            tmin, tmax = -(2**31), INT32_MAX
        else:
            a = np.frombuffer(array.array("q", v), dtype=np.int64)
            tmin, tmax = -(2**63), 2**63 - 1
    except (TypeError, ValueError, OverflowError):
        return None
    # only the bounds the type does not already guarantee
    if (lo > tmin and int(a.min()) < lo) or (hi < tmax and int(a.max()) > hi):
        return None
    return a


def _int_array(fld: str, v: Any, lo: int, hi: int, *, allow_empty: bool = True) -> np.ndarray:
    if not isinstance(v, (list, np.ndarray)):
        raise _Bad(fld, f"expected a list of integers, got {_got(v)}")
    if len(v) == 0:
        if not allow_empty:
            raise _Bad(fld, "expected a non-empty list of integers, got []")
        return np.zeros(0, dtype=np.int64)
    if isinstance(v, list):
        a = _typed_list(v, lo, hi)
        if a is not None:
            return a
    try:
        a = np.asarray(v)
    except (ValueError, OverflowError) as e:
        raise _Bad(fld, f"expected a flat list of integers, got a ragged or oversized list ({e})") from None
    if a.ndim != 1:
        raise _Bad(fld, f"expected a flat list of integers, got {a.ndim}-D data")
    if a.dtype.kind not in "iu":
        bad = next((x for x in a.tolist() if not _is_int(x)), None) if a.dtype.kind == "O" else None
        kind = {"f": "float", "b": "bool", "U": "string", "O": "mixed"}.get(a.dtype.kind, str(a.dtype))
        raise _Bad(fld, f"expected integers, got {kind} values" + (f" (e.g. {_got(bad)})" if bad is not None else ""))
    mn, mx = int(a.min()), int(a.max())
    if mn < lo or mx > hi:
        raise _Bad(fld, f"expected values in [{lo}, {hi}], got {mn if mn < lo else mx}")
    return a


def _float_array(fld: str, v: Any, n: int) -> np.ndarray:
    if not isinstance(v, (list, np.ndarray)):
        raise _Bad(fld, f"expected a list of numbers, got {_got(v)}")
    if len(v) != n:
        raise _Bad(fld, f"expected length {n} (response_length), got {len(v)}")
    if n == 0:
        return np.zeros(0, dtype=np.float32)
    if isinstance(v, list):
        # fast path (numpy's type discovery is slow on float lists); like Python, it takes
        # bools as 0/1; anything else that is not a number falls through to the checks below
        try:
            a = np.fromiter(v, dtype=np.float64, count=n)
        except (TypeError, ValueError, OverflowError):
            pass
        else:
            return _finite32(fld, a)
    try:
        a = np.asarray(v)
    except (ValueError, OverflowError):
        raise _Bad(fld, "expected a flat list of numbers, got ragged data") from None
    if a.ndim != 1:
        raise _Bad(fld, "expected a flat list of numbers, got nested data")
    if a.dtype.kind not in "iuf":
        # the items as given: numpy turns a list that mixes numbers and text into all text
        at, bad = next(((i, x) for i, x in enumerate(v if isinstance(v, list) else a.tolist())
                        if not isinstance(x, (int, float, np.integer, np.floating))), (None, None))
        got = f"{_got(bad)} at position {at}" if at is not None else f"{a.dtype} data"
        raise _Bad(fld, f"expected a flat list of numbers, got {got}")
    return _finite32(fld, a)


def _finite32(fld: str, a: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # beyond float32 range becomes inf, reported just below
        a = a.astype(np.float32)
    if not np.isfinite(a).all():
        bad = int(np.flatnonzero(~np.isfinite(a))[0])
        raise _Bad(fld, f"expected finite numbers, got {a[bad]} at position {bad}")
    return a


def _json_text(fld: str, v: Any) -> str | None:
    if v is None:
        return None
    try:
        return orjson.dumps(v, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    except TypeError as e:
        raise _Bad(fld, f"expected JSON-serialisable data, got {e}") from None


def _text(fld: str, v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    try:
        return orjson.dumps(v, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()
    except TypeError as e:
        raise _Bad(fld, f"expected text or JSON-serialisable data (--keep-text), got {_got(v)}: {e}") from None


def select_reward(v: Any, reward_key: str | None, fld: str = "reward") -> float:
    """slime's get_reward_value: the reward, or reward[reward_key]; always a finite number."""
    if reward_key:
        if not isinstance(v, dict):
            raise _Bad(fld, f"expected a dict with key {reward_key!r} (--reward-key), got {_got(v)}")
        if reward_key not in v:
            raise _Bad(fld, f"expected key {reward_key!r} (--reward-key), got keys {sorted(map(str, v))}")
        return _number(f"{fld}.{reward_key}", v[reward_key])
    if isinstance(v, dict):
        raise _Bad(fld, f"expected a number, got a dict with keys {sorted(map(str, v))}; pass --reward-key to pick one")
    return _number(fld, v)


@dataclass
class _Row:
    sample_index: int | None
    group_index: int | None
    tokens: np.ndarray
    response_length: int
    loss_mask: np.ndarray
    remove_sample: bool
    reward_value: float
    raw_reward: float
    status: str
    lp: np.ndarray | None
    tlp: np.ndarray | None
    tp_ids: np.ndarray | None
    tp_off: np.ndarray | None
    rexp: np.ndarray | None
    round_number: int | None
    source_name: str
    train_metadata: str | None
    mm: str | None
    text: tuple | None


def _ids(rec: dict) -> tuple[int | None, int | None]:
    return _opt_int(rec, "index"), _opt_int(rec, "group_index")


def _tokens(rec: dict) -> np.ndarray:
    if "tokens" not in rec:
        raise _Bad("tokens", "missing")
    return _int_array("tokens", rec["tokens"], 0, INT32_MAX, allow_empty=False)


def _response_length(rec: dict) -> int:
    rl = rec.get("response_length")
    if not _is_int(rl):
        raise _Bad("response_length", f"expected an integer, got {_got(rl)}" if "response_length" in rec else "missing")
    return int(rl)


def _check_response_length(rl: int, n_tok: int) -> None:
    if not 0 <= rl <= n_tok:
        raise _Bad("response_length", f"expected 0 <= response_length <= len(tokens) = {n_tok}, got {rl}")


def _loss_mask(rec: dict, rl: int) -> np.ndarray:
    """The mask (all ones when null); zeros for a removed sample, whose mask is still checked."""
    lm = rec.get("loss_mask")
    if lm is None:
        mask = np.ones(rl, dtype=np.uint8)
    else:
        if not isinstance(lm, (list, np.ndarray)):
            raise _Bad("loss_mask", f"expected a list of 0/1 or null, got {_got(lm)}")
        if len(lm) != rl:
            raise _Bad("loss_mask", f"expected length {rl} (response_length), got {len(lm)}")
        mask = _int_array("loss_mask", lm, 0, 1).astype(np.uint8, copy=False) if rl else np.zeros(0, dtype=np.uint8)
    if _remove_sample(rec):
        mask = np.zeros(rl, dtype=np.uint8)
    return mask


def _remove_sample(rec: dict) -> bool:
    rs = rec.get("remove_sample", False)
    if not isinstance(rs, (bool, np.bool_)) and rs is not None:
        raise _Bad("remove_sample", f"expected true/false, got {_got(rs)}")
    return bool(rs)


def _status(rec: dict) -> str:
    if "status" not in rec:
        raise _Bad("status", "missing")
    status = rec["status"]
    if not isinstance(status, str) or status not in _STATUS_SET:
        raise _Bad("status", f"expected one of {', '.join(STATUSES)}, got {_got(status)}")
    return status


def _rewards_and_metadata(rec: dict, reward_key: str | None) -> tuple[float, float, int | None, str]:
    """(reward value, raw reward, round number, source name)."""
    if "reward" not in rec:
        raise _Bad("reward", "missing")
    reward_value = select_reward(rec["reward"], reward_key)
    md = rec.get("metadata")
    if md is not None and not isinstance(md, dict):
        raise _Bad("metadata", f"expected a dict or null, got {_got(md)}")
    md = md or {}
    if md.get("raw_reward") is not None:  # null (e.g. a Parquet struct row without the key) = absent
        rr = md["raw_reward"]
        raw_reward = select_reward(rr, reward_key, "metadata.raw_reward") if isinstance(rr, dict) else _number("metadata.raw_reward", rr)
    else:
        raw_reward = reward_value
    round_number = _opt_int(md, "round_number", "metadata.round_number")
    src = rec.get("source")
    if isinstance(src, str) and src:
        source_name = src
    else:
        sn = md.get("source_name")
        source_name = sn if isinstance(sn, str) and sn else "unknown"
    return reward_value, raw_reward, round_number, source_name


def _log_probs(rec: dict, key: str, rl: int) -> np.ndarray | None:
    lp = rec.get(key)
    return None if lp is None else _float_array(key, lp, rl)


def _top_p(rec: dict, rl: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    tp_ids, tp_off = rec.get("rollout_top_p_token_ids"), rec.get("rollout_top_p_token_offsets")
    if (tp_ids is None) != (tp_off is None):
        missing = "rollout_top_p_token_offsets" if tp_off is None else "rollout_top_p_token_ids"
        raise _Bad(missing, "expected both top-p fields or neither, got only the other one")
    if tp_ids is not None:
        tp_ids = _int_array("rollout_top_p_token_ids", tp_ids, 0, INT32_MAX)
        tp_off = _int_array("rollout_top_p_token_offsets", tp_off, 0, INT32_MAX)
        if len(tp_off) != rl + 1:
            raise _Bad("rollout_top_p_token_offsets", f"expected length response_length + 1 = {rl + 1}, got {len(tp_off)}")
        if tp_off[0] != 0 or tp_off[-1] != len(tp_ids) or (np.diff(tp_off) < 0).any():
            raise _Bad(
                "rollout_top_p_token_offsets",
                f"expected non-decreasing offsets from 0 to len(rollout_top_p_token_ids) = {len(tp_ids)}, got {int(tp_off[0])}..{int(tp_off[-1])}",
            )
    return tp_ids, tp_off


def _routed_experts(rec: dict, n_tok: int) -> np.ndarray | None:
    rexp = rec.get("rollout_routed_experts")
    if rexp is None:
        return None
    try:
        a = np.asarray(rexp)
    except (ValueError, OverflowError):
        raise _Bad("rollout_routed_experts", "expected a [len(tokens)-1, layers, topk] integer array, got ragged data") from None
    if a.ndim != 3 or (a.size and a.dtype.kind not in "iu"):
        raise _Bad("rollout_routed_experts", f"expected a [len(tokens)-1, layers, topk] integer array, got shape {list(a.shape)} of {a.dtype}")
    if a.shape[0] != n_tok - 1:
        raise _Bad("rollout_routed_experts", f"expected {n_tok - 1} rows (len(tokens)-1), got {a.shape[0]}")
    if a.size and (int(a.min()) < 0 or int(a.max()) > INT32_MAX):
        raise _Bad("rollout_routed_experts", "expected expert ids in int32 range")
    return a


def _json_fields(rec: dict, keep_text: bool) -> tuple[str | None, str | None, tuple | None]:
    """(train_metadata, multimodal_train_inputs) as JSON text, and the kept text fields."""
    tm = rec.get("train_metadata")
    if tm is not None and not isinstance(tm, dict):
        raise _Bad("train_metadata", f"expected a dict or null, got {_got(tm)}")
    train_metadata = _json_text("train_metadata", tm)
    mm = _json_text("multimodal_train_inputs", rec.get("multimodal_train_inputs"))
    text = None
    if keep_text:
        text = (_text("prompt", rec.get("prompt")), _text("response", rec.get("response")), _text("label", rec.get("label")))
    return train_metadata, mm, text


def _validate(rec: dict, reward_key: str | None, keep_text: bool) -> _Row:
    """One sample's row, its fields checked in a fixed order (the first problem is reported)."""
    sample_index, group_index = _ids(rec)
    tokens = _tokens(rec)
    rl = _response_length(rec)
    _check_response_length(rl, len(tokens))
    mask = _loss_mask(rec, rl)
    removed = _remove_sample(rec)
    status = _status(rec)
    reward_value, raw_reward, round_number, source_name = _rewards_and_metadata(rec, reward_key)
    lp = _log_probs(rec, "rollout_log_probs", rl)
    tlp = _log_probs(rec, "teacher_log_probs", rl)
    tp_ids, tp_off = _top_p(rec, rl)
    rexp = _routed_experts(rec, len(tokens))
    train_metadata, mm, text = _json_fields(rec, keep_text)
    return _Row(
        sample_index, group_index, tokens, rl, mask, removed, reward_value, raw_reward, status, lp, tlp, tp_ids, tp_off,
        rexp, round_number, source_name, train_metadata, mm, text,
    )


def parse_rollout_id(v: Any) -> tuple[int, int | None]:
    """(state, value): explicit ids must be integers, never bool, float or string."""
    if v is None:
        return ID_MISSING, None
    if _is_int(v) and -(2**63) <= int(v) < 2**63:
        return ID_EXPLICIT, int(v)
    return ID_INVALID, None


@dataclass
class NormChunk:
    """One RawChunk after validation.

    Summary lists have one entry per record (valid or not); `batches` hold the valid records'
    columns in order, with `_pos` giving each row's record position in the unit.
    """

    source: str
    kind: str
    numbers: list[int]
    id_state: list[int]
    explicit_id: list[int | None]
    group_index: list[int | None]
    valid: list[bool]
    problems: list[tuple[int, Problem]] = field(default_factory=list)
    batches: list[pa.RecordBatch] = field(default_factory=list)


def _row_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each row's sum of its list's values (0 for an empty list)."""
    out = np.zeros(len(offsets) - 1, dtype=np.int64)
    filled = offsets[1:] > offsets[:-1]
    if filled.any():  # reduceat sums from each listed start to the next: empty rows are left out
        out[filled] = np.add.reduceat(values, offsets[:-1][filled], dtype=np.int64)
    return out


PRE_FIELDS = [
    pa.field("_pos", pa.int64()),
    pa.field("sample_index", pa.int64()),
    pa.field("group_index", pa.int64()),
    pa.field("tokens", pa.list_(pa.int32())),
    pa.field("response_length", pa.int32()),
    pa.field("total_length", pa.int32()),
    pa.field("loss_mask", pa.list_(pa.uint8())),
    pa.field("remove_sample", pa.bool_()),
    pa.field("_reward_value", pa.float64()),
    pa.field("raw_reward", pa.float64()),
    pa.field("truncated", pa.bool_()),
    pa.field("status", pa.string()),
    pa.field("_mask_total", pa.int64()),
    pa.field("rollout_log_probs", pa.list_(pa.float32())),
    pa.field("teacher_log_probs", pa.list_(pa.float32())),
    pa.field("rollout_top_p_token_ids", pa.list_(pa.int32())),
    pa.field("rollout_top_p_token_offsets", pa.list_(pa.int32())),
    pa.field("rollout_routed_experts", pa.list_(pa.int32())),
    pa.field("rollout_routed_experts_shape", pa.list_(pa.int32())),
    pa.field("round_number", pa.int64()),
    pa.field("source_name", pa.string()),
    pa.field("train_metadata", pa.string()),
    pa.field("multimodal_train_inputs", pa.string()),
]
TEXT_PRE_FIELDS = [pa.field("prompt", pa.string()), pa.field("response", pa.string()), pa.field("label", pa.string())]


def pre_schema(keep_text: bool) -> pa.Schema:
    return pa.schema(PRE_FIELDS + (TEXT_PRE_FIELDS if keep_text else []))


def _build(rows: list[_Row], pos: list[int], keep_text: bool) -> pa.RecordBatch:
    """The validated rows as a batch."""
    rexp_flat = [None if r.rexp is None else r.rexp.reshape(-1) for r in rows]
    rexp_shape = [None if r.rexp is None else np.asarray(r.rexp.shape, dtype=np.int32) for r in rows]
    tokens, _, _ = list_array([r.tokens for r in rows], np.int32)
    mask, mask_offsets, mask_values = list_array([r.loss_mask for r in rows], np.uint8)
    cols = [
        pa.array(pos, pa.int64()),
        pa.array([r.sample_index for r in rows], pa.int64()),
        pa.array([r.group_index for r in rows], pa.int64()),
        tokens,
        pa.array([r.response_length for r in rows], pa.int32()),
        pa.array([len(r.tokens) for r in rows], pa.int32()),
        mask,
        pa.array([r.remove_sample for r in rows], pa.bool_()),
        pa.array([r.reward_value for r in rows], pa.float64()),
        pa.array([r.raw_reward for r in rows], pa.float64()),
        pa.array([r.status == "truncated" for r in rows], pa.bool_()),
        pa.array([r.status for r in rows], pa.string()),
        pa.array(_row_sums(mask_values, mask_offsets), pa.int64()),
        list_array([r.lp for r in rows], np.float32)[0],
        list_array([r.tlp for r in rows], np.float32)[0],
        list_array([r.tp_ids for r in rows], np.int32)[0],
        list_array([r.tp_off for r in rows], np.int32)[0],
        list_array(rexp_flat, np.int32)[0],
        list_array(rexp_shape, np.int32)[0],
        pa.array([r.round_number for r in rows], pa.int64()),
        pa.array([r.source_name for r in rows], pa.string()),
        pa.array([r.train_metadata for r in rows], pa.string()),
        pa.array([r.mm for r in rows], pa.string()),
    ]
    if keep_text:
        for k in range(3):
            cols.append(pa.array([r.text[k] for r in rows], pa.string()))
    return pa.RecordBatch.from_arrays(cols, schema=pre_schema(keep_text))


def _row_values(r: _Row) -> int:
    return max(len(r.tokens), 0 if r.rexp is None else r.rexp.size, 0 if r.tp_ids is None else len(r.tp_ids))


def normalize_chunk(chunk: RawChunk, base_pos: int, *, reward_key: str | None, keep_text: bool,
                    step: int | None = None, arena=None) -> NormChunk:
    """Validate one chunk; `base_pos` is the position of its first record in the unit. With
    `step`, a record's own `step` field must be that step. With `arena` (pipeline/arena.py),
    the valid rows' long lists are cast into their place in the step's buffers."""
    from ..inputs.columns import columnar
    from .validate_columns import normalize_columns

    return normalize_columns(columnar(chunk), base_pos, reward_key=reward_key, keep_text=keep_text, step=step,
                             arena=arena)


def _prelude(out: NormChunk, chunk: RawChunk, i: int, rec: dict | None, step: int | None) -> bool:
    """The per-record summary (id state, explicit id, group); False, with the problem recorded,
    when the record cannot be a row: unparseable, an invalid rollout id, or another step's."""
    if rec is None:  # unparseable: it still holds its place (one fill id), so fixing it shifts no id
        out.problems.append((i, chunk.problems[i]))
        return False
    state, value = parse_rollout_id(rec.get("rollout_id"))
    out.id_state[i], out.explicit_id[i] = state, value
    gi = rec.get("group_index")
    if _is_int(gi):
        out.group_index[i] = int(gi)
    if state == ID_INVALID:
        out.problems.append(
            (i, Problem(chunk.location(i), "rollout_id", f"expected an integer or null, got {_got(rec.get('rollout_id'))}"))
        )
        return False
    if step is not None and rec.get("step") is not None and (not _is_int(rec["step"]) or int(rec["step"]) != step):
        out.problems.append((i, Problem(chunk.location(i), "step", f"expected {step} (this file's step), got {_got(rec['step'])}")))
        return False
    return True


def empty_norm(chunk: RawChunk) -> NormChunk:
    n = len(chunk)
    return NormChunk(chunk.source, chunk.kind, chunk.numbers, [ID_MISSING] * n, [None] * n, [None] * n, [False] * n)


def normalize_rows(chunk: RawChunk, base_pos: int, reward_key: str | None, keep_text: bool,
                   step: int | None) -> NormChunk:
    """Validate a row-form chunk record by record (the columnar path's fallback)."""
    out = empty_norm(chunk)
    rows: list[_Row] = []
    pos: list[int] = []
    for i, rec in enumerate(chunk.records):
        if not _prelude(out, chunk, i, rec, step):
            continue
        try:
            row = _validate(rec, reward_key, keep_text)
        except _Bad as e:
            out.problems.append((i, Problem(chunk.location(i), e.field, e.message)))
            continue
        out.valid[i] = True
        rows.append(row)
        pos.append(base_pos + i)
    out.batches.extend(build_batches(rows, pos, keep_text))
    return out


def build_batches(rows: list[_Row], pos: list[int], keep_text: bool) -> list[pa.RecordBatch]:
    """Validated rows as batches, each list column below _MAX_BATCH_VALUES values."""
    batches = []
    start, acc = 0, 0
    for k, r in enumerate(rows):
        v = _row_values(r)
        if acc + v > _MAX_BATCH_VALUES and k > start:
            batches.append(_build(rows[start:k], pos[start:k], keep_text))
            start, acc = k, 0
        acc += v
    if start < len(rows):
        batches.append(_build(rows[start:], pos[start:], keep_text))
    return batches
