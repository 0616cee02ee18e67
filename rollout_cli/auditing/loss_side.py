"""The loss side of an audit: the denominators and advantages a train dump holds, against the
values that follow from the trainer's own rules.

* Denominators: `rollout_mask_sum` (slime's `rollout_mask_sums`) is, for each sample, the
  loss-mask total (after remove_sample) of every sample sharing its rollout id, taken with the
  ids of the trainer's id rule (auditing/rules.py), so an id rule difference is reported once, as
  a rule. Any other denominator of the loss-denominator table the dump holds per sample
  (`group_mask_sum`, `group_rollouts`, the `step_*` totals; DENOMINATORS) is compared the same
  way.
* Advantages, per trained token (the trainer's loss mask 1), under named advantage rules
  computed from the trainer's own rewards: `broadcast` (grpo, gspo, cispo: every response
  token's advantage is the sample's reward, slime's `get_grpo_returns`) and `whitened`
  (`--normalize-advantages`: those values whitened over the data-parallel group with the
  trainer's masks, slime's `distributed_masked_whiten`; tried only when the train dump holds
  every sample of the step, i.e. every rank's dump is present). The rule explaining the most
  samples is the trainer's (ties: broadcast); a sample it does not explain is an `advantages`
  divergence. Other estimators' advantages need values or KL terms the dump lacks: noted, not
  compared.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..core.schema import STD_SCALED_ESTIMATORS
from ..pipeline.fields import group_fields, rollout_mask_sums, step_fields
from ..core import slime_keys as K
from . import diff

# convert's denominator column -> the trainer keys that may hold it per sample
DENOMINATORS = {
    "rollout_mask_sum": (K.ROLLOUT_MASK_SUMS,),
    "group_mask_sum": ("group_mask_sums", "group_mask_sum"),
    "group_rollouts": ("group_rollouts",),
    "step_mask_sum": ("step_mask_sums", "step_mask_sum"),
    "step_rollouts": ("step_rollouts",),
    "step_samples": ("step_samples",),
    "step_groups": ("step_groups",),
}
BROADCAST_ESTIMATORS = STD_SCALED_ESTIMATORS  # grpo, gspo, cispo: get_grpo_returns
WHITEN_EPS = 1e-8  # distributed_masked_whiten's epsilon
ADV_RTOL, ADV_ATOL = 1e-5, 1e-5  # float32 sums over a step's tokens round more than one reward


def implied_denominators(ids: np.ndarray, masks: np.ndarray, groups: np.ndarray) -> dict[str, np.ndarray]:
    """Per row, every denominator of the table for rollout labels `ids` and prompt labels `groups`."""
    g_sums, g_rollouts = group_fields(groups, ids, masks)
    totals = step_fields(ids, masks, groups)
    n = len(ids)
    out = {"rollout_mask_sum": rollout_mask_sums(ids, masks), "group_mask_sum": g_sums, "group_rollouts": g_rollouts}
    out.update({k: np.full(n, v, dtype=np.int64) for k, v in totals.items()})
    return out


def denominator_divergences(step: int, ids: np.ndarray, masks: np.ndarray, groups: np.ndarray, row_pos: np.ndarray,
                            td, where) -> tuple[list[dict], list[str]]:
    """The denominator divergences of one step (rows paired by position), and the fields compared."""
    implied = implied_denominators(ids, masks, groups)
    index = td.index()
    out, compared = [], []
    for fld, keys in DENOMINATORS.items():
        key = next((k for k in keys if any(k in s for s in td.samples)), None)
        if key is None:
            continue
        compared.append(fld)
        for k, p in enumerate(row_pos.tolist()):
            j = index.get(p)
            got = None if j is None else td.samples[j].get(key)
            if got is None:
                continue
            d = diff.exact_diff(int(implied[fld][k]), got)
            if d:
                rec = diff.record(step, p, fld, str(where(p)), td.display, d)
                rec["train_field"] = key
                out.append(rec)
    return out, compared


def _close(e: np.ndarray, g: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    return (np.abs(e - g) <= atol + rtol * np.abs(e)) | (np.isnan(e) & np.isnan(g))


def _trained(ts: dict, expected_mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, Any] | None:
    """(mask, advantages, reward) of a training sample holding all three, else None. The mask
    is the trainer's where the rollout's own mask agrees (a loss_mask divergence is reported
    as such, not again as advantages)."""
    adv, m, r = ts.get(K.ADVANTAGES), ts.get(K.LOSS_MASKS), diff.number(ts.get(K.REWARDS))
    if adv is None or m is None or r is None or len(adv) != len(m):
        return None
    m = np.asarray(m) != 0
    if expected_mask is not None and len(expected_mask) == len(m):
        m = m & expected_mask
    return m, np.asarray(adv, dtype=np.float64), r


def _whitened(samples: list[tuple]) -> list[np.ndarray]:
    """distributed_masked_whiten over the step's samples (float32 statistics, Bessel-corrected)."""
    vals = [np.full(len(m), np.float32(r), dtype=np.float32) for m, _, r in samples]
    masks = [m.astype(np.float32) for m, _, _ in samples]
    v, m = np.concatenate(vals), np.concatenate(masks)
    total = np.float32(m.sum())
    if total == 0:
        return []
    mean = np.float32((v * m).sum(dtype=np.float32) / total)
    var = np.float32((v * v * m).sum(dtype=np.float32) / total) - mean * mean
    if total >= 2:
        var = var * total / (total - 1)
    with np.errstate(invalid="ignore", divide="ignore"):  # a variance rounded below 0: NaN, as torch.rsqrt gives
        scale = np.float32(1.0 / np.sqrt(np.float64(var) + WHITEN_EPS))
    return [((x - mean) * scale).astype(np.float64) for x in vals]


