"""Stage 4b: per-rollout, per-group and per-step fields derived from the assigned ids: the
denominators of every loss aggregation, so that a rank divides its local sums by stored numbers."""
from __future__ import annotations

import numpy as np

from .rewards import rollout_units

# The per-step columns, also recorded per step in the manifest under the same names.
STEP_FIELDS = ("step_mask_sum", "step_rollouts", "step_samples", "step_groups")


def rollout_mask_sums(rollout_ids: np.ndarray, mask_totals: np.ndarray) -> np.ndarray:
    """For each sample, the sum of loss-mask totals over all samples sharing its rollout id
    (computed after `remove_sample` zeroing, as slime does; a fully removed rollout gives 0)."""
    if not len(rollout_ids):
        return np.zeros(0, dtype=np.int64)
    uniq, inverse = np.unique(rollout_ids, return_inverse=True)
    sums = np.bincount(inverse, weights=mask_totals.astype(np.float64), minlength=len(uniq))
    return np.rint(sums).astype(np.int64)[inverse]


def group_fields(gid: np.ndarray, rollout_ids: np.ndarray, mask_totals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group_mask_sum, group_rollouts) per sample, for prompt-group labels `gid` (see
    rewards.group_labels): the loss-mask total of its group (after `remove_sample` zeroing) and
    the number of distinct rollouts in the group."""
    if not len(gid):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    n_groups = int(gid.max()) + 1
    sums = np.rint(np.bincount(gid, weights=np.asarray(mask_totals, dtype=np.float64), minlength=n_groups)).astype(np.int64)
    _, unit_group = rollout_units(gid, rollout_ids)
    rollouts = np.bincount(unit_group, minlength=n_groups).astype(np.int64)
    return sums[gid], rollouts[gid]


def step_fields(rollout_ids: np.ndarray, mask_totals: np.ndarray, gid: np.ndarray) -> dict[str, int]:
    """The step's loss-mask total, distinct rollouts, samples and prompt groups (labels `gid`, as
    for group_fields), over the rows written."""
    return {
        "step_mask_sum": int(np.asarray(mask_totals, dtype=np.int64).sum()),
        "step_rollouts": int(len(np.unique(rollout_ids))),
        "step_samples": int(len(rollout_ids)),
        "step_groups": int(len(np.unique(gid))),
    }
