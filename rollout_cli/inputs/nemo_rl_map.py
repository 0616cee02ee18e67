"""NeMo-RL step-log records onto slime's sample fields, on arrays (numpy slices of the padded
rows, never Python lists per token).

Per line (docs/frameworks.md has the table): `L = input_lengths[0]`; tokens = `token_ids[0][:L]`;
the response starts at the first loss-masked token `p0`; loss mask and rollout log-probs are
`[p0:L]` of `token_loss_mask` and `generation_logprobs`; reward = `rewards[0]`; index = `idx`;
`sample_loss_mask[0] == 0` is a removed sample; status `completed` (NeMo-RL records none).
group_index is a key of the prompt tokens `token_ids[0][:p0]`: a step's parts are parsed by
different workers, so the key depends on the prompt alone, and the step's finish renumbers the
keys 0, 1, ... in order of first appearance (registry.CONTENT_GROUPS). One rollout per line:
the ids are left to the id rule, which numbers the lines of the step 0, 1, ... in order.
"""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ..core.errors import InvalidInputError, Location, Problem
from .base import RawChunk
from .columns import columnar
from .simd import SampleParser

PADDED = {"token_ids": "i", "token_loss_mask": "i", "generation_logprobs": "d", "prev_logprobs": "d", "advantages": "d"}
_KINDS = {"i": "iu", "d": "fiu"}
STATUS = "completed"  # NeMo-RL records no status: a logged row is one that was trained on


class _Bad(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


def parser() -> SampleParser:
    """A simdjson parser that hands the padded rows over as arrays."""
    return SampleParser(PADDED, frozenset(PADDED))


def _got(v: Any) -> str:
    r = repr(v)
    return f"{type(v).__name__} {r[:60] + '...' if len(r) > 60 else r}"


def _padded(rec: dict, name: str, required: bool) -> np.ndarray | None:
    v = rec.get(name)
    if v is None:
        if required:
            raise _Bad(name, "missing")
        return None
    if isinstance(v, np.ndarray):
        return v
    kinds = _KINDS[PADDED[name]]
    if isinstance(v, list) and len(v) == 1 and isinstance(v[0], list):
        row = v[0]
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in row):
            a = np.asarray(row, dtype=np.int64 if kinds == "iu" and all(isinstance(x, int) for x in row) else None)
            if a.dtype.kind in kinds or not len(row):
                return a.astype(np.int64 if kinds == "iu" else np.float64, copy=False)
        raise _Bad(name, f"expected a one-element list holding a list of {'integers' if kinds == 'iu' else 'numbers'}")
    raise _Bad(name, f"expected a one-element list holding the padded row ([[...]]), got {_got(v)}")


def _scalar(rec: dict, name: str, integer: bool, required: bool = True):
    if name not in rec:
        if required:
            raise _Bad(name, "missing")
        return None
    v = rec[name]
    if not (isinstance(v, list) and len(v) == 1):
        raise _Bad(name, f"expected a one-element list, got {_got(v)}")
    x = v[0]
    ok = isinstance(x, int) if integer else isinstance(x, (int, float))
    if not ok or isinstance(x, bool):
        raise _Bad(name, f"expected [{'an integer' if integer else 'a number'}], got {_got(v)}")
    return x


