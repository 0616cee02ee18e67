"""The per-sample row every aggregation uses (ROW_SCHEMA: ids, lengths, mask sum, rewards,
status; never token lists), and one step's rows with their counts (StepData)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pyarrow as pa

from ..core.errors import Location, Problem
from ..inputs.discover import InputFile

# One row per sample that conversion keeps.
ROW_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int64()),
        pa.field("rollout_id", pa.int64()),
        pa.field("sample_index", pa.int64()),
        pa.field("group_index", pa.int64()),
        pa.field("pgroup", pa.int64()),  # prompt group (reward-normalisation group), dense per step
        pa.field("response_length", pa.int64()),
        pa.field("total_length", pa.int64()),
        pa.field("mask_sum", pa.int64()),
        pa.field("remove_sample", pa.bool_()),  # slime's flag; null for an output of schema version 2
        pa.field("reward", pa.float32()),  # post-processed; null where unknown or not recorded
        pa.field("raw_reward", pa.float64()),  # null where the framework recorded no reward
        pa.field("truncated", pa.bool_()),
        pa.field("status", pa.string()),
        pa.field("source_name", pa.string()),
        pa.field("rollout_mask_sum", pa.int64()),
        pa.field("pos", pa.int64()),  # record position in the dump (dumps) or row in the step (output)
        pa.field("weight_versions", pa.list_(pa.string())),  # null where none recorded (or schema version < 4)
    ]
)


@dataclass
class DumpRecords:
    """Every record of a dump step, valid or not (what `--show` needs beyond the rows)."""

    input: InputFile
    ids: np.ndarray  # per record (meaningful where assigned)
    assigned: np.ndarray
    rejected: np.ndarray
    reasons: dict[int, Problem]  # first problem per rejected record
    where: Callable[[int], Location]


@dataclass
class StepData:
    """One step of one split: its per-sample rows plus counts."""

    split: str
    step: int
    source: str  # the dump file, or the converted output folder
    samples: int  # records read (valid or not); rows + rejected
    rejected: int
    rows: pa.Table  # ROW_SCHEMA, survivors in order
    zero_variance_groups: int = 0
    groups_known: bool = True  # False where group_index is missing and no --n-samples-per-prompt chunks it
    records: DumpRecords | None = None  # dumps only
    not_token_exact: int = 0  # rows whose tokens a text dump's tokenizing gave (--tokenizer), not the ids sampled
    images: int = 0  # raw images the step's rows keep, and patches of their multimodal_train_inputs (dumps)
    patches: int = 0


def dense(keys: list) -> np.ndarray:
    """Each key's serial in order of first appearance (prompt-group keys -> `pgroup`)."""
    index: dict = {}
    return np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.int64, count=len(keys))
