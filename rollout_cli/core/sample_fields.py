"""The fields of a rollout sample (slime's `Sample.to_dict()`) that rollout-cli reads: one row
each, with its kind, the Arrow and numpy types the readers build it as, whether it holds a value
per token, and whether a sample must have it. The per-format and per-stage lists (what a reader
keeps, which lists come out of a JSON parser as arrays, which string columns are text by nature)
are derived here from this one table.

The train row written for a sample is core/schema.py's (its own types: int32 token ids,
float32 log-probs); `column` names the train-row column a field feeds. No numpy or pyarrow at
import: the converting process reads these names too."""
from __future__ import annotations

from dataclasses import dataclass

# kind -> what a value is
KINDS = {
    "int": "an integer",
    "bool": "a boolean",
    "reward": "a number, or a dict of numbers (--reward-key picks one)",
    "text": "a string",
    "dict": "a JSON object",
    "int_list": "a list of integers",
    "mask": "a list of 0/1 (booleans too)",
    "float_list": "a list of numbers",
    "nested_int_list": "a list of lists of integers, any depth",
    "text_list": "a list of strings",
}


@dataclass(frozen=True)
class SampleField:
    name: str  # the key in the sample's dict (a column of a Parquet input)
    kind: str  # a key of KINDS
    arrow: str | None = None  # the Arrow type a reader decodes it to from JSON text ("list<int64>")
    numpy: str | None = None  # the numpy dtype a reader builds a list field's array as
    per_token: bool = False  # one value per token (of the sequence or of the response)
    required: bool = False  # a sample without it is invalid (reward: unless its format records none,
    # inputs/format.Format.rewards_recorded)
    keep_text: bool = False  # read only with --keep-text
    column: str | None = None  # the train-row column it feeds (core/schema.py), where it has one


FIELDS: tuple[SampleField, ...] = (
    SampleField("rollout_id", "int", "int64", column="rollout_id"),
    SampleField("step", "int", "int64", column="step"),
    SampleField("index", "int", "int64", column="sample_index"),
    SampleField("group_index", "int", "int64", column="group_index"),
    SampleField("tokens", "int_list", "list<int64>", "int64", per_token=True, required=True, column="tokens"),
    SampleField("response_length", "int", "int64", required=True, column="response_length"),
    SampleField("loss_mask", "mask", "list<int64>", "int64", per_token=True, column="loss_mask"),
    SampleField("remove_sample", "bool", "bool", column="remove_sample"),
    SampleField("status", "text", "string", required=True, column="status"),
    SampleField("reward", "reward", required=True, column="reward"),
    SampleField("metadata", "dict"),
    SampleField("source", "text", "string", column="source_name"),
    SampleField("rollout_log_probs", "float_list", "list<double>", "float64", per_token=True, column="rollout_log_probs"),
    SampleField("teacher_log_probs", "float_list", "list<double>", "float64", per_token=True, column="teacher_log_probs"),
    SampleField("rollout_top_p_token_ids", "int_list", "list<int64>", "int64", column="rollout_top_p_token_ids"),
    SampleField("rollout_top_p_token_offsets", "int_list", "list<int64>", "int64",
                column="rollout_top_p_token_offsets"),
    SampleField("rollout_routed_experts", "nested_int_list", "list<list<list<int64>>>", per_token=True,
                column="rollout_routed_experts"),
    SampleField("train_metadata", "dict", column="train_metadata"),
    # the policy versions that generated the sample, one per generation call (slime's and miles'
    # `weight_versions`; other readers fill it from the generating policy their framework
    # records, as strings): null in the output where absent, null or empty
    SampleField("weight_versions", "text_list", "list<string>", column="weight_versions"),
    SampleField("multimodal_train_inputs", "dict", column="multimodal_train_inputs"),
    SampleField("multimodal_train_input_id", "text", "string", column="multimodal_train_input_id"),
    # the raw media: {"images": [...], "videos": [...]}; images kept as PNG (pipeline/validate/media.py)
    SampleField("multimodal_inputs", "dict", column="images"),
    SampleField("prompt", "text", "string", keep_text=True, column="prompt"),
    SampleField("response", "text", "string", keep_text=True, column="response"),
    SampleField("label", "text", "string", keep_text=True, column="label"),
)
BY_NAME: dict[str, SampleField] = {f.name: f for f in FIELDS}

# ------------------------------------------------------------------------------ derived lists
# every field the validation reads (pipeline/validate.py): a reader may keep only these
SAMPLE_FIELDS = frozenset(f.name for f in FIELDS if not f.keep_text)
# fields read only with --keep-text, in the train row's order
KEPT_TEXT_FIELDS = tuple(f.name for f in FIELDS if f.keep_text)
# fields that hold text by nature: a string column for any other field is JSON text
TEXT_FIELDS = frozenset(f.name for f in FIELDS if f.kind == "text")
# the flat numeric lists, which the readers hand on as arrays: name -> 'i' (integers, read as
# int64) or 'd' (numbers, read as float64)
NUMERIC_LISTS = {f.name: "d" if f.kind == "float_list" else "i" for f in FIELDS
                 if f.kind in ("int_list", "mask", "float_list")}
INT_LISTS = tuple(n for n, t in NUMERIC_LISTS.items() if t == "i")
FLOAT_LISTS = tuple(n for n, t in NUMERIC_LISTS.items() if t == "d")
# flat numeric list -> the numpy kinds (dtype.kind) its array may have; any other array is
# checked on its own, row by row
LIST_KINDS = {n: {"int_list": "iu", "mask": "iub", "float_list": "fiu"}[BY_NAME[n].kind] for n in NUMERIC_LISTS}
# every list field -> the Arrow type its JSON text is decoded to (Parquet inputs)
JSON_LIST_TYPES = {f.name: f.arrow for f in FIELDS if f.kind in ("int_list", "mask", "float_list", "nested_int_list")}
REQUIRED = tuple(f.name for f in FIELDS if f.required)
PER_TOKEN = tuple(f.name for f in FIELDS if f.per_token)


def arrow_type(spec: str):
    """The pyarrow type of a table entry's `arrow` ("int64", "list<double>", ...)."""
    import pyarrow as pa

    if spec.startswith("list<") and spec.endswith(">"):
        return pa.list_(arrow_type(spec[5:-1]))
    return {"int64": pa.int64(), "double": pa.float64(), "bool": pa.bool_(), "string": pa.string()}[spec]
