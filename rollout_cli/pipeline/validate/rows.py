"""The rules for one record, and the row form that words every problem.

Each rule reads one field (or a few that belong together) of a record dict and gives its
value, or raises `Bad(field, message, rule)`: the field it names, the message (expected vs
got) and the rule's short stable id (`<field>.<check>`, e.g. `loss_mask.length`), which the
problem carries to the rejects report and inspect's anomalies. `validate_record` applies the
rules in a fixed order; `normalize_rows` validates a chunk record by record. The column engine
(columns.py) checks whole chunks against the same limits (below) and sends any row that fails
there through `validate_record`, so a problem has one wording, whatever the input's form.

A record that fails keeps a small summary (its explicit rollout id and group) so that ids are
assigned over all parsed samples and a rejection never shifts a sibling's id.
"""
from __future__ import annotations

import array
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from ...core import tensors
from ...core.errors import Problem
from ...core.schema import INT32_MAX, STATUSES
from ...inputs.base import RawChunk
from ...inputs.columns import list_array
from . import batch, media
from .batch import ID_EXPLICIT, ID_INVALID, ID_MISSING, NormChunk, empty_norm, pre_schema, row_sums

# The limits of the rules, owned here and read by both forms (columns.py checks whole chunks
# against them, and words a failure through the rules below).
STATUS_SET = frozenset(STATUSES)
TOKEN_RANGE = (0, INT32_MAX)  # token ids, top-p ids and offsets, routed expert ids
MASK_RANGE = (0, 1)  # loss-mask entries
COUNTER_MAX = 2**63 - 1  # index, group_index, metadata.round_number: 0..COUNTER_MAX (slime's counters)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # rollout_id, step: 64-bit integers
UNKNOWN_SOURCE = "unknown"  # source_name where neither `source` nor metadata.source_name names one
LOG_PROBS = ("rollout_log_probs", "teacher_log_probs")
TOP_P = ("rollout_top_p_token_ids", "rollout_top_p_token_offsets")
EXPERTS = "rollout_routed_experts"


class Bad(Exception):
    """A record's field breaks a rule: the field, the message, the rule id."""

    def __init__(self, fld: str, message: str, rule: str):
        self.field = fld
        self.message = message
        self.rule = rule


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
        raise Bad(fld, f"expected a non-negative integer or null, got {_got(v)}", f"{fld}.type")
    v = int(v)
    if not 0 <= v <= COUNTER_MAX:
        raise Bad(fld, f"expected a non-negative 64-bit integer, got {v}", f"{fld}.range")
    return v


