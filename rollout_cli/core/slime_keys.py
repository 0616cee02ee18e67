"""slime's key names, in one place: the keys of its `train_data` dict
(`RolloutManager._convert_samples_to_train_data`, slime-spec section 6), and those of its
train-side debug dump (`observability/train_data_utils._build_dump_payload`). The loader's
`to_slime_train_data`, the slime hooks, the train-dump readers and the audit all name keys from
here; the train-row column each one comes from is `BY_COLUMN`."""
from __future__ import annotations

# ------------------------------------------------------------------ train_data, per sample
TOKENS = "tokens"
RESPONSE_LENGTHS = "response_lengths"
REWARDS = "rewards"
RAW_REWARD = "raw_reward"
TRUNCATED = "truncated"
SAMPLE_INDICES = "sample_indices"
ROLLOUT_IDS = "rollout_ids"
LOSS_MASKS = "loss_masks"
ROLLOUT_MASK_SUMS = "rollout_mask_sums"
ROUND_NUMBER = "round_number"
ROLLOUT_LOG_PROBS = "rollout_log_probs"
TEACHER_LOG_PROBS = "teacher_log_probs"
ROLLOUT_TOP_P_TOKEN_IDS = "rollout_top_p_token_ids"
ROLLOUT_TOP_P_TOKEN_OFFSETS = "rollout_top_p_token_offsets"
ROLLOUT_ROUTED_EXPERTS = "rollout_routed_experts"
SOURCE_NAMES = "source_names"
TOTAL_LENGTHS = "total_lengths"
METADATA = "metadata"
MULTIMODAL_TRAIN_INPUTS = "multimodal_train_inputs"
# ------------------------------------------------------------------ train_data, per rank (the schedule)
PARTITION = "partition"
GLOBAL_BATCH_SIZES = "global_batch_sizes"
NUM_MICROBATCHES = "num_microbatches"

# train-row column (core/schema.py) -> its train_data key
BY_COLUMN = {
    "tokens": TOKENS,
    "response_length": RESPONSE_LENGTHS,
    "reward": REWARDS,
    "raw_reward": RAW_REWARD,
    "truncated": TRUNCATED,
    "sample_index": SAMPLE_INDICES,
    "rollout_id": ROLLOUT_IDS,
    "loss_mask": LOSS_MASKS,
    "rollout_mask_sum": ROLLOUT_MASK_SUMS,
    "round_number": ROUND_NUMBER,
    "rollout_log_probs": ROLLOUT_LOG_PROBS,
    "teacher_log_probs": TEACHER_LOG_PROBS,
    "rollout_top_p_token_ids": ROLLOUT_TOP_P_TOKEN_IDS,
    "rollout_top_p_token_offsets": ROLLOUT_TOP_P_TOKEN_OFFSETS,
    "rollout_routed_experts": ROLLOUT_ROUTED_EXPERTS,
    "source_name": SOURCE_NAMES,
    "total_length": TOTAL_LENGTHS,
    "train_metadata": METADATA,
    "multimodal_train_inputs": MULTIMODAL_TRAIN_INPUTS,
}

# ------------------------------------------------------------------ the train-side dump
FORMAT_VERSION = "format_version"  # its mark: a rollout dump has none
ROLLOUT_ID = "rollout_id"  # the step (also a rollout dump's step key)
RANK = "rank"
SAMPLES = "samples"
DP_SHARDS = "dp_shards"
ROLLOUT_POSITION = "rollout_position"  # a sample's place in the rollout dump
LOG_PROBS = "log_probs"
REF_LOG_PROBS = "ref_log_probs"
ADVANTAGES = "advantages"
REMOVE_SAMPLE = "remove_sample"
# a dump sample's keys holding one value per response token (CP shards re-gathered before slime
# writes them)
DUMP_TOKEN_KEYS = (LOSS_MASKS, ROLLOUT_LOG_PROBS, TEACHER_LOG_PROBS, LOG_PROBS, REF_LOG_PROBS, "values",
                   ADVANTAGES, "returns", "kl", "entropy", "opd_reverse_kl")
# a dump sample's keys holding one value per sample
DUMP_SCALAR_KEYS = (RESPONSE_LENGTHS, REWARDS, ROLLOUT_IDS, TRUNCATED, ROLLOUT_MASK_SUMS, TOTAL_LENGTHS)
