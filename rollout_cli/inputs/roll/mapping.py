"""ROLL's agentic `DataProto` (read as plain data) onto slime's sample fields, one sample per
row. The meaning is the agentic pipeline's (alibaba/ROLL@8eb27cc2dc34):

- Each row is built by an env manager's `formulate_rollouts`
  (roll/pipeline/agentic/env_manager/traj_env_manager.py:307-392; step_env_manager.py:67-148
  makes one row per turn): `input_ids` right-padded with the pad id to `sequence_length`,
  `attention_mask` 1 on the real tokens, `response_mask` 1 on generated tokens (0 on every
  prompt and environment segment), `scores` 0 but at the last real token (the episode's
  score, or the turn's), `infer_logprobs` the tokens' sampling log-probs shifted by one
  (`[0] * prompt + logprobs`, padded, then `[:, 1:]`: `infer_logprobs[j-1]` is token j's).
- The trainer's loss mask is `response_mask[:, 1:]` against the shifted log-probs
  (roll/pipeline/agentic/agentic_actor_worker.py:20-28): a token is trained where its
  `response_mask` is 1. Its reward, with the default advantage estimators, is the row's
  `scores` summed (roll/pipeline/agentic/utils.py:216-221), normalised within the groups of
  `reward_normalization.grouping` (utils.py:100-153; `traj_group_id` groups one prompt's
  rollouts, agentic_pipeline.py:481).
- `traj_group_id` (`{tag}_{group_id}_{episode_id}_{group_seed}`) is the prompt group and
  `traj_id` (`{traj_group_id}_{env_id}`) the rollout (traj_env_manager.py:133-136; the rows of
  one step-wise rollout share it, agentic_pipeline.py:578).

So: tokens = `input_ids[:n]` (n real tokens); the response starts at the first
`response_mask` 1; loss_mask = `response_mask` over it; rollout_log_probs = token j's
`infer_logprobs[j-1]` over it; reward = `scores` summed; group_index and rollout_id number the
step's `traj_group_id`s and `traj_id`s in order of first appearance; source = the env's `tag`.
No numpy at import.
"""
from __future__ import annotations

from typing import Any

from ..unmapped import Bad, first_failures

_INT32_MAX = 2**31 - 1
REQUIRED = ("input_ids", "attention_mask", "response_mask", "scores")
IDS = ("traj_group_id", "traj_id")
# non_tensor_batch key -> metadata key, where present (traj_env_manager.py:380-386)
METADATA = (("tags", "tag"), ("env_ids", "env_id"), ("group_ids", "group_id"), ("traj_group_id", "traj_group_id"),
            ("traj_id", "traj_id"), ("episode_scores", "episode_score"), ("step_scores", "step_scores"),
            ("step", "env_step"))