def advantage_check(step: int, td, opts, all_present: bool, where_of, masks: dict,
                    rewards: dict) -> tuple[str | None, list[dict], list[str]]:
    """(the trainer's advantage rule or None, its `advantages` divergences, notes) for one step.
    `masks`: the rollout's loss mask per position (paired samples only are compared);
    `rewards`: the reward of the trainer's reward rule per position. A sample's advantages
    follow from that reward, or (where its reward diverges: reported as such) from the reward
    the trainer holds."""
    samples = [(p, _trained(td.samples[j], masks[p])) for p, j in td.index().items() if p in masks]
    samples = [(p, t) for p, t in samples if t is not None]
    held = [r for _, (_, _, r) in samples]
    samples = [(p, (m, a, rewards.get(p, r))) for p, (m, a, r) in samples]
    if not samples:
        return None, [], []
    if opts.advantage_estimator not in BROADCAST_ESTIMATORS:
        return None, [], [f"step {step}: advantages of --advantage-estimator {opts.advantage_estimator} need values "
                          "or KL terms the train dump lacks: not compared"]
    rules = {"broadcast": [np.full(len(m), r, dtype=np.float64) for m, _, r in (t for _, t in samples)]}
    notes = []
    if all_present:
        w = _whitened([t for _, t in samples])
        if w:
            rules["whitened"] = w
    tol = {"broadcast": (diff.REWARD_RTOL, diff.REWARD_ATOL), "whitened": (ADV_RTOL, ADV_ATOL)}
    ok = {name: [bool(_close(v[m], a[m], *tol[name]).all()) for v, (_, (m, a, _)) in zip(vals, samples)]
          for name, vals in rules.items()}
    ok["broadcast"] = [k or bool(_close(np.full(int(m.sum()), h), a[m], *tol["broadcast"]).all())
                       for k, h, (_, (m, a, _)) in zip(ok["broadcast"], held, samples)]
    best = max(rules, key=lambda n: (sum(ok[n]), n == "broadcast"))
    if not any(ok[best]) and "whitened" not in rules:
        notes.append(f"step {step}: advantages do not follow the trainer's rewards (broadcast), and whitening "
                     "(--normalize-advantages) needs every rank's train dump of the step: not compared")
        return None, [], notes
    out = []
    for k, (p, (m, a, _)) in enumerate(samples):
        if ok[best][k]:
            continue
        e = rules[best][k]
        bad = np.flatnonzero(m & ~_close(e, a, *tol[best]))
        i = int(bad[0])
        rec = diff.record(step, p, "advantages", where_of(p), td.display,
                          {"index": i, "expected": float(e[i]), "got": float(a[i]), "differing": len(bad)})
        out.append(rec)
    return best, out, notes
