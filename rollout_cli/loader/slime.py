"""slime's train_data form of a PackedBatch: what `tensorize_rollout_data_for_training` hands
slime's trainer (slime-spec section 6), keys and dtypes, with the --schedule slime keys
(`partition`, the whole step's lists, `micro_batch_indices`) for a scheduled shard."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..core.errors import UsageError

if TYPE_CHECKING:
    from .batch import PackedBatch

__all__ = ["train_data"]


def train_data(batch: "PackedBatch") -> dict[str, Any]:
    """This shard as slime's train_data dict after `tensorize_rollout_data_for_training`
    (slime-spec section 6): tokens list of int64 tensors, loss_masks list of int32 tensors,
    rollout/teacher log-probs lists of float32 tensors (when present), rollout_mask_sums one
    float32 tensor, and plain Python lists for response_lengths, rewards, raw_reward,
    truncated (0/1), sample_indices (None where null), rollout_ids, total_lengths,
    round_number and source_names (when present).  Keys in slime's order.

    The per-sample tensors are views of one tensor per key (contiguous each), on the batch's
    device.  raw_reward is always a float (slime's own fallback can put a reward dict there).
    The loss denominators (group_mask_sums, step_mask_sum, ...) are not slime keys (its
    trainer reads none of them): take them from the batch's own fields.
    """
    n = batch.num_samples
    tot = batch.total_lengths.tolist()
    resp = batch.response_lengths.tolist()
    valid_idx = batch.sample_indices >= 0
    d: dict[str, Any] = {
        "tokens": list(torch.split(batch.tokens.to(torch.int64), tot)) if n else [],
        "response_lengths": resp,
        "rewards": batch.rewards.tolist(),
        "raw_reward": batch.raw_rewards.tolist(),
        "truncated": batch.truncated.to(torch.int64).tolist(),
        "sample_indices": [v if ok else None for v, ok in zip(batch.sample_indices.tolist(), valid_idx.tolist())],
        "rollout_ids": batch.rollout_ids.tolist(),
        "loss_masks": list(torch.split(batch.loss_mask.to(torch.int32), resp)) if n else [],
        "rollout_mask_sums": batch.rollout_mask_sums.to(torch.float32),
    }
    if batch.round_numbers is not None:
        d["round_number"] = [v if v >= 0 else None for v in batch.round_numbers.tolist()]
    if batch.rollout_log_probs is not None:
        d["rollout_log_probs"] = list(torch.split(batch.rollout_log_probs, resp)) if n else []
    if batch.teacher_log_probs is not None:
        d["teacher_log_probs"] = list(torch.split(batch.teacher_log_probs, resp)) if n else []
    if batch.source_names is not None:
        d["source_names"] = list(batch.source_names)
    d["total_lengths"] = tot
    if batch.scheduled:
        return _with_schedule(batch, d)
    return d


def _with_schedule(batch: "PackedBatch", d: dict[str, Any]) -> dict[str, Any]:
    """Rank r's payload as slime's trainer receives it (slime-spec section 6): the per-sample
    keys, then `partition`, the whole step's raw_reward and total_lengths (in position order,
    dropped trailing samples included), and the schedule keys."""
    if batch.schedule is None or batch._whole_batch is None:
        raise UsageError(f"{batch.split} step {batch.step} shard {batch.shard}: the step's schedule record is "
                         "missing; load it through open_dataset(...).load()")
    raw_reward, total_lengths = batch._whole_batch()
    d.pop("total_lengths")
    d["partition"] = batch.rollout_positions.tolist()
    d["raw_reward"] = raw_reward
    d["total_lengths"] = total_lengths
    d["global_batch_sizes"] = list(batch.schedule["global_batch_sizes"])
    d["num_microbatches"] = list(batch.schedule["num_microbatches"])
    d["micro_batch_indices"] = [list(range(a, b)) for a, b in batch.micro_batch_bounds()]
    return d