def _plain(np, v: Any) -> Any:
    """A non-tensor value as JSON-able plain data (numpy scalars and arrays, object arrays of
    object arrays, as lists), or None where it holds something else."""
    if isinstance(v, np.ndarray):
        return [_plain(np, x) for x in v.tolist()] if v.dtype.kind == "O" else v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [_plain(np, x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(np, x) for k, x in v.items()}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return None


def _tensors(np, batch) -> tuple[dict, int, int]:
    """The row tensors, checked: (name -> 2-D array, rows, columns)."""
    if batch is None or not hasattr(batch, "get"):
        raise Bad("batch", "missing: the DataProto holds no tensors")
    out = {}
    for key in REQUIRED:
        a = batch.get(key)
        if a is None:
            raise Bad(key, "missing (not the agentic pipeline's layout)")
        if not isinstance(a, np.ndarray) or a.ndim != 2:
            raise Bad(key, f"expected a 2-D tensor, got {getattr(a, 'shape', type(a).__name__)}")
        out[key] = a
    rows, cols = out["input_ids"].shape
    for key, a in out.items():
        if a.shape != (rows, cols):
            raise Bad(key, f"expected shape {(rows, cols)} (input_ids), got {tuple(a.shape)}")
    if out["input_ids"].dtype.kind not in "iu":
        raise Bad("input_ids", f"expected integer token ids, got {out['input_ids'].dtype}")
    lp = batch.get("infer_logprobs")
    if lp is not None:
        if not isinstance(lp, np.ndarray) or lp.shape != (rows, max(cols - 1, 0)):
            raise Bad("infer_logprobs", f"expected shape {(rows, max(cols - 1, 0))} (input_ids shifted by one), "
                      f"got {tuple(getattr(lp, 'shape', ()))}")
        if lp.dtype.kind != "f":
            raise Bad("infer_logprobs", f"expected floats, got {lp.dtype}")
        out["infer_logprobs"] = lp
    return out, rows, cols


def _ids(np, non_tensor: dict, rows: int) -> dict[str, list[str]]:
    out = {}
    for key in IDS:
        v = non_tensor.get(key)
        if v is None:
            raise Bad(key, "missing from non_tensor_batch (not the agentic pipeline's layout)")
        vals = v.tolist() if isinstance(v, np.ndarray) else v
        if not isinstance(vals, list) or len(vals) != rows:
            raise Bad(key, f"expected {rows} values (one per row), got {len(vals) if isinstance(vals, list) else type(v).__name__}")
        for i, x in enumerate(vals):
            if not isinstance(x, str):
                raise Bad(key, f"expected a string, got {type(x).__name__}", i)
        out[key] = vals
    return out


class Plan:
    """A batch checked and laid out in whole-batch arrays: row i's tokens are the first n[i]
    of input_ids, its response starts at p0[i]; `bad` maps a row that cannot be mapped to its
    Bad (`.row` set)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def plan(np, proto: Any) -> Plan:
    """The DataProto checked (a batch that cannot be read at all raises Bad) and laid out."""
    if not hasattr(proto, "get"):
        raise Bad(None, f"expected ROLL's DataProto, got {type(proto).__name__}")
    t, rows, cols = _tensors(np, proto.get("batch"))
    non_tensor = proto.get("non_tensor_batch") or {}
    ids = _ids(np, non_tensor, rows)
    meta_cols = []
    for key, name in METADATA:
        v = non_tensor.get(key)
        if isinstance(v, np.ndarray) and v.ndim >= 1 and len(v) == rows:
            meta_cols.append((name, v))
    groups: dict[str, int] = {}
    rollouts: dict[str, int] = {}
    gid = [groups.setdefault(g, len(groups)) for g in ids["traj_group_id"]]
    rid = [rollouts.setdefault(r, len(rollouts)) for r in ids["traj_id"]]
    tok, am, rm, sc = t["input_ids"], t["attention_mask"], t["response_mask"], t["scores"]
    real = am != 0
    n = np.count_nonzero(real, axis=1)
    within = np.arange(cols)[None, :] < n[:, None]
    resp = (rm != 0) & within
    p0 = np.where(resp.any(axis=1), resp.argmax(axis=1), n)
    reward = sc.sum(axis=1, dtype=np.float64)
    # a row's first failing check, in this order, is its Bad
    checks = (
        ((real != within).any(axis=1), lambda i: Bad("attention_mask", "expected 1 on the real tokens then 0 (right padding)", i)),
        (((rm != 0) & ~within).any(axis=1), lambda i: Bad("response_mask", f"expected 0 past the {int(n[i])} real tokens (attention_mask)", i)),
        (~((rm == 0) | (rm == 1)).all(axis=1), lambda i: Bad("response_mask", "expected 0/1 values", i)),
        ((((tok < 0) | (tok > _INT32_MAX)) & within).any(axis=1), lambda i: Bad("input_ids", f"expected token ids in [0, {_INT32_MAX}]", i)),
        (~np.isfinite(reward), lambda i: Bad("scores", f"expected finite scores, got a sum of {float(reward[i])}", i)),
    )
    bad = first_failures(np, checks)
    return Plan(rows=rows, gid=gid, rid=rid, tokens=tok, rm=rm, lp=t.get("infer_logprobs"), n=n, p0=p0,
                reward=reward, meta_cols=meta_cols, bad=bad)


def _metadata(np, p: Plan, b: int) -> dict:
    md = {}
    for name, col in p.meta_cols:
        v = _plain(np, col[b])
        if v is not None:
            md[name] = v
    return md


def columns(np, p: Plan, a: int, b: int) -> dict:
    """Rows a..b-1 as the reader contract's columns (inputs/base.py; a Bad row's entries null):
    each list field one Arrow list array cut from the 2-D tensors in whole-batch numpy."""
    from ..columns import spans

    valid = np.array([i not in p.bad for i in range(a, b)], dtype=bool)
    if not valid.any():
        return {}
    ok = valid.tolist()
    n, p0 = p.n[a:b], p.p0[a:b]

    def col(values):
        return [v if k else None for v, k in zip(values, ok)]

    out = {"group_index": col(p.gid[a:b]), "rollout_id": col(p.rid[a:b]),
           "tokens": spans(p.tokens[a:b], np.zeros_like(n), n, np.int64, valid),
           "response_length": col((n - p0).tolist()),
           "loss_mask": spans(p.rm[a:b], p0, n - p0, np.uint8, valid),  # 0/1, checked by plan()
           "reward": col(p.reward[a:b].tolist()), "status": col(["completed"] * (b - a))}
    if p.lp is not None:
        # infer_logprobs[j-1] is token j's: token 0 has none (0.0, as ROLL pads the prompt)
        lp = p.lp[a:b]
        # kept float32 when the dump is: validation reads log-probs as float32 either way
        lp_type = np.float32 if lp.dtype == np.float32 else np.float64
        if ((p0 == 0) & (n > 0) & valid).any():
            out["rollout_log_probs"] = spans(np.concatenate([np.zeros((b - a, 1), lp.dtype), lp], axis=1),
                                             p0, n - p0, lp_type, valid)
        else:
            out["rollout_log_probs"] = spans(lp, p0 - 1, n - p0, lp_type, valid)
    mds = [_metadata(np, p, i) if k else {} for i, k in zip(range(a, b), ok)]
    if any(mds):
        out["metadata"] = [md or None for md in mds]
    sources = [md["tag"] if isinstance(md.get("tag"), str) and md["tag"] else None for md in mds]
    if any(x is not None for x in sources):
        out["source"] = sources  # the env's tag (its type): the sample's source
    return out