def _number(fld: str, v: Any, rule: str | None = None) -> float:
    """A finite number; its problems' rule ids are `<rule>.type` and `<rule>.finite` (rule:
    the field by default)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        if isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind in "iuf":
            v = v.item()
        else:
            raise Bad(fld, f"expected a number, got {_got(v)}", f"{rule or fld}.type")
    f = float(v)
    if not math.isfinite(f):
        raise Bad(fld, f"expected a finite number, got {v}", f"{rule or fld}.finite")
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
            tmin, tmax = INT64_MIN, INT64_MAX
    except (TypeError, ValueError, OverflowError):
        return None
    # only the bounds the type does not already guarantee
    if (lo > tmin and int(a.min()) < lo) or (hi < tmax and int(a.max()) > hi):
        return None
    return a


def _int_array(fld: str, v: Any, lo: int, hi: int, *, allow_empty: bool = True) -> np.ndarray:
    if not isinstance(v, (list, np.ndarray)):
        raise Bad(fld, f"expected a list of integers, got {_got(v)}", f"{fld}.type")
    if len(v) == 0:
        if not allow_empty:
            raise Bad(fld, "expected a non-empty list of integers, got []", f"{fld}.empty")
        return np.zeros(0, dtype=np.int64)
    if isinstance(v, list):
        a = _typed_list(v, lo, hi)
        if a is not None:
            return a
    try:
        a = np.asarray(v)
    except (ValueError, OverflowError) as e:
        raise Bad(fld, f"expected a flat list of integers, got a ragged or oversized list ({e})", f"{fld}.type") from None
    if a.ndim != 1:
        raise Bad(fld, f"expected a flat list of integers, got {a.ndim}-D data", f"{fld}.type")
    if a.dtype.kind not in "iu":
        bad = next((x for x in a.tolist() if not _is_int(x)), None) if a.dtype.kind == "O" else None
        kind = {"f": "float", "b": "bool", "U": "string", "O": "mixed"}.get(a.dtype.kind, str(a.dtype))
        raise Bad(fld, f"expected integers, got {kind} values" + (f" (e.g. {_got(bad)})" if bad is not None else ""),
                  f"{fld}.type")
    mn, mx = int(a.min()), int(a.max())
    if mn < lo or mx > hi:
        raise Bad(fld, f"expected values in [{lo}, {hi}], got {mn if mn < lo else mx}", f"{fld}.range")
    return a


def _float_array(fld: str, v: Any, n: int) -> np.ndarray:
    if not isinstance(v, (list, np.ndarray)):
        raise Bad(fld, f"expected a list of numbers, got {_got(v)}", f"{fld}.type")
    if len(v) != n:
        raise Bad(fld, f"expected length {n} (response_length), got {len(v)}", f"{fld}.length")
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
        raise Bad(fld, "expected a flat list of numbers, got ragged data", f"{fld}.type") from None
    if a.ndim != 1:
        raise Bad(fld, "expected a flat list of numbers, got nested data", f"{fld}.type")
    if a.dtype.kind not in "iuf":
        # the items as given: numpy turns a list that mixes numbers and text into all text
        at, bad = next(((i, x) for i, x in enumerate(v if isinstance(v, list) else a.tolist())
                        if not isinstance(x, (int, float, np.integer, np.floating))), (None, None))
        got = f"{_got(bad)} at position {at}" if at is not None else f"{a.dtype} data"
        raise Bad(fld, f"expected a flat list of numbers, got {got}", f"{fld}.type")
    return _finite32(fld, a)


def _finite32(fld: str, a: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # beyond float32 range becomes inf, reported just below
        a = a.astype(np.float32)
    if not np.isfinite(a).all():
        bad = int(np.flatnonzero(~np.isfinite(a))[0])
        raise Bad(fld, f"expected finite numbers, got {a[bad]} at position {bad}", f"{fld}.finite")
    return a


def _json_text(fld: str, v: Any) -> str | None:
    if v is None:
        return None
    try:
        return orjson.dumps(v, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    except TypeError as e:
        raise Bad(fld, f"expected JSON-serialisable data, got {e}", f"{fld}.json") from None


def _text(fld: str, v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    try:
        return orjson.dumps(v, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()
    except TypeError as e:
        raise Bad(fld, f"expected text or JSON-serialisable data (--keep-text), got {_got(v)}: {e}",
                  f"{fld}.json") from None


def select_reward(v: Any, reward_key: str | None, fld: str = "reward") -> float:
    """slime's get_reward_value: the reward, or reward[reward_key]; always a finite number."""
    if reward_key:
        if not isinstance(v, dict):
            raise Bad(fld, f"expected a dict with key {reward_key!r} (--reward-key), got {_got(v)}", f"{fld}.type")
        if reward_key not in v:
            raise Bad(fld, f"expected key {reward_key!r} (--reward-key), got keys {sorted(map(str, v))}", f"{fld}.key")
        return _number(f"{fld}.{reward_key}", v[reward_key], fld)
    if isinstance(v, dict):
        raise Bad(fld, f"expected a number, got a dict with keys {sorted(map(str, v))}; pass --reward-key to pick one",
                  f"{fld}.type")
    return _number(fld, v)


@dataclass
class Row:
    sample_index: int | None
    group_index: int | None
    tokens: np.ndarray
    response_length: int
    loss_mask: np.ndarray
    remove_sample: bool
    reward_value: float | None  # None: not recorded (a format with rewards_recorded=False)
    raw_reward: float | None
    status: str
    lp: np.ndarray | None
    tlp: np.ndarray | None
    tp_ids: np.ndarray | None
    tp_off: np.ndarray | None
    rexp: np.ndarray | None
    round_number: int | None
    source_name: str
    train_metadata: str | None
    mm: list | None  # core/tensors.encode's entries
    text: tuple | None
    weight_versions: list | None = None
    mm_id: str | None = None
    images: list | None = None  # validate/media.py's entries
    media_dropped: int = 0


def check_ids(rec: dict) -> tuple[int | None, int | None]:
    return _opt_int(rec, "index"), _opt_int(rec, "group_index")


def _tokens(rec: dict) -> np.ndarray:
    if "tokens" not in rec:
        raise Bad("tokens", "missing", "tokens.missing")
    return _int_array("tokens", rec["tokens"], *TOKEN_RANGE, allow_empty=False)


