"""Loss weight: how much of a step's gradient each rollout carries under each aggregation of
the "Loss denominators" table (docs/rules.md), from the same denominator columns.

Under a mode, each response token of sample i weighs w_i (the table's divisor), so the sample
carries W_i = w_i * M_i (M_i its loss-mask total after remove_sample). A rollout's share is the
sum of W_i over its samples divided by the sum over the step: shares add up to 1 per step and
mode (all 0 when no token of the step is trained). `total_weight` is the sum of W_i itself, the
scale of the step's loss under the mode (null for the constant divisor, whose L is the
trainer's setting). Which rollouts move most: the largest spread (max - min share over modes).
"""
from __future__ import annotations

import numpy as np

from ..output.loss import divisors
from ..pipeline.fields import group_fields, rollout_mask_sums, step_fields
from ..pipeline.rewards import group_labels

# mode -> the table's row
MODES = {
    "token_mean": "token-mean: Σ x·m / step_mask_sum",
    "seq_mean_token_mean": "seq-mean-token-mean: Σ (Σ_t x·m / max(M_i, 1)) / step_samples",
    "rollout_mean": "per rollout (slime): Σ x·m / max(rollout_mask_sum_i, 1) / step_rollouts",
    "seq_mean_token_sum": "seq-mean-token-sum: Σ x·m / step_samples",
    "prompt_mean": "per-prompt mean: Σ x·m / (group_mask_sum_i · step_groups)",
    "prompt_mean_by_rollouts": "per prompt, by rollouts: Σ x·m · group_rollouts_i / (group_mask_sum_i · step_rollouts)",
    "constant": "constant divisor: Σ x·m / (step_samples · L)",
}
MOVERS = 5


def token_weights(mask_totals, rollout_sums, group_sums, group_rollouts, totals: dict) -> dict[str, np.ndarray]:
    """Per sample, the weight of each of its trained tokens under every mode (L = 1 for the
    constant divisor: only its shares are meaningful). The modes a batch's token_weights has
    take their divisors from output/loss.py (a divisor 0 gives 0: such a sample trains no token)."""
    m = np.asarray(mask_totals, dtype=np.float64)
    rs = np.asarray(rollout_sums, dtype=np.float64)
    gs = np.asarray(group_sums, dtype=np.float64)

    def per_token(aggregation: str, constant=None) -> np.ndarray:
        d = divisors(aggregation, m, rs, gs, totals, constant)
        return np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)

    group = per_token("group_mean") * max(totals["step_groups"], 1)  # 1 / group_mask_sum
    return {
        "token_mean": per_token("token_mean"),
        "seq_mean_token_mean": per_token("sample_mean"),
        "rollout_mean": per_token("rollout_mean"),
        "seq_mean_token_sum": np.full(len(m), 1.0 / max(totals["step_samples"], 1)),
        "prompt_mean": per_token("group_mean"),
        "prompt_mean_by_rollouts": group * np.asarray(group_rollouts, dtype=np.float64) / max(totals["step_rollouts"], 1),
        "constant": per_token("constant", 1),
    }


def loss_weight(rollout_ids, mask_totals, rollout_sums, group_sums, group_rollouts, totals: dict, *,
                full: bool = True) -> dict:
    """`{"modes": {mode: {"total_weight"}}, "rollouts": [{rollout_id, samples, mask_sum, share:
    {mode: x}, spread}], "movers": [the MOVERS rollouts of largest spread]}` for one step's kept
    rows; `full=False` leaves the per-rollout list out (movers only)."""
    ids = np.asarray(rollout_ids, dtype=np.int64)
    m = np.asarray(mask_totals, dtype=np.float64)
    weights = token_weights(m, rollout_sums, group_sums, group_rollouts, totals)
    uniq, inv = np.unique(ids, return_inverse=True) if len(ids) else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    shares, modes = {}, {}
    for mode, w in weights.items():
        per_rollout = np.bincount(inv, weights=w * m, minlength=len(uniq)) if len(ids) else np.zeros(0)
        total = float(per_rollout.sum())
        shares[mode] = per_rollout / total if total > 0 else np.zeros(len(uniq))
        modes[mode] = {"total_weight": None if mode == "constant" else total}
    stacked = np.vstack(list(shares.values())) if len(uniq) else np.zeros((len(MODES), 0))
    spread = stacked.max(axis=0) - stacked.min(axis=0) if len(uniq) else np.zeros(0)
    samples = np.bincount(inv, minlength=len(uniq)) if len(ids) else np.zeros(0, np.int64)
    masks = np.bincount(inv, weights=m, minlength=len(uniq)) if len(ids) else np.zeros(0)

    def row(k: int) -> dict:
        return {"rollout_id": int(uniq[k]), "samples": int(samples[k]), "mask_sum": int(round(masks[k])),
                "share": {mode: float(shares[mode][k]) for mode in MODES}, "spread": float(spread[k])}

    order = np.lexsort((uniq, -spread))[:MOVERS] if len(uniq) else []
    out = {"modes": modes, "movers": [row(int(k)) for k in order]}
    if full:
        out["rollouts"] = [row(k) for k in range(len(uniq))]
    return out


def from_rows(rows, *, full: bool = False) -> dict:
    """loss_weight of a step's ROW_SCHEMA rows (inspect's): the denominators derived from its
    rollout ids, prompt groups and mask sums by the functions convert writes them with."""
    ids = rows.column("rollout_id").to_numpy(zero_copy_only=False)
    masks = rows.column("mask_sum").to_numpy(zero_copy_only=False)
    labels = group_labels(rows.column("pgroup").to_pylist())
    g_sums, g_rollouts = group_fields(labels, ids, masks)
    return loss_weight(ids, masks, rollout_mask_sums(ids, masks), g_sums, g_rollouts, step_fields(ids, masks, labels),
                       full=full)
