"""Stage 4a: reward post-processing (slime's `_post_process_rewards`, grouped correctly).

Default: groups by `group_index` (consecutive chunks of n only where it is missing), over the
surviving samples, float32, unbiased std, eps 1e-6; a one-sample group gives 0.0, never NaN.
`slime_compat_rewards` reproduces slime's position-based rule with torch, bit for bit.
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
    # group members, in order of first appearance
    index: dict = {}
    gid = np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.int64, count=len(keys))
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
    if t.numel() == n_samples_per_prompt * rollout_batch_size:
        t = t.reshape(-1, n_samples_per_prompt)
    else:
        t = t.view(1, -1)
    t = t - t.mean(dim=-1, keepdim=True)
    if advantage_estimator in STD_SCALED_ESTIMATORS and grpo_std_normalization:
        std = t.std(dim=-1, keepdim=True)
        t = t / (std + 1e-6)
    return t.flatten().numpy().astype(np.float32)
