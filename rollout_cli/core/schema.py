"""The train-row schema (the output contract), slime's key names, and the sample fields read."""
from __future__ import annotations

import pyarrow as pa

from . import slime_keys
from .tensors import HF_FEATURES, IMAGES_TYPE, MM_TYPE
from .versions import MULTIMODAL_TYPED_VERSION, READ_SCHEMA_VERSIONS, SCHEMA_VERSION  # noqa: F401 (stamped on every shard)

STATUSES = ("pending", "completed", "truncated", "aborted", "failed")

# slime: normalisation runs for these estimators only; std-scaling for the first three only.
MEAN_CENTRED_ESTIMATORS = frozenset({"grpo", "gspo", "cispo", "reinforce_plus_plus_baseline"})
STD_SCALED_ESTIMATORS = frozenset({"grpo", "gspo", "cispo"})

INT32_MAX = 2**31 - 1

_i32_list = pa.list_(pa.int32())
_f32_list = pa.list_(pa.float32())

# Always present, never null (sample_index and group_index may be null).
CORE_FIELDS: list[pa.Field] = [
    pa.field("step", pa.int64(), nullable=False),
    pa.field("rollout_id", pa.int64(), nullable=False),
    pa.field("sample_index", pa.int64()),
    pa.field("group_index", pa.int64()),
    pa.field("tokens", _i32_list, nullable=False),
    pa.field("response_length", pa.int32(), nullable=False),
    pa.field("total_length", pa.int32(), nullable=False),
    pa.field("loss_mask", pa.list_(pa.uint8()), nullable=False),
    # slime's Sample.remove_sample: the loss mask above is zeroed, the sample still counts
    pa.field("remove_sample", pa.bool_(), nullable=False),
    # null where the framework recorded no reward (a format with rewards_recorded=False,
    # inputs/format.py; schema version 4 on): such rows take no part in reward normalisation
    pa.field("reward", pa.float32()),
    pa.field("raw_reward", pa.float64()),
    pa.field("truncated", pa.bool_(), nullable=False),
    pa.field("status", pa.string(), nullable=False),
    pa.field("rollout_mask_sum", pa.int64(), nullable=False),
    # loss denominators (README "Loss denominators"): of the sample's prompt group, and of its step
    pa.field("group_mask_sum", pa.int64(), nullable=False),
    pa.field("group_rollouts", pa.int64(), nullable=False),
    pa.field("step_mask_sum", pa.int64(), nullable=False),
    pa.field("step_rollouts", pa.int64(), nullable=False),
    pa.field("step_samples", pa.int64(), nullable=False),
    pa.field("step_groups", pa.int64(), nullable=False),
    # the selected reward (reward, or reward[--reward-key]) before post-processing, which
    # `export` writes back (null with reward)
    pa.field("selected_reward", pa.float64()),
    # the row's place in its step's input order, 0-based over the rows kept: slime's
    # `partition` entry (and its train dump's rollout_position); shards interleave by it
    pa.field("rollout_position", pa.int64(), nullable=False),
    # the tokens are the ids the policy sampled (false: a text dump tokenized by convert
    # --tokenizer, inputs/textdump.py; schema version 5 on, older outputs read as true)
    pa.field("token_exact", pa.bool_(), nullable=False),
]

# Always present in every shard; null where the input lacks them.
OPTIONAL_FIELDS: list[pa.Field] = [
    pa.field("rollout_log_probs", _f32_list),
    pa.field("teacher_log_probs", _f32_list),
    pa.field("rollout_top_p_token_ids", _i32_list),
    pa.field("rollout_top_p_token_offsets", _i32_list),
    pa.field("rollout_routed_experts", _i32_list),
    pa.field("rollout_routed_experts_shape", _i32_list),
    pa.field("round_number", pa.int64()),
    pa.field("source_name", pa.string()),
    pa.field("train_metadata", pa.string()),
    # one entry per key: a tensor as dtype, shape and bytes, any other value as JSON text
    # (core/tensors.py); JSON text of the whole dict before MULTIMODAL_TYPED_VERSION
    pa.field("multimodal_train_inputs", MM_TYPE),
    pa.field("multimodal_train_input_id", pa.string()),
    # sample.multimodal_inputs["images"] as PNG bytes, laid out as Hugging Face's Image feature
    pa.field("images", IMAGES_TYPE),
    # the policy versions that generated the sample, one per generation call, as the framework
    # names them (slime's Sample.weight_versions); null where it recorded none
    pa.field("weight_versions", pa.list_(pa.string())),
]

