"""rollout_cli.core.sample_fields: the one table of a sample's fields, and the lists derived
from it that the readers use."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa

from rollout_cli.core import sample_fields as F
from rollout_cli.core.schema import train_schema


def test_the_fields_validation_reads():
    assert F.SAMPLE_FIELDS == {
        "rollout_id", "step", "index", "group_index", "tokens", "response_length", "loss_mask", "remove_sample",
        "status", "reward", "metadata", "source", "rollout_log_probs", "teacher_log_probs",
        "rollout_top_p_token_ids", "rollout_top_p_token_offsets", "rollout_routed_experts", "train_metadata",
        "multimodal_train_inputs", "multimodal_train_input_id", "multimodal_inputs", "weight_versions"}
    assert F.KEPT_TEXT_FIELDS == ("prompt", "response", "label")
    assert F.TEXT_FIELDS == {"prompt", "response", "label", "status", "source", "multimodal_train_input_id"}
    assert F.REQUIRED == ("tokens", "response_length", "status", "reward")


def test_the_numeric_lists_and_their_types():
    assert F.NUMERIC_LISTS == {"tokens": "i", "loss_mask": "i", "rollout_log_probs": "d", "teacher_log_probs": "d",
                               "rollout_top_p_token_ids": "i", "rollout_top_p_token_offsets": "i"}
    assert F.LIST_KINDS == {"tokens": "iu", "loss_mask": "iub", "rollout_log_probs": "fiu", "teacher_log_probs": "fiu",
                            "rollout_top_p_token_ids": "iu", "rollout_top_p_token_offsets": "iu"}
    assert F.INT_LISTS == ("tokens", "loss_mask", "rollout_top_p_token_ids", "rollout_top_p_token_offsets")
    assert F.FLOAT_LISTS == ("rollout_log_probs", "teacher_log_probs")
    types = {n: F.arrow_type(t) for n, t in F.JSON_LIST_TYPES.items()}
    assert types["tokens"] == pa.list_(pa.int64()) and types["rollout_log_probs"] == pa.list_(pa.float64())
    assert types["rollout_routed_experts"] == pa.list_(pa.list_(pa.list_(pa.int64())))
    assert set(types) == set(F.NUMERIC_LISTS) | {"rollout_routed_experts"}
    for name in F.NUMERIC_LISTS:  # a list's numpy type is its Arrow type's values
        assert np.dtype(F.BY_NAME[name].numpy) == types[name].value_type.to_pandas_dtype()


def test_every_field_feeds_a_column_of_the_train_row():
    names = set(train_schema(keep_text=True).names)
    cols = {f.name: f.column for f in F.FIELDS if f.column is not None}
    assert set(cols.values()) <= names
    assert {f.name for f in F.FIELDS if f.column is None} == {"metadata"}  # read for raw_reward and round_number
    assert all(f.kind in F.KINDS for f in F.FIELDS) and len(F.BY_NAME) == len(F.FIELDS)


def test_the_readers_use_the_table():
    from rollout_cli.inputs import base, columns
    from rollout_cli.inputs.jsonl import simd
    from rollout_cli.inputs.parquet import reader as parquet

    assert base.SAMPLE_FIELDS is F.SAMPLE_FIELDS and base.TEXT_FIELDS is F.TEXT_FIELDS
    assert columns.LIST_KINDS is F.LIST_KINDS and simd.NUMERIC_LISTS is F.NUMERIC_LISTS
    assert parquet._JSON_LIST_TYPES == {n: F.arrow_type(t) for n, t in F.JSON_LIST_TYPES.items()}


def test_importing_the_table_imports_no_numpy_or_arrow():
    code = "import sys, rollout_cli.core.sample_fields; print('numpy' in sys.modules, 'pyarrow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split() == [
        "False", "False"]
