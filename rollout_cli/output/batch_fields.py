"""The fields of a trainer's batch, declared once: the numpy `Batch` (output/batches.py) and the
torch `PackedBatch` (loader/batch.py) both take theirs from FIELDS, in its order (which is also
the order of a gathered micro-batch's block, output/gather.take_blocks). A column added to the
batch is one line here; docs/loader.md's PackedBatch table documents each field.

Each field has a layout: `tokens` (one value per token of the flat token stream), `offsets`
(n+1 sample offsets), `response` (one per response token, laid out like `loss_mask`), `sample`
(one per sample), `step` (one int for the whole step), `multimodal` (the samples'
multimodal_train_inputs joined per key, core/tensors.concat: a dict key -> array) or `meta`
(the batch's place and name, and the extras)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["BatchField", "FIELDS", "ARRAY_FIELDS", "PER_SAMPLE", "batch_dataclass"]


@dataclass(frozen=True)
class BatchField:
    """One field: its name, layout, numpy dtype (None: not an array), whether it may be None,
    and its default ("required": none) or the factory of its default."""

    name: str
    layout: str
    dtype: str | None = None
    optional: bool = False
    default: Any = "required"
    factory: Any = None

    @property
    def is_array(self) -> bool:
        return self.dtype is not None

    def annotation(self, array_type: str) -> str:
        t = array_type if self.is_array else {"source_names": "list[str]", "split": "str", "extras": "dict",
                                              "multimodal_train_inputs": "dict"}.get(self.name, "int")
        return f"{t} | None" if self.optional else t


def _a(name: str, layout: str, dtype: str, optional: bool = False, **kw) -> BatchField:
    return BatchField(name, layout, dtype, optional, **kw)


FIELDS: tuple[BatchField, ...] = (
    _a("tokens", "tokens", "int32"),
    _a("cu_seqlens", "offsets", "int32"),
    _a("loss_mask", "response", "uint8"),
    _a("response_lengths", "sample", "int32"),
    _a("total_lengths", "sample", "int32"),
    _a("rewards", "sample", "float32"),
    _a("raw_rewards", "sample", "float64"),
    _a("rollout_ids", "sample", "int64"),
    _a("sample_indices", "sample", "int64"),
    _a("group_indices", "sample", "int64"),
    _a("rollout_mask_sums", "sample", "int64"),
    _a("group_mask_sums", "sample", "int64"),
    _a("group_rollouts", "sample", "int64"),
    _a("truncated", "sample", "bool"),
    _a("remove_samples", "sample", "bool"),
    _a("rollout_log_probs", "response", "float32", True),
    _a("teacher_log_probs", "response", "float32", True),
    _a("round_numbers", "sample", "int64", True, default=None),
    BatchField("source_names", "sample", optional=True, default=None),
    BatchField("step", "meta", default=0),
    BatchField("shard", "meta", default=0),
    BatchField("split", "meta", default="train"),
    BatchField("step_mask_sum", "step", default=0),
    BatchField("step_rollouts", "step", default=0),
    BatchField("step_samples", "step", default=0),
    BatchField("step_groups", "step", default=0),
    _a("rollout_positions", "sample", "int64", True, default=None),
    # --schedule slime shards served as converted: the sample's optimizer step and micro-batch
    _a("optimizer_steps", "sample", "int64", True, default=None),
    _a("micro_batch_ids", "sample", "int64", True, default=None),
    # slime's get_batch form of the samples' multimodal_train_inputs (each sample's own dict: the
    # extra of the same name, a list with None for a sample without)
    BatchField("multimodal_train_inputs", "multimodal", factory=dict),
    BatchField("extras", "meta", factory=dict),
    BatchField("micro_batch_index", "meta", default=0),
    BatchField("num_micro_batches", "meta", default=1),
)

# the array fields, in declaration order: a gathered micro-batch's block lays them out so
ARRAY_FIELDS = tuple(f.name for f in FIELDS if f.is_array)
# the arrays with one value per sample ([n])
PER_SAMPLE = tuple(f.name for f in FIELDS if f.is_array and f.layout == "sample")


def batch_dataclass(array_type: str):
    """Class decorator: the class as a dataclass (eq=False, repr=False) whose fields are FIELDS,
    array fields annotated `array_type`, followed by the class's own annotated fields (private
    ones, each with a default)."""

    def make(cls):
        own = dict(cls.__dict__.get("__annotations__", {}))
        ann = {}
        for f in FIELDS:
            ann[f.name] = f.annotation(array_type)
            if f.factory is not None:
                setattr(cls, f.name, dataclasses.field(default_factory=f.factory))
            elif f.default != "required":
                setattr(cls, f.name, f.default)
        cls.__annotations__ = {**ann, **own}
        return dataclass(eq=False, repr=False)(cls)

    return make