def check_response_length(rec: dict) -> int:
    rl = rec.get("response_length")
    if not _is_int(rl):
        if "response_length" not in rec:
            raise Bad("response_length", "missing", "response_length.missing")
        raise Bad("response_length", f"expected an integer, got {_got(rl)}", "response_length.type")
    return int(rl)


def _check_response_length(rl: int, n_tok: int) -> None:
    if not 0 <= rl <= n_tok:
        raise Bad("response_length", f"expected 0 <= response_length <= len(tokens) = {n_tok}, got {rl}",
                  "response_length.range")


def _loss_mask(rec: dict, rl: int) -> np.ndarray:
    """The mask (all ones when null); zeros for a removed sample, whose mask is still checked."""
    lm = rec.get("loss_mask")
    if lm is None:
        mask = np.ones(rl, dtype=np.uint8)
    else:
        if not isinstance(lm, (list, np.ndarray)):
            raise Bad("loss_mask", f"expected a list of 0/1 or null, got {_got(lm)}", "loss_mask.type")
        if len(lm) != rl:
            raise Bad("loss_mask", f"expected length {rl} (response_length), got {len(lm)}", "loss_mask.length")
        mask = _int_array("loss_mask", lm, *MASK_RANGE).astype(np.uint8, copy=False) if rl else np.zeros(0, dtype=np.uint8)
    if check_remove_sample(rec):
        mask = np.zeros(rl, dtype=np.uint8)
    return mask


def check_remove_sample(rec: dict) -> bool:
    rs = rec.get("remove_sample", False)
    if not isinstance(rs, (bool, np.bool_)) and rs is not None:
        raise Bad("remove_sample", f"expected true/false, got {_got(rs)}", "remove_sample.type")
    return bool(rs)


def check_status(rec: dict) -> str:
    if "status" not in rec:
        raise Bad("status", "missing", "status.missing")
    status = rec["status"]
    if not isinstance(status, str) or status not in STATUS_SET:
        raise Bad("status", f"expected one of {', '.join(STATUSES)}, got {_got(status)}", "status.unknown")
    return status


def check_rewards(rec: dict, reward_key: str | None,
                  rewards_recorded: bool = True) -> tuple[float | None, float | None, int | None, str]:
    """(reward value, raw reward, round number, source name). With `rewards_recorded` False
    (the format's, inputs/format.py) a reward that is None or absent is not recorded: the
    reward value is None, and so is the raw reward unless metadata.raw_reward gives one."""
    if not rewards_recorded and rec.get("reward") is None:
        reward_value = None
    elif "reward" not in rec:
        raise Bad("reward", "missing", "reward.missing")
    else:
        reward_value = select_reward(rec["reward"], reward_key)
    md = rec.get("metadata")
    if md is not None and not isinstance(md, dict):
        raise Bad("metadata", f"expected a dict or null, got {_got(md)}", "metadata.type")
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
        source_name = sn if isinstance(sn, str) and sn else UNKNOWN_SOURCE
    return reward_value, raw_reward, round_number, source_name


def check_weight_versions(rec: dict) -> list[str] | None:
    """The sample's policy versions, one per generation call, as strings; None where it records
    none (absent, null or an empty list)."""
    wv = rec.get("weight_versions")
    if wv is None:
        return None
    if not isinstance(wv, (list, tuple, np.ndarray)):
        raise Bad("weight_versions", f"expected a list of strings or null, got {_got(wv)}", "weight_versions.type")
    bad = next((v for v in wv if not isinstance(v, str)), None)
    if bad is not None:
        raise Bad("weight_versions", f"expected a list of strings, got an entry {_got(bad)}", "weight_versions.type")
    return [str(v) for v in wv] or None


def _log_probs(rec: dict, key: str, rl: int) -> np.ndarray | None:
    lp = rec.get(key)
    return None if lp is None else _float_array(key, lp, rl)


