"""Stage 4a: reward post-processing (slime's `_post_process_rewards`, grouped correctly).

Default: groups by `group_index` (consecutive chunks of n only where it is missing), over the
surviving samples, float32, unbiased std, eps 1e-6; a one-sample group gives 0.0, never NaN.
`rollout_baseline_rewards` is the same rule with one member per rollout instead of per sample
(the rollout's reward, broadcast back to its samples).
`slime_compat_rewards` reproduces slime's position-based rule with torch, bit for bit.
The rules by name (`group`, `group_rollout`, `slime_positional`, `raw`) are REWARD_RULES, at
the end: `convert` runs the one its options choose, `audit` names the one a trainer ran.
"""
from __future__ import annotations

import numpy as np

from ..core.errors import UsageError
from ..core.schema import MEAN_CENTRED_ESTIMATORS, STD_SCALED_ESTIMATORS

EPS = np.float32(1e-6)


def group_keys(group_index: list, n_samples_per_prompt: int | None) -> list:
    """One key per sample: its group_index, or (for samples without one) its chunk of n."""
    keys: list = []
    k = 0
    for g in group_index:
        if g is None:
            if not n_samples_per_prompt:
                raise ValueError("group_index missing")
            keys.append(("chunk", k // n_samples_per_prompt))
            k += 1
        else:
            keys.append(g)
    return keys


def group_labels(keys: list) -> np.ndarray:
    """int64 label per key: groups numbered in order of first appearance."""
    index: dict = {}
    return np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.int64, count=len(keys))


def rollout_units(gid: np.ndarray, rollout_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unit per row, group label per unit): a unit is one rollout within one prompt group
    (a rollout merged across groups by --rollout-id-scope step is one unit in each)."""
    if not len(gid):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    pairs = np.stack([np.asarray(gid, dtype=np.int64), np.asarray(rollout_ids, dtype=np.int64)], axis=1)
    uniq, unit = np.unique(pairs, axis=0, return_inverse=True)
    return unit.reshape(-1).astype(np.int64), uniq[:, 0]


class SiblingRewardConflict(ValueError):
    """Samples of one rollout carry different rewards under --reward-baseline rollout."""

    def __init__(self, rollout_id: int, rows: list[int], values: list[float]):
        super().__init__(f"rollout {rollout_id}: its samples carry different rewards {values}")
        self.rollout_id, self.rows, self.values = rollout_id, rows, values


def rollout_rewards(values: np.ndarray, unit: np.ndarray, rollout_ids: np.ndarray, n_units: int,
                    sibling_reward: str = "error") -> np.ndarray:
    """float32 reward per unit: the siblings' common reward, or their mean with `sibling_reward`
    "mean". Raises SiblingRewardConflict on the first unit (in row order) whose siblings differ."""
    v = np.asarray(values, dtype=np.float64)
    lo = np.full(n_units, np.inf)
    hi = np.full(n_units, -np.inf)
    np.minimum.at(lo, unit, v)
    np.maximum.at(hi, unit, v)
    differ = lo != hi
    if differ.any() and sibling_reward != "mean":
        row = int(np.flatnonzero(differ[unit])[0])
        rows = np.flatnonzero(unit == unit[row]).tolist()
        raise SiblingRewardConflict(int(rollout_ids[row]), rows, v[rows].tolist())
    x = v.astype(np.float32)
    sums = np.bincount(unit, weights=x.astype(np.float64), minlength=n_units)
    counts = np.bincount(unit, minlength=n_units)
    return (sums / np.maximum(counts, 1)).astype(np.float32)


def rollout_baseline_rewards(
    values: np.ndarray,
    keys: list,
    rollout_ids: np.ndarray,
    *,
    sibling_reward: str = "error",
    **rule,
) -> np.ndarray:
    """Post-processed rewards (float32) with each rollout counted once in its prompt group's mean
    and std: the group rule of `normalize_rewards` over the rollouts' rewards, broadcast back to
    every sample of the rollout. `rule` takes normalize_rewards' keyword arguments."""
    unit, unit_group = rollout_units(group_labels(keys), rollout_ids)
    per_unit = rollout_rewards(values, unit, rollout_ids, len(unit_group), sibling_reward)
    return normalize_rewards(per_unit, unit_group.tolist(), **rule)[unit]


def baseline_shift(values: np.ndarray, keys: list, rollout_ids: np.ndarray) -> list[dict]:
    """Per prompt group whose sample-weighted and rollout-weighted reward means differ: its
    first row, sample and rollout counts, both means and their difference (rollout - sample)."""
    if not len(values):
        return []
    v = np.asarray(values, dtype=np.float64)
    gid = group_labels(keys)
    unit, unit_group = rollout_units(gid, rollout_ids)
    n_groups = int(gid.max()) + 1
    n_units = len(unit_group)
    per_unit = np.bincount(unit, weights=v, minlength=n_units) / np.bincount(unit, minlength=n_units)
    samples = np.bincount(gid, minlength=n_groups)
    rollouts = np.bincount(unit_group, minlength=n_groups)
    sample_mean = np.bincount(gid, weights=v, minlength=n_groups) / samples
    rollout_mean = np.bincount(unit_group, weights=per_unit, minlength=n_groups) / rollouts
    diff = rollout_mean - sample_mean
    # below float32 resolution of the means the two baselines give the same rewards
    tol = 1e-6 * np.maximum(1.0, np.abs(sample_mean))
    first = np.full(n_groups, len(v))
    np.minimum.at(first, gid, np.arange(len(v)))
    return [
        {"row": int(first[g]), "samples": int(samples[g]), "rollouts": int(rollouts[g]),
         "sample_mean": float(sample_mean[g]), "rollout_mean": float(rollout_mean[g]), "shift": float(diff[g])}
        for g in np.flatnonzero(np.abs(diff) > tol).tolist()
    ]


def normalize_rewards(
    values: np.ndarray,
    keys: list,
    *,
    advantage_estimator: str = "grpo",
    rewards_normalization: bool = True,
    grpo_std_normalization: bool = True,
    n_samples_per_prompt: int | None = None,
) -> np.ndarray:
    """Post-processed rewards (float32) for the given selected rewards and group keys."""
    x = np.asarray(values, dtype=np.float32)
    if not rewards_normalization or advantage_estimator not in MEAN_CENTRED_ESTIMATORS:
        return x.copy()
    scale = advantage_estimator in STD_SCALED_ESTIMATORS and grpo_std_normalization and n_samples_per_prompt != 1
    out = np.zeros(len(x), dtype=np.float32)
    if not len(x):
        return out
    gid = group_labels(keys)
    order = np.argsort(gid, kind="stable")
    bounds = np.flatnonzero(np.r_[True, gid[order][1:] != gid[order][:-1], True])
    for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        members = order[s:e]
        g = x[members]
        mean = np.float32(g.astype(np.float64).mean())
        centred = g - mean
        if scale and len(g) > 1:
            std = np.float32(g.astype(np.float64).std(ddof=1))
            centred = centred / (std + EPS)
        out[members] = centred
    return out


def slime_compat_note(
    size: int,
    *,
    advantage_estimator: str,
    rewards_normalization: bool,
    n_samples_per_prompt: int | None,
    rollout_batch_size: int,
) -> str | None:
    """What `slime_compat_rewards` (slime's rule) does with a batch that does not hold
    n x rollout_batch_size samples: it normalises the whole batch as one group. None where the
    batch is that size, is empty, or its rewards are not normalised at all. An n not given is
    slime's default, 1."""
    if not rewards_normalization or advantage_estimator not in MEAN_CENTRED_ESTIMATORS or not size:
        return None
    n = n_samples_per_prompt or 1
    if size == n * rollout_batch_size:
        return None
    given = "" if n_samples_per_prompt else " (no --n-samples-per-prompt: slime's default 1)"
    return f"{size} samples, not {n} × {rollout_batch_size}{given}: normalised as one group, as slime does"


def slime_row_length(size: int, n_samples_per_prompt: int | None, rollout_batch_size: int | None) -> int:
    """The length of slime's reward rows for a batch of `size` samples
    (slime@624b824a:slime/ray/rollout.py:619-623, `_post_process_rewards`): n_samples_per_prompt
    consecutive samples when the batch holds exactly n x rollout_batch_size, else the whole batch."""
    n, rbs = n_samples_per_prompt, rollout_batch_size
    return n if n and rbs and n * rbs == size else size


def slime_compat_rewards(
    values: np.ndarray,
    *,
    advantage_estimator: str,
    rewards_normalization: bool,
    grpo_std_normalization: bool,
    n_samples_per_prompt: int,
    rollout_batch_size: int,
) -> np.ndarray:
    """slime's `_post_process_rewards` exactly: rows of n consecutive samples when the batch
    holds n x rollout_batch_size samples, else the whole batch as one row (NaN included)."""
    try:
        import torch
    except ImportError:
        raise UsageError("--slime-compat computes rewards with torch, as slime does: pip install 'rollout-cli[torch]'") from None
    x = np.asarray(values, dtype=np.float64)
    if not rewards_normalization or advantage_estimator not in MEAN_CENTRED_ESTIMATORS:
        return x.astype(np.float32)
    if n_samples_per_prompt == 1:
        grpo_std_normalization = False  # slime's parse_args
    t = torch.tensor(x.tolist(), dtype=torch.float)
    t = t.view(-1, slime_row_length(t.numel(), n_samples_per_prompt, rollout_batch_size) or 1)
    t = t - t.mean(dim=-1, keepdim=True)
    if advantage_estimator in STD_SCALED_ESTIMATORS and grpo_std_normalization:
        std = t.std(dim=-1, keepdim=True)
        t = t / (std + 1e-6)
    return t.flatten().numpy().astype(np.float32)


# ------------------------------------------------------------------------------ named rules
# Each reward rule by name: (selected rewards, prompt-group keys, rollout ids, options) ->
# post-processed float32 rewards. `options` is a RuleOptions (or anything with its reward
# fields). `convert` runs `expected_reward_rule(options)`; `audit` tries them all against
# what a trainer computed. The source each one reproduces is in REWARD_RULE_SOURCES.


def _rule_kwargs(opts) -> dict:
    return dict(advantage_estimator=opts.advantage_estimator, rewards_normalization=opts.rewards_normalization,
                grpo_std_normalization=opts.grpo_std_normalization, n_samples_per_prompt=opts.n_samples_per_prompt)


def _group_rule(values, keys, rollout_ids, opts) -> np.ndarray:
    return normalize_rewards(values, keys, **_rule_kwargs(opts))


def _group_rollout_rule(values, keys, rollout_ids, opts) -> np.ndarray:
    return rollout_baseline_rewards(values, keys, rollout_ids, sibling_reward=opts.sibling_reward, **_rule_kwargs(opts))


def _slime_positional_rule(values, keys, rollout_ids, opts) -> np.ndarray:
    kw = _rule_kwargs(opts)
    kw["n_samples_per_prompt"] = opts.n_samples_per_prompt or 1
    return slime_compat_rewards(values, rollout_batch_size=opts.rollout_batch_size or 0, **kw)


def _raw_rule(values, keys, rollout_ids, opts) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).copy()