def group_key(prompt: np.ndarray) -> int:
    """A non-negative 63-bit key of the prompt tokens (the same in every worker and process)."""
    digest = hashlib.blake2b(np.ascontiguousarray(prompt, dtype=np.int64).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _spans(rec: dict) -> tuple[dict, int, int, dict]:
    """(slime sample fields, p0, L, the padded rows read) of one record."""
    ids = _padded(rec, "token_ids", True)
    width = len(ids)
    rows = {"token_ids": ids}
    for name in ("token_loss_mask", "generation_logprobs", "prev_logprobs", "advantages"):
        a = _padded(rec, name, name == "token_loss_mask")
        if a is not None and len(a) != width:
            raise _Bad(name, f"expected length {width} (the width of token_ids), got {len(a)}")
        rows[name] = a
    n = _scalar(rec, "input_lengths", True)
    if not 1 <= n <= width:
        raise _Bad("input_lengths", f"expected 1 <= input_lengths <= {width} (the width of token_ids), got {n}")
    mask = rows["token_loss_mask"][:n]
    if len(mask) and (mask.min() < 0 or mask.max() > 1):
        raise _Bad("token_loss_mask", "expected 0/1 values")
    on = np.flatnonzero(mask)
    if not len(on):
        raise _Bad("token_loss_mask", f"no loss-masked token within input_lengths ({n}): where the response starts is unknown")
    p0 = int(on[0])
    reward = _scalar(rec, "rewards", False)
    idx = rec.get("idx")
    if idx is not None and (not isinstance(idx, int) or isinstance(idx, bool) or idx < 0):
        raise _Bad("idx", f"expected a non-negative integer, got {_got(idx)}")
    keep = _scalar(rec, "sample_loss_mask", False, required=False)
    sample = {
        "index": idx,
        "group_index": group_key(ids[:p0]),
        "tokens": ids[:n],
        "response_length": n - p0,
        "loss_mask": mask[p0:],
        "reward": reward,
        "status": STATUS,
        "remove_sample": keep is not None and keep == 0,
    }
    glp = rows["generation_logprobs"]
    if glp is not None:
        sample["rollout_log_probs"] = glp[p0:n]
    return sample, p0, n, rows


def to_sample(rec: dict) -> dict:
    """One record's slime sample fields; raises _Bad(field, message)."""
    return _spans(rec)[0]


def shape_chunk(chunk: RawChunk) -> RawChunk:
    """A chunk of parsed records as slime samples, in the reader contract's columnar form; a
    record that does not map keeps its place with its problem (file, line, NeMo-RL's field)."""
    records = list(chunk.records or [])
    problems = dict(chunk.problems)
    for i, rec in enumerate(records):
        if rec is None:
            continue
        try:
            records[i] = to_sample(rec)
        except _Bad as e:
            problems[i] = Problem(chunk.location(i), e.field, e.message)
            records[i] = None
    return columnar(RawChunk(chunk.source, chunk.kind, chunk.numbers, records, problems))


def train_payload(inp) -> dict:
    """See nemo_rl.train_payload."""
    import orjson

    from . import nemo_rl
    from .jsonl import open_binary

    path = inp if isinstance(inp, str) else inp.path
    display = path if isinstance(inp, str) else inp.display
    known = nemo_rl.step_and_split(path)
    step = known[0] if known else None
    parse = parser().parse
    samples = []
    with open_binary(path) as f:
        for line_no, line in enumerate(f, 1):
            line = line.rstrip(b"\r\n")
            if not line.strip():
                continue
            where = Location(display, "line", line_no)
            rec = parse(line, 0, len(line))
            if rec is None:
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError as e:
                    raise InvalidInputError(f"{where}: invalid JSON: {e}") from None
            if not isinstance(rec, dict):
                raise InvalidInputError(f"{where}: expected a JSON object, got {type(rec).__name__}")
            try:
                s, p0, n, rows = _spans(rec)
            except _Bad as e:
                raise InvalidInputError(str(Problem(where, e.field, e.message))) from None
            entry = {
                "rollout_position": len(samples),
                "sample_index": s["index"],
                "tokens": s["tokens"],
                "response_lengths": s["response_length"],
                "loss_masks": s["loss_mask"],
                "rewards": s["reward"],
                "rollout_log_probs": s.get("rollout_log_probs"),
                "log_probs": None if rows["prev_logprobs"] is None else rows["prev_logprobs"][p0:n],
                "advantages": None if rows["advantages"] is None else rows["advantages"][p0:n],
            }
            samples.append(entry)
    return {"format_version": 2, "rollout_id": step, "rank": 0, "samples": samples}