def _top_p(rec: dict, rl: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    ids_key, off_key = TOP_P
    tp_ids, tp_off = rec.get(ids_key), rec.get(off_key)
    if (tp_ids is None) != (tp_off is None):
        missing = off_key if tp_off is None else ids_key
        raise Bad(missing, "expected both top-p fields or neither, got only the other one", f"{missing}.pair")
    if tp_ids is not None:
        tp_ids = _int_array(ids_key, tp_ids, *TOKEN_RANGE)
        tp_off = _int_array(off_key, tp_off, *TOKEN_RANGE)
        if len(tp_off) != rl + 1:
            raise Bad(off_key, f"expected length response_length + 1 = {rl + 1}, got {len(tp_off)}", f"{off_key}.length")
        if tp_off[0] != 0 or tp_off[-1] != len(tp_ids) or (np.diff(tp_off) < 0).any():
            raise Bad(
                off_key,
                f"expected non-decreasing offsets from 0 to len(rollout_top_p_token_ids) = {len(tp_ids)}, got {int(tp_off[0])}..{int(tp_off[-1])}",
                f"{off_key}.order",
            )
    return tp_ids, tp_off


def _routed_experts(rec: dict, n_tok: int) -> np.ndarray | None:
    rexp = rec.get(EXPERTS)
    if rexp is None:
        return None
    try:
        a = np.asarray(rexp)
    except (ValueError, OverflowError):
        raise Bad(EXPERTS, "expected a [len(tokens)-1, layers, topk] integer array, got ragged data", f"{EXPERTS}.shape") from None
    if a.ndim != 3 or (a.size and a.dtype.kind not in "iu"):
        raise Bad(EXPERTS, f"expected a [len(tokens)-1, layers, topk] integer array, got shape {list(a.shape)} of {a.dtype}",
                  f"{EXPERTS}.shape")
    if a.shape[0] != n_tok - 1:
        raise Bad(EXPERTS, f"expected {n_tok - 1} rows (len(tokens)-1), got {a.shape[0]}", f"{EXPERTS}.length")
    lo, hi = TOKEN_RANGE
    if a.size and (int(a.min()) < lo or int(a.max()) > hi):
        raise Bad(EXPERTS, "expected expert ids in int32 range", f"{EXPERTS}.range")
    return a


def check_json_fields(rec: dict, keep_text: bool) -> tuple[str | None, list | None, tuple | None, tuple]:
    """train_metadata as JSON text, multimodal_train_inputs as its column's entries
    (core/tensors.py), the kept text fields, and (multimodal_train_input_id, the images column's
    entries, the count of images and videos not kept: validate/media.py)."""
    tm = rec.get("train_metadata")
    if tm is not None and not isinstance(tm, dict):
        raise Bad("train_metadata", f"expected a dict or null, got {_got(tm)}", "train_metadata.type")
    train_metadata = _json_text("train_metadata", tm)
    try:
        mm = tensors.encode(rec.get("multimodal_train_inputs"))
    except ValueError as e:
        raise Bad("multimodal_train_inputs", str(e), "multimodal_train_inputs.type") from None
    mm_id = rec.get("multimodal_train_input_id")
    if mm_id is not None and not isinstance(mm_id, str):
        raise Bad("multimodal_train_input_id", f"expected a string or null, got {_got(mm_id)}",
                  "multimodal_train_input_id.type")
    mi = rec.get("multimodal_inputs")
    if mi is not None and not isinstance(mi, dict):
        raise Bad("multimodal_inputs", f"expected a dict or null, got {_got(mi)}", "multimodal_inputs.type")
    images, dropped, _ = media.encode_images(mi)
    text = None
    if keep_text:
        text = (_text("prompt", rec.get("prompt")), _text("response", rec.get("response")), _text("label", rec.get("label")))
    return train_metadata, mm, text, (mm_id, images, dropped)


def validate_record(rec: dict, reward_key: str | None, keep_text: bool, rewards_recorded: bool = True) -> Row:
    """One sample's row, its fields checked in a fixed order (the first problem is reported)."""
    sample_index, group_index = check_ids(rec)
    tokens = _tokens(rec)
    rl = check_response_length(rec)
    _check_response_length(rl, len(tokens))
    mask = _loss_mask(rec, rl)
    removed = check_remove_sample(rec)
    status = check_status(rec)
    reward_value, raw_reward, round_number, source_name = check_rewards(rec, reward_key, rewards_recorded)
    lp = _log_probs(rec, LOG_PROBS[0], rl)
    tlp = _log_probs(rec, LOG_PROBS[1], rl)
    tp_ids, tp_off = _top_p(rec, rl)
    rexp = _routed_experts(rec, len(tokens))
    train_metadata, mm, text, media_fields = check_json_fields(rec, keep_text)
    wv = check_weight_versions(rec)
    return Row(
        sample_index, group_index, tokens, rl, mask, removed, reward_value, raw_reward, status, lp, tlp, tp_ids, tp_off,
        rexp, round_number, source_name, train_metadata, mm, text, wv, *media_fields,
    )


def parse_rollout_id(v: Any) -> tuple[int, int | None]:
    """(state, value): explicit ids must be integers, never bool, float or string."""
    if v is None:
        return ID_MISSING, None
    if _is_int(v) and INT64_MIN <= int(v) < 2**63:
        return ID_EXPLICIT, int(v)
    return ID_INVALID, None


def _build(rows: list[Row], pos: list[int], keep_text: bool) -> pa.RecordBatch:
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
        pa.array(row_sums(mask_values, mask_offsets), pa.int64()),
        list_array([r.lp for r in rows], np.float32)[0],
        list_array([r.tlp for r in rows], np.float32)[0],
        list_array([r.tp_ids for r in rows], np.int32)[0],
        list_array([r.tp_off for r in rows], np.int32)[0],
        list_array(rexp_flat, np.int32)[0],
        list_array(rexp_shape, np.int32)[0],
        pa.array([r.round_number for r in rows], pa.int64()),
        pa.array([r.source_name for r in rows], pa.string()),
        pa.array([r.train_metadata for r in rows], pa.string()),
        tensors.entries_array([r.mm for r in rows]),
        pa.array([r.mm_id for r in rows], pa.string()),
        pa.array([r.images for r in rows], tensors.IMAGES_TYPE),
        pa.array([r.media_dropped for r in rows], pa.int32()),
        pa.array([r.weight_versions for r in rows], batch.WEIGHT_VERSIONS),
    ]
    if keep_text:
        for k in range(3):
            cols.append(pa.array([r.text[k] for r in rows], pa.string()))
    return pa.RecordBatch.from_arrays(cols, schema=pre_schema(keep_text))


