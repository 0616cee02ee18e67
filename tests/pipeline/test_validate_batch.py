"""What validation hands on (pipeline/validate/batch.py): the chunk summary and the pre-schema."""
from __future__ import annotations

import numpy as np

from rollout_cli.inputs.base import RawChunk
from rollout_cli.pipeline.validate.batch import ID_MISSING, PRE_FIELDS, TEXT_PRE_FIELDS, empty_norm, pre_schema, row_sums


def test_row_sums_count_empty_rows_as_zero():
    values = np.array([1, 1, 0, 1, 1, 1], np.uint8)
    offsets = np.array([0, 2, 2, 3, 3, 6], np.int64)  # rows: [1, 1], [], [0], [], [1, 1, 1]
    got = row_sums(values, offsets)
    assert got.tolist() == [2, 0, 0, 0, 3] and got.dtype == np.int64


def test_an_empty_summary_has_one_entry_per_record():
    chunk = RawChunk("a.jsonl", "line", [3, 4, 9], [{}, None, {}])
    nc = empty_norm(chunk)
    assert (nc.source, nc.kind, nc.numbers) == ("a.jsonl", "line", [3, 4, 9])
    assert nc.id_state == [ID_MISSING] * 3 and nc.explicit_id == nc.group_index == [None] * 3
    assert nc.valid == [False] * 3 and nc.problems == [] and nc.batches == []


def test_the_pre_schema_adds_the_text_columns_with_keep_text():
    assert pre_schema(False).names == [f.name for f in PRE_FIELDS]
    assert pre_schema(True).names == [f.name for f in PRE_FIELDS] + ["prompt", "response", "label"]
    assert [f.name for f in TEXT_PRE_FIELDS] == ["prompt", "response", "label"]
