"""slime's train_data form of a PackedBatch: what `tensorize_rollout_data_for_training` hands
slime's trainer (slime-spec section 6), keys and dtypes, with the --schedule slime keys
(`partition`, the whole step's lists, `micro_batch_indices`) for a scheduled shard."""
from __future__ import annotations

from typing import Any

import torch

from ..core import slime_keys as K
from ..core.errors import UsageError

__all__ = ["train_data"]

# `batch` below is a loader.batch.PackedBatch (which imports this module: no import back)


def train_data(batch) -> dict[str, Any]:
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
        K.TOKENS: list(torch.split(batch.tokens.to(torch.int64), tot)) if n else [],
        K.RESPONSE_LENGTHS: resp,
        K.REWARDS: batch.rewards.tolist(),
        K.RAW_REWARD: batch.raw_rewards.tolist(),
        K.TRUNCATED: batch.truncated.to(torch.int64).tolist(),
        K.SAMPLE_INDICES: [v if ok else None for v, ok in zip(batch.sample_indices.tolist(), valid_idx.tolist())],
        K.ROLLOUT_IDS: batch.rollout_ids.tolist(),
        K.LOSS_MASKS: list(torch.split(batch.loss_mask.to(torch.int32), resp)) if n else [],
        K.ROLLOUT_MASK_SUMS: batch.rollout_mask_sums.to(torch.float32),
    }
    if batch.round_numbers is not None:
        d[K.ROUND_NUMBER] = [v if v >= 0 else None for v in batch.round_numbers.tolist()]
    if batch.rollout_log_probs is not None:
        d[K.ROLLOUT_LOG_PROBS] = list(torch.split(batch.rollout_log_probs, resp)) if n else []
    if batch.teacher_log_probs is not None:
        d[K.TEACHER_LOG_PROBS] = list(torch.split(batch.teacher_log_probs, resp)) if n else []
    mm = batch.extras.get(K.MULTIMODAL_TRAIN_INPUTS)
    if mm and any(v is not None for v in mm):  # slime: present when any sample has it, None kept
        d[K.MULTIMODAL_TRAIN_INPUTS] = list(mm)
    if batch.source_names is not None:
        d[K.SOURCE_NAMES] = list(batch.source_names)
    d[K.TOTAL_LENGTHS] = tot
    if batch.scheduled:
        return _with_schedule(batch, d)
    return d


def _with_schedule(batch, d: dict[str, Any]) -> dict[str, Any]:
    """Rank r's payload as slime's trainer receives it (slime-spec section 6): the per-sample
    keys, then `partition`, the whole step's raw_reward and total_lengths (in position order,
    dropped trailing samples included), and the schedule keys."""
    if batch.schedule is None or batch._whole_batch is None:
        raise UsageError(f"{batch.split} step {batch.step} shard {batch.shard}: the step's schedule record is "
                         "missing; load it through open_dataset(...).load()")
    raw_reward, total_lengths = batch._whole_batch()
    d.pop(K.TOTAL_LENGTHS)
    d[K.PARTITION] = batch.rollout_positions.tolist()
    d[K.RAW_REWARD] = raw_reward
    d[K.TOTAL_LENGTHS] = total_lengths
    d[K.GLOBAL_BATCH_SIZES] = list(batch.schedule["global_batch_sizes"])
    d[K.NUM_MICROBATCHES] = list(batch.schedule["num_microbatches"])
    d["micro_batch_indices"] = [list(range(a, b)) for a, b in batch.micro_batch_bounds()]
    return d
