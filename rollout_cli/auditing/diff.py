"""What a rollout sample determines against what the trainer holds, field by field.

A divergence is one record `{step, rollout_position, rollout_id, field, rollout, train,
expected, got}` (`rollout_id`: the id convert assigns the position, null where none):
`field` is convert's column name (`train_field` the trainer's key), `rollout` the rollout
file:position, `train` the train file, `expected` what convert determines from the rollout
dump with the given options, `got` what the trainer holds. For a list field, `index` is the
first position that differs (a token index, or a response-token index for masks and log-probs),
`expected`/`got` the values there and `differing` how many positions differ; lists of another
length give `{"length": n}` on each side. Rewards compare within float32 tolerance
(|expected - got| <= REWARD_ATOL + REWARD_RTOL * |expected|), everything else exactly.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..core import slime_keys as K

# field -> the trainer's key for it (slime's train_data names)
TRAIN_KEYS = {
    "tokens": K.TOKENS,
    "response_length": K.RESPONSE_LENGTHS,
    "loss_mask": K.LOSS_MASKS,
    "remove_sample": K.REMOVE_SAMPLE,
    "rollout_log_probs": K.ROLLOUT_LOG_PROBS,
    "reward": K.REWARDS,
    "raw_reward": K.RAW_REWARD,
    "rollout_id": K.ROLLOUT_IDS,
    "multimodal_train_inputs": K.MULTIMODAL_TRAIN_INPUTS,
}
# the loss side (auditing/loss_side.py): denominators and advantages, compared under the trainer's rules
LOSS_KEYS = {
    "rollout_mask_sum": K.ROLLOUT_MASK_SUMS,
    "group_mask_sum": "group_mask_sums",
    "group_rollouts": "group_rollouts",
    "step_mask_sum": "step_mask_sums",
    "step_rollouts": "step_rollouts",
    "step_samples": "step_samples",
    "step_groups": "step_groups",
    "advantages": "advantages",
}
# a sample (or, at rollout_position null, a whole step) the rollout side has and the trainer
# lacks is `missing`; the reverse `extra`
FIELDS = ("missing", "extra") + tuple(TRAIN_KEYS) + tuple(LOSS_KEYS)
REWARD_RTOL = 1e-6  # about 8 float32 units in the last place
REWARD_ATOL = 1e-6  # mean-centred rewards near 0


def _plain(v: Any) -> Any:
    """A JSON-ready value (NaN and infinities as null)."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return None
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return repr(v)


def array_diff(expected: np.ndarray, got: Any) -> dict | None:
    """None when equal (NaN equals NaN); else expected/got at the first difference, or lengths."""
    if got is None:
        return {"expected": {"length": len(expected)}, "got": None}
    got = np.asarray(got)
    if got.ndim != 1 or len(got) != len(expected):
        return {"expected": {"length": len(expected)}, "got": {"length": int(got.size) if got.ndim != 1 else len(got)}}
    if expected.dtype.kind == "f" or got.dtype.kind == "f":
        # float32 values (log-probs as convert writes them) compare at float32
        wide = np.float32 if expected.dtype == np.float32 and got.dtype.kind == "f" else np.float64
        e, g = expected.astype(wide).astype(np.float64), got.astype(wide).astype(np.float64)
        neq = (e != g) & ~(np.isnan(e) & np.isnan(g))
    else:
        neq = expected != got
    if not neq.any():
        return None
    i = int(np.argmax(neq))
    return {"index": i, "expected": _plain(expected[i]), "got": _plain(got[i]), "differing": int(np.count_nonzero(neq))}


def _number(v: Any) -> float | None:
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v.item()
    if isinstance(v, (bool, np.bool_)):
        return None
    if isinstance(v, (int, float, np.integer, np.floating)):
        return float(v)
    return None


def reward_diff(expected: float, got: Any) -> dict | None:
    """Float32 tolerance (see the module); a non-number on the trainer's side always differs."""
    g = _number(got)
    e = float(expected)
    if g is not None:
        if (np.isnan(e) and np.isnan(g)) or abs(e - g) <= REWARD_ATOL + REWARD_RTOL * abs(e):
            return None
    return {"expected": None if np.isnan(e) else e, "got": _plain(got)}


def exact_diff(expected: int, got: Any) -> dict | None:
    g = _number(got)
    if g is not None and g == expected:
        return None
    return {"expected": int(expected), "got": _plain(got)}


def flag_diff(expected: bool, got: Any) -> dict | None:
    """A true/false field (remove_sample): equal, or expected/got as they are."""
    if isinstance(got, np.ndarray) and got.ndim == 0:
        got = got.item()
    if isinstance(got, (bool, np.bool_)) and bool(got) == bool(expected):
        return None
    return {"expected": bool(expected), "got": _plain(got)}


def multimodal_diff(expected: dict, got: Any) -> dict | None:
    """Each key's tensor (dtype, shape, digest of its bytes: core/tensors.digest) or non-tensor
    value, where the two dicts differ: only the differing keys are given."""
    from ..core import tensors

    if not isinstance(got, dict):
        return {"expected": "a dict", "got": type(got).__name__}
    a, b = tensors.digests(expected), tensors.digests(got)
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
    if not keys:
        return None
    return {"expected": {k: a.get(k) for k in keys}, "got": {k: b.get(k) for k in keys}}


def record(step: int, pos: int | None, fld: str, rollout: str | None, train: str | None, d: dict) -> dict:
    """One divergence record (see the module)."""
    out = {"step": step, "rollout_position": pos, "rollout_id": None, "field": fld, "train_field": TRAIN_KEYS.get(fld, LOSS_KEYS.get(fld)),
           "rollout": rollout, "train": train, "expected": d.get("expected"), "got": d.get("got")}
    for k in ("index", "differing"):
        if k in d:
            out[k] = d[k]
    return out


def describe(r: dict) -> str:
    """One line for the human output: where, field, expected vs got."""
    where = r["rollout"] or f"step {r['step']}"
    fld = r["field"] + (f"[{r['index']}]" if "index" in r else "")
    if r["field"] == "missing":
        what = ("no train dump of this step" if r["rollout_position"] is None
                else "the trainer has no sample at this position")
    elif r["field"] == "extra":
        what = (f"a train dump of step {r['step']}, no rollout dump" if r["rollout_position"] is None
                else f"the trainer has a sample at position {r['rollout_position']}, the rollout dump none")
    else:
        what = f"expected {_show(r['expected'])}, got {_show(r['got'])}"
        if r.get("differing", 1) > 1:
            what += f" ({r['differing']} positions differ)"
    train = f" (train {r['train']})" if r["train"] else ""
    return f"{where}: {fld}: {what}{train}"


def _show(v: Any) -> str:
    if isinstance(v, dict) and set(v) == {"length"}:
        return f"{v['length']} values"
    if v is None:
        return "nothing"
    return repr(v)


plain, number = _plain, _number  # for the other audit modules (rules, loss_side)
