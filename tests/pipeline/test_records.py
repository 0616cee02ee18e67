"""pipeline/records.py: a step's record positions mapped back to file:line (or row, or sample)
across its chunks; the id rule's per-record inputs gathered in order; content-keyed prompt groups
renumbered by first appearance."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from rollout_cli.core.errors import Location
from rollout_cli.pipeline.records import dense_groups, id_inputs, locator, summary_only
from rollout_cli.pipeline.validate import ID_EXPLICIT, ID_INVALID, ID_MISSING, NormChunk


def chunk(source, kind, numbers, ids, groups):
    state = [ID_MISSING if v is None else ID_INVALID if v == "bad" else ID_EXPLICIT for v in ids]
    explicit = [v if isinstance(v, int) else None for v in ids]
    return NormChunk(source, kind, numbers, state, explicit, groups, [True] * len(numbers))


CHUNKS = [chunk("a.jsonl", "line", [1, 2, 3], [None, 7, None], [0, 0, 1]),
          chunk("a.jsonl", "line", [5], ["bad"], [1]),
          chunk("b.parquet", "row", [0, 1], [9, None], [2, None])]


def test_the_locator_maps_step_positions_to_each_chunks_numbers():
    where = locator(CHUNKS)
    assert [str(where(i)) for i in range(6)] == [
        "a.jsonl:line 1", "a.jsonl:line 2", "a.jsonl:line 3", "a.jsonl:line 5", "b.parquet:row 0", "b.parquet:row 1"]
    assert where(3) == Location("a.jsonl", "line", 5)


def test_id_inputs_in_step_order():
    state, explicit, groups = id_inputs(CHUNKS)
    assert state.dtype == np.int8 and explicit.dtype == np.int64
    assert state.tolist() == [ID_MISSING, ID_EXPLICIT, ID_MISSING, ID_INVALID, ID_EXPLICIT, ID_MISSING]
    assert explicit.tolist() == [0, 7, 0, 0, 9, 0]
    assert groups == [0, 0, 1, 1, 2, None]


def test_summary_only_keeps_the_summaries_and_drops_the_rows():
    c = CHUNKS[0]
    s = summary_only(c)
    assert (s.source, s.numbers, s.id_state, s.explicit_id, s.group_index) == (c.source, c.numbers, c.id_state,
                                                                              c.explicit_id, c.group_index)


def test_dense_groups_in_order_of_first_appearance():
    keys = ["h9", "h2", "h9", None, "h5", "h2"]
    assert dense_groups(keys) == [0, 1, 0, None, 2, 1]
    pre = pa.table({"_pos": pa.array([4, 0, 5], pa.int64()), "group_index": pa.array([0, 0, 0], pa.int64())})
    dense, table = dense_groups(keys, pre)
    assert dense == [0, 1, 0, None, 2, 1]
    assert table.column("group_index").to_pylist() == [2, 0, 1]  # each valid row's record, renumbered
    assert table.schema.field("group_index").type == pa.int64()
    _, empty = dense_groups(keys, pre.slice(0, 0))
    assert empty.num_rows == 0
