"""Stage 4b: per-rollout fields derived from the assigned ids."""
from __future__ import annotations

import numpy as np


def rollout_mask_sums(rollout_ids: np.ndarray, mask_totals: np.ndarray) -> np.ndarray:
    """For each sample, the sum of loss-mask totals over all samples sharing its rollout id
    (computed after `remove_sample` zeroing, as slime does; a fully removed rollout gives 0)."""
    if not len(rollout_ids):
        return np.zeros(0, dtype=np.int64)
    uniq, inverse = np.unique(rollout_ids, return_inverse=True)
    sums = np.bincount(inverse, weights=mask_totals.astype(np.float64), minlength=len(uniq))
    return np.rint(sums).astype(np.int64)[inverse]
