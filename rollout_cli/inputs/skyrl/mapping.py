"""A SkyRL TrainingInputBatch, as plain data, to slime's sample fields.

The batch's pickled state (NovaSky-AI/SkyRL@a9564572eb8e:
skyrl/backends/skyrl_train/training_batch.py:255-281) is `{"batch_dict": {key: tensor}, "batch_size",
"device", "metadata"}`; the restricted unpickler (inputs/pickled) hands each tensor on as a numpy
array, whichever way SkyRL serialized it (training_batch.py:17-35).
The layout (skyrl/train/dataset/preprocess.py:90-283, the function that builds it):

- `sequences`, `attention_mask` [B, T]: prompt + response, **left-padded**; the real tokens are
  the row's trailing `attention_mask.sum()` positions. The pad id may be the end-of-sequence id,
  so the padding is told by the mask, never by the token value.
- `response_mask`, `loss_mask`, `rollout_logprobs` [B, R]: the last R positions of the
  sequence, **right-aligned**: the response is the row's trailing `response_mask.sum()` positions
  (the trainer's forward reads `log_probs[:, -num_actions-1:-1]`, preprocess.py:139-142).
- `metadata["policy_prompt_boundaries"]`: one `(start, end)` row range per prompt, from the
  prompts' uids (preprocess.py:286-313): the prompt groups.
- `metadata["pad_size"]`: trailing rows that copy row 0 so the batch divides over the
  data-parallel ranks (training_batch.py:504-570; trainer.py:974-978), their loss mask zero:
  not samples, left out.

Rewards (`rewards`) and the uids are popped before the dump (trainer.py:433-439): a row's reward
is not recorded (null). Each row is one rollout; the step-wise mode's per-turn rows (whose
trajectory boundaries, `is_last_step`, are popped too) come out as rollouts of their group.
SkyRL records no status: `completed`.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..unmapped import Bad, first_failures, kind as _kind

STATUS = "completed"
# the tensors every SkyRL training input holds (trainer.py:926-939)
REQUIRED = ("sequences", "attention_mask", "response_mask", "loss_mask")


def _array(value: Any, key: str) -> np.ndarray | None:
    """One tensor of the batch, as the restricted unpickler hands it on (a numpy array; None
    where the batch holds None)."""
    if value is None or isinstance(value, np.ndarray):
        return value
    raise Bad(key, f"expected a tensor, got {_kind(value)}")


def _boundaries(meta: dict, rows: int) -> np.ndarray:
    """The group of each of the first `rows` rows, from policy_prompt_boundaries."""
    b = meta.get("policy_prompt_boundaries")
    key = "metadata.policy_prompt_boundaries"
    if b is None:
        raise Bad(key, "missing (the prompt groups SkyRL's trainer writes into every batch)")
    if not isinstance(b, (list, tuple)):
        raise Bad(key, f"expected a list of (start, end) row ranges, got {_kind(b)}")
    group = np.empty(rows, dtype=np.int64)
    at = 0
    for g, pair in enumerate(b):
        if (not isinstance(pair, (list, tuple)) or len(pair) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in pair)):
            raise Bad(key, f"entry {g}: expected a (start, end) pair of row numbers, got {pair!r}")
        start, end = pair
        if start != at or end <= start:
            raise Bad(key, f"entry {g}: expected a range starting at row {at} and not empty, got ({start}, {end})")
        if end > rows:
            raise Bad(key, f"entry {g}: ({start}, {end}) goes past the batch's {rows} rows")
        group[start:end] = g
        at = end
    if at != rows:
        raise Bad(key, f"the ranges cover rows 0-{at - 1}, expected all {rows} rows")
    return group


def trailing_blocks(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a [rows, width] 0/1 mask: the count of ones, and whether the row is that
    many ones at its end after zeros (anything else, another value among them, is not)."""
    n = np.count_nonzero(mask, axis=1)
    if mask.shape[1] == 0:
        return n, np.ones(len(mask), dtype=bool)
    # 0s then 1s: never decreasing, from at least 0 to at most 1 (and no fraction between)
    ok = (mask[:, 1:] >= mask[:, :-1]).all(axis=1) & (mask[:, 0] >= 0) & (mask[:, -1] <= 1)
    if mask.dtype.kind not in "biu":
        ok &= ((mask == 0) | (mask == 1)).all(axis=1)
    return n, ok


class Plan(NamedTuple):
    """The checked batch, row by row in whole-batch arrays: the first `real` rows are samples,
    row i's tokens the trailing n[i] of sequences, its response the trailing r[i] of the
    response width; `bad` maps a row that cannot be mapped to its Bad."""

    real: int
    group: np.ndarray
    seq: np.ndarray
    loss: np.ndarray
    lp: np.ndarray | None
    n: np.ndarray
    r: np.ndarray
    bad: dict