def _row_values(r: Row) -> int:
    return max(len(r.tokens), 0 if r.rexp is None else r.rexp.size, 0 if r.tp_ids is None else len(r.tp_ids))


def check_prelude(out: NormChunk, chunk: RawChunk, i: int, rec: dict | None, step: int | None) -> bool:
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
            (i, Problem(chunk.location(i), "rollout_id", f"expected an integer or null, got {_got(rec.get('rollout_id'))}",
                        "rollout_id.type"))
        )
        return False
    if step is not None and rec.get("step") is not None and (not _is_int(rec["step"]) or int(rec["step"]) != step):
        out.problems.append((i, Problem(chunk.location(i), "step", f"expected {step} (this file's step), got {_got(rec['step'])}",
                                        "step.mismatch")))
        return False
    return True


def validate_into(out: NormChunk, chunk: RawChunk, i: int, rec: dict, reward_key: str | None,
                  keep_text: bool, rewards_recorded: bool = True) -> Row | None:
    """Record `i` validated: its row (and `out` marks it valid), or None with its problem in `out`."""
    try:
        row = validate_record(rec, reward_key, keep_text, rewards_recorded)
    except Bad as e:
        out.problems.append((i, Problem(chunk.location(i), e.field, e.message, e.rule)))
        return None
    out.valid[i] = True
    return row


def normalize_rows(chunk: RawChunk, base_pos: int, reward_key: str | None, keep_text: bool,
                   step: int | None, rewards_recorded: bool = True) -> NormChunk:
    """Validate a row-form chunk record by record (the columnar path's fallback)."""
    out = empty_norm(chunk)
    rows: list[Row] = []
    pos: list[int] = []
    for i, rec in enumerate(chunk.records):
        if not check_prelude(out, chunk, i, rec, step):
            continue
        row = validate_into(out, chunk, i, rec, reward_key, keep_text, rewards_recorded)
        if row is not None:
            rows.append(row)
            pos.append(base_pos + i)
    out.batches.extend(build_batches(rows, pos, keep_text))
    return out


def build_batches(rows: list[Row], pos: list[int], keep_text: bool) -> list[pa.RecordBatch]:
    """Validated rows as batches, each list column below batch.MAX_BATCH_VALUES values."""
    batches = []
    start, acc = 0, 0
    for k, r in enumerate(rows):
        v = _row_values(r)
        if acc + v > batch.MAX_BATCH_VALUES and k > start:
            batches.append(_build(rows[start:k], pos[start:k], keep_text))
            start, acc = k, 0
        acc += v
    if start < len(rows):
        batches.append(_build(rows[start:], pos[start:], keep_text))
    return batches
