"""Reading open-instruct's rollout records: one `RolloutRecord` per line
(allenai/open-instruct@e6c3044a: open_instruct/rl_utils.py:29-43, 88-128), one sample each.

The mapping is the trainer's (`pack_sequences`, rl_utils.py:227-352; data_loader.py:1486-1520):

- the tokens are `prompt_tokens + response_tokens`; the response is `response_tokens`.
- the loss mask is every response token. The trainer's mask is the tool mask when
  `mask_tool_use` is on (rl_utils.py:349; data_loader.py:423), and that mask is not saved: a
  tool's output tokens cannot be told from sampled ones (both can have log-prob 0.0), so they are
  in the mask here. `request_info.num_calls` (in the metadata as `tool_calls`) says which
  samples called a tool. The trainer also drops pad tokens from a response
  (rl_utils.py:303-310); the pad id is not saved, so none is dropped here.
- `logprobs` are the response's (vLLM's) log-probs, `rollout_log_probs`; absent when not saved.
  An empty completion that stopped gets the end-of-sequence token with a NaN log-prob
  (data_loader.py:802-806), which Python's json writes as `NaN`: that sample keeps its token and
  mask (the trainer trains on it) and has no log-probs (none was sampled; `empty_completion` in
  its metadata). Any other non-finite log-prob is refused by the log-prob rules, named by line,
  field and position.
- `reward` is the reward (the trainer's `scores`); `advantage` is kept in the metadata. Groups
  whose rewards were all equal were filtered out before saving (`filter_zero_std_samples`).
- the prompt group is `prompt_idx` (`i // num_samples_per_prompt`), the rollout `sample_idx`,
  unique in its step; `finish_reason` `stop` is completed, `length` truncated, any other aborted.
- `dataset` is the sample's source.
"""
from __future__ import annotations

import math
from typing import Iterator

from ..unmapped import Bad, kind as _kind

_INT32_MAX = 2**31 - 1
_STATUS = {"stop": "completed", "length": "truncated"}


def _nat(rec: dict, key: str) -> int:
    v = rec.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise Bad(key, f"expected an integer >= 0, got {'missing' if v is None else _kind(v)}")
    return v


def _tokens(np, rec: dict, key: str, empty_ok: bool):
    v = rec.get(key)
    if not isinstance(v, list):
        raise Bad(key, f"expected a list of token ids, got {_kind(v)}")
    if not v:
        if empty_ok:
            return np.zeros(0, np.int64)
        raise Bad(key, "expected a non-empty list of token ids, got []")
    try:
        a = np.asarray(v)
    except (ValueError, TypeError, OverflowError):
        a = None
    if a is None or a.ndim != 1 or a.dtype.kind not in "iu":
        raise Bad(key, "expected a flat list of integers")
    if int(a.min()) < 0 or int(a.max()) > _INT32_MAX:
        raise Bad(key, f"expected token ids in [0, {_INT32_MAX}]")
    return a.astype(np.int64, copy=False)


def record_sample(np, rec, step: int | None, keep_text: bool) -> dict:
    """One RolloutRecord as a slime sample; raises Bad."""
    if not isinstance(rec, dict):
        raise Bad(None, f"expected a JSON object, got {_kind(rec)}")
    got = _nat(rec, "step")
    if step is not None and got != step:
        raise Bad("step", f"expected {step}, got {got}")
    idx, group = _nat(rec, "sample_idx"), _nat(rec, "prompt_idx")
    prompt = _tokens(np, rec, "prompt_tokens", empty_ok=True)
    response = _tokens(np, rec, "response_tokens", empty_ok=False)
    reward = rec.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise Bad("reward", f"expected a number, got {_kind(reward)}")
    finish = rec.get("finish_reason")
    if not isinstance(finish, str):
        raise Bad("finish_reason", f"expected a string, got {_kind(finish)}")
    md = {"sample_idx": idx, "prompt_idx": group, "finish_reason": finish}
    for k in ("advantage", "dataset"):
        if rec.get(k) is not None:
            md[k] = rec[k]
    info = rec.get("request_info")
    if isinstance(info, dict) and "num_calls" in info:
        md["tool_calls"] = info["num_calls"]
    lp = rec.get("logprobs")
    if lp is not None:
        if not isinstance(lp, list):
            raise Bad("logprobs", f"expected a list of numbers or null, got {_kind(lp)}")
        if len(lp) != len(response):
            raise Bad("logprobs", f"expected {len(response)} values (one per response token), got {len(lp)}")
        if (len(lp) == 1 and finish == "stop" and isinstance(lp[0], float) and math.isnan(lp[0])):
            lp = None  # the writer's end-of-sequence token for an empty completion: no log-prob was sampled
            md["empty_completion"] = True
    s = {
        "rollout_id": idx, "index": idx, "group_index": group, "tokens": np.concatenate([prompt, response]),
        "response_length": len(response), "loss_mask": np.ones(len(response), np.int64),
        "reward": float(reward), "status": _STATUS.get(finish, "aborted"), "metadata": md,
    }
    if lp is not None:
        s["rollout_log_probs"] = lp
    if isinstance(rec.get("dataset"), str):
        s["source"] = rec["dataset"]
    return s


def read(inp, request, info) -> Iterator:
    """The registry's entry: the records of one step (its copy kept, detect.py), each with its
    own file and line."""
    import numpy as np

    from ..linesteps import read_chunks

    return read_chunks(inp, request, info, lambda rec: [record_sample(np, rec, inp.step, request.keep_text)],
                       Bad, "open_instruct.record")