def plan(state: Any) -> tuple[Plan, list[str]]:
    """The batch checked and laid out (see Plan), and what is worth saying about the batch.
    Raises Bad for what is wrong with the whole batch."""
    if not isinstance(state, dict) or not isinstance(state.get("batch_dict"), dict):
        got = f"keys {sorted(map(str, state))[:6]}" if isinstance(state, dict) else _kind(state)
        raise Bad("batch_dict", f"expected a SkyRL TensorBatch's state {{batch_dict, batch_size, device, metadata}}, got {got}")
    bd = state["batch_dict"]
    meta = state.get("metadata") or {}
    if not isinstance(meta, dict):
        raise Bad("metadata", f"expected a dict, got {_kind(meta)}")
    t = {}
    for key in REQUIRED:
        if bd.get(key) is None:
            raise Bad(key, "missing (SkyRL's training input always holds it)")
        t[key] = _array(bd[key], key)
        if t[key].ndim != 2:
            raise Bad(key, f"expected a [batch, length] tensor, got shape {t[key].shape}")
    lp = _array(bd.get("rollout_logprobs"), "rollout_logprobs")
    seq, am = t["sequences"], t["attention_mask"]
    rows, width = seq.shape
    if am.shape != seq.shape:
        raise Bad("attention_mask", f"expected the shape of sequences {seq.shape}, got {am.shape}")
    resp = t["response_mask"]
    rwidth = resp.shape[1]
    for key, arr in (("response_mask", resp), ("loss_mask", t["loss_mask"]), ("rollout_logprobs", lp)):
        if arr is not None and (arr.ndim != 2 or arr.shape[0] != rows or arr.shape[1] != rwidth):
            raise Bad(key, f"expected a [{rows}, {rwidth}] tensor (batch, response width), got shape {arr.shape}")
    if rwidth > width:
        raise Bad("response_mask", f"the response width {rwidth} exceeds the sequence width {width}")
    if seq.dtype.kind not in "iu":
        raise Bad("sequences", f"expected integer token ids, got {seq.dtype}")
    size = state.get("batch_size")
    if size is not None and size != rows:
        raise Bad("batch_size", f"expected the tensors' {rows} rows, got {size!r}")
    pad = meta.get("pad_size", 0)
    if isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad < max(rows, 1):
        raise Bad("metadata.pad_size", f"expected a number of trailing rows in [0, {rows}), got {pad!r}")
    real = rows - pad
    group = _boundaries(meta, real)
    notes = []
    if pad:
        notes.append(f"{pad} trailing row(s) that pad the batch for the data-parallel ranks (copies of row 0, "
                     "metadata.pad_size) left out")
    am, resp, loss = am[:real], resp[:real], t["loss_mask"][:real]
    n, att_ok = trailing_blocks(am)
    r, resp_ok = trailing_blocks(resp)
    on_response = np.arange(rwidth)[None, :] >= (rwidth - r)[:, None]
    loss_bad = on_response & (loss != 0) & (loss != 1)
    # a row's first failing check, in this order, is its Bad
    checks = (
        (~att_ok, lambda i: Bad("attention_mask", "expected left padding: 0s, then the real tokens' 1s", i)),
        (~resp_ok, lambda i: Bad("response_mask", "expected a right-aligned response: 0s, then the response's 1s", i)),
        ((r == 0) | (r > n), lambda i: Bad("response_mask", f"expected a response of 1 to {int(n[i])} tokens (the row's real tokens), got {int(r[i])}", i)),
        (loss_bad.any(axis=1), lambda i: Bad("loss_mask", f"expected 0/1 on the response, got {loss[i][loss_bad[i]][0].item()!r}", i)),
    )
    bad = first_failures(np, checks)
    return Plan(real, group, seq[:real], loss, None if lp is None else lp[:real], n, r, bad), notes


def columns(p: Plan, a: int, b: int) -> dict:
    """Rows a..b-1 as the reader contract's columns (inputs/base.py; a Bad row's entries null):
    each list field one Arrow list array cut from the 2-D tensors in whole-batch numpy."""
    from ..columns import spans

    valid = np.ones(b - a, dtype=bool)
    for i in p.bad:
        if a <= i < b:
            valid[i - a] = False
    if not valid.any():
        return {}
    ids = [i if ok else None for i, ok in zip(range(a, b), valid.tolist())]
    n, r = p.n[a:b], p.r[a:b]
    width, rwidth = p.seq.shape[1], p.loss.shape[1]
    out = {
        "rollout_id": ids, "index": ids,
        "group_index": [g if ok else None for g, ok in zip(p.group[a:b].tolist(), valid.tolist())],
        "tokens": spans(p.seq[a:b], width - n, n, np.int64, valid),
        "response_length": [x if ok else None for x, ok in zip(r.tolist(), valid.tolist())],
        "loss_mask": spans(p.loss[a:b], rwidth - r, r, np.uint8, valid),  # 0/1, checked by plan()
        "reward": [None] * (b - a),
        "status": [STATUS if ok else None for ok in valid.tolist()],
    }
    if p.lp is not None:
        # kept float32 when the dump is: validation reads log-probs as float32 either way
        lp_type = np.float32 if p.lp.dtype == np.float32 else np.float64
        out["rollout_log_probs"] = spans(p.lp[a:b], rwidth - r, r, lp_type, valid)
    return out


def samples(state: Any) -> tuple[list, list[str]]:
    """The batch's rows as sample dicts (a row that cannot be mapped is its Bad instead), and
    what is worth saying about the batch. Raises Bad for what is wrong with the whole batch."""
    p, notes = plan(state)
    width, rwidth = p.seq.shape[1], p.loss.shape[1]
    out: list = []
    for i in range(p.real):
        if i in p.bad:
            out.append(p.bad[i])
            continue
        ni, ri = int(p.n[i]), int(p.r[i])
        s = {
            "rollout_id": i, "index": i, "group_index": int(p.group[i]),
            "tokens": p.seq[i, width - ni:].astype(np.int64, copy=False),
            "response_length": ri, "loss_mask": p.loss[i, rwidth - ri:].astype(np.int64),
            "reward": None, "status": STATUS,
        }
        if p.lp is not None:
            s["rollout_log_probs"] = p.lp[i, rwidth - ri:].astype(np.float64)
        out.append(s)
    return out, notes