# Always present; set by `convert --schedule slime` (null under the balanced layout): the row's
# optimizer step within the rollout step, and its micro-batch within the rank's optimizer step.
SCHEDULE_COLUMNS: list[pa.Field] = [
    pa.field("optimizer_step", pa.int32()),
    pa.field("micro_batch", pa.int32()),
]

# Only with `convert --keep-text`.
TEXT_FIELDS: list[pa.Field] = [
    pa.field("prompt", pa.string()),
    pa.field("response", pa.string()),
    pa.field("label", pa.string()),
]

# Large list columns: PLAIN encoding, no statistics (dictionary pages cost write time and bytes).
LIST_COLUMNS = tuple(f.name for f in CORE_FIELDS + OPTIONAL_FIELDS if pa.types.is_list(f.type))
DICTIONARY_COLUMNS = ("status", "source_name", "weight_versions")


# Columns added after schema version 2 -> the version that added them: an output of an older
# version lacks them (readers give their default: remove_sample false, weight_versions null,
# token_exact true).
COLUMNS_SINCE = {"remove_sample": 3, "weight_versions": 4, "token_exact": 5,
                 "multimodal_train_input_id": MULTIMODAL_TYPED_VERSION, "images": MULTIMODAL_TYPED_VERSION}
# Columns whose type changed at a schema version -> (that version, the type before it)
TYPE_BEFORE = {"multimodal_train_inputs": (MULTIMODAL_TYPED_VERSION, pa.string())}
# Columns that may hold nulls since a schema version -> that version: an older output's schema
# has them not null.
NULLABLE_SINCE = {"reward": 4, "raw_reward": 4, "selected_reward": 4}


def train_schema(keep_text: bool = False, schema_version: int = SCHEMA_VERSION) -> pa.Schema:
    """The schema every shard carries (`schema_version`: of an older output, one of
    READ_SCHEMA_VERSIONS, as its manifest records it)."""
    fields = CORE_FIELDS + OPTIONAL_FIELDS + SCHEDULE_COLUMNS + (TEXT_FIELDS if keep_text else [])
    fields = [f if NULLABLE_SINCE.get(f.name, 0) <= schema_version else f.with_nullable(False)
              for f in fields if COLUMNS_SINCE.get(f.name, 0) <= schema_version]
    fields = [f.with_type(TYPE_BEFORE[f.name][1]) if TYPE_BEFORE.get(f.name, (0,))[0] > schema_version else f
              for f in fields]
    meta = {b"rollout_cli.schema_version": str(schema_version).encode()}
    if schema_version >= MULTIMODAL_TYPED_VERSION:
        meta[b"huggingface"] = HF_FEATURES
    return pa.schema(fields, metadata=meta)


# Column name -> the key of slime's train_data dict (RolloutManager._convert_samples_to_train_data).
SLIME_KEYS = slime_keys.BY_COLUMN

# Fields of slime's Sample.to_dict() that hold dicts; Parquet inputs may carry them as JSON text.
DICT_FIELDS = frozenset(
    {
        "metadata",
        "train_metadata",
        "spec_info",
        "prefix_cache_info",
        "trace",
        "multimodal_inputs",
        "multimodal_train_inputs",
        "apply_chat_template_kwargs",
        "reward",
    }
)
