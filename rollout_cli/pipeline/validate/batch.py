"""What validation hands on: a chunk's per-record summary (`NormChunk`: id state, explicit id,
group, validity, problems) and its valid rows as Arrow batches of the pre-schema (the columns
before ids and rewards), each within the Arrow list limit. Both forms of the rules (rows.py,
columns.py) build these; nothing here checks a value."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ...core.errors import Problem
from ...core.tensors import IMAGES_TYPE, MM_TYPE
from ...inputs.base import RawChunk

# id_state values
ID_MISSING, ID_EXPLICIT, ID_INVALID = 0, 1, 2

# Arrow list offsets are int32: keep every list column of one batch below this many values.
MAX_BATCH_VALUES = 1 << 30


@dataclass
class NormChunk:
    """One RawChunk after validation.

    Summary lists have one entry per record (valid or not); `batches` hold the valid records'
    columns in order, with `_pos` giving each row's record position in the unit.
    """

    source: str
    kind: str
    numbers: list[int]
    id_state: list[int]
    explicit_id: list[int | None]
    group_index: list[int | None]
    valid: list[bool]
    problems: list[tuple[int, Problem]] = field(default_factory=list)
    batches: list[pa.RecordBatch] = field(default_factory=list)


def empty_norm(chunk: RawChunk) -> NormChunk:
    n = len(chunk)
    return NormChunk(chunk.source, chunk.kind, chunk.numbers, [ID_MISSING] * n, [None] * n, [None] * n, [False] * n)


def row_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each row's sum of its list's values (0 for an empty list)."""
    out = np.zeros(len(offsets) - 1, dtype=np.int64)
    filled = offsets[1:] > offsets[:-1]
    if filled.any():  # reduceat sums from each listed start to the next: empty rows are left out
        out[filled] = np.add.reduceat(values, offsets[:-1][filled], dtype=np.int64)
    return out


WEIGHT_VERSIONS = pa.list_(pa.string())

PRE_FIELDS = [
    pa.field("_pos", pa.int64()),
    pa.field("sample_index", pa.int64()),
    pa.field("group_index", pa.int64()),
    pa.field("tokens", pa.list_(pa.int32())),
    pa.field("response_length", pa.int32()),
    pa.field("total_length", pa.int32()),
    pa.field("loss_mask", pa.list_(pa.uint8())),
    pa.field("remove_sample", pa.bool_()),
    pa.field("_reward_value", pa.float64()),  # null: not recorded (as raw_reward)
    pa.field("raw_reward", pa.float64()),
    pa.field("truncated", pa.bool_()),
    pa.field("status", pa.string()),
    pa.field("_mask_total", pa.int64()),
    pa.field("rollout_log_probs", pa.list_(pa.float32())),
    pa.field("teacher_log_probs", pa.list_(pa.float32())),
    pa.field("rollout_top_p_token_ids", pa.list_(pa.int32())),
    pa.field("rollout_top_p_token_offsets", pa.list_(pa.int32())),
    pa.field("rollout_routed_experts", pa.list_(pa.int32())),
    pa.field("rollout_routed_experts_shape", pa.list_(pa.int32())),
    pa.field("round_number", pa.int64()),
    pa.field("source_name", pa.string()),
    pa.field("train_metadata", pa.string()),
    pa.field("multimodal_train_inputs", MM_TYPE),
    pa.field("multimodal_train_input_id", pa.string()),
    pa.field("images", IMAGES_TYPE),
    pa.field("_media_dropped", pa.int32()),  # images and videos the sample had that were not kept
    pa.field("weight_versions", pa.list_(pa.string())),
]
TEXT_PRE_FIELDS = [pa.field("prompt", pa.string()), pa.field("response", pa.string()), pa.field("label", pa.string())]


def pre_schema(keep_text: bool) -> pa.Schema:
    return pa.schema(PRE_FIELDS + (TEXT_PRE_FIELDS if keep_text else []))