REWARD_RULES = {
    "group": _group_rule,  # by group_index, each sample once (rollout-cli's default)
    "group_rollout": _group_rollout_rule,  # each rollout once in its prompt group (--reward-baseline rollout)
    "slime_positional": _slime_positional_rule,  # slime's rows of n, or the whole batch (--slime-compat)
    "raw": _raw_rule,  # no normalisation
}
REWARD_RULE_SOURCES = {
    "group": "rollout-cli's group rule (slime's own grpo_normalize_by_group_index, slime/rollout/_fanout_test_helpers.py)",
    "group_rollout": "rollout-cli's --reward-baseline rollout (one member per rollout in its prompt group)",
    "slime_positional": "slime's _post_process_rewards (RolloutManager, slime/ray/rollout.py at 624b824a)",
    "raw": "no normalisation (the selected rewards as float32)",
}


def expected_reward_rule(opts) -> str:
    """The reward rule `convert` runs with these options."""
    if getattr(opts, "slime_compat", False):
        return "slime_positional"
    return "group_rollout" if getattr(opts, "reward_baseline", "sample") == "rollout" else "group"


def apply_reward_rule(name: str, values: np.ndarray, keys: list, rollout_ids: np.ndarray, opts) -> np.ndarray:
    """The rewards of rule `name` (REWARD_RULES) for one step's kept rows. `group_rollout`
    raises SiblingRewardConflict, `slime_positional` UsageError without torch.

    A row whose reward was not recorded (NaN: validation lets only a format with
    rewards_recorded=False give one, every recorded reward is finite) takes no part: the rule
    runs over the recorded rows alone (a prompt group's mean and std are those of its recorded
    rewards) and the row's reward stays NaN, written as null."""
    v = np.asarray(values, dtype=np.float64)
    recorded = ~np.isnan(v)
    if recorded.all():
        return REWARD_RULES[name](values, keys, rollout_ids, opts)
    out = np.full(len(v), np.nan, dtype=np.float32)
    if recorded.any():
        idx = np.flatnonzero(recorded)
        out[idx] = REWARD_RULES[name](v[idx], [keys[i] for i in idx.tolist()], np.asarray(rollout_ids)[idx], opts)
    return out
