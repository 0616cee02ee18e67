"""inputs/columns.py: records to the columnar form, each record's values kept."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_cli.core.errors import Location, Problem
from rollout_cli.inputs.base import RawChunk
from rollout_cli.inputs.columns import LIST_KINDS, columnar


def _chunk(records, problems=None):
    return RawChunk("f.jsonl", "line", list(range(1, len(records) + 1)), records, problems or {})


def test_arrays_become_one_list_column_and_the_rest_stay_values():
    recs = [
        {"tokens": np.array([1, 2, 3]), "loss_mask": np.array([True, False]), "reward": 1.0, "metadata": {"a": 1}},
        None,
        {"tokens": np.array([4], dtype=np.int32), "rollout_log_probs": np.array([-0.5], dtype=np.float32), "reward": 0.0},
    ]
    c = columnar(_chunk(recs, {1: Problem(Location("f.jsonl", "line", 2), None, "invalid JSON")}))
    assert c.records is None and not c.rows and set(c.problems) == {1}
    assert c.columns["tokens"].type == pa.list_(pa.int64())
    assert c.columns["tokens"].to_pylist() == [[1, 2, 3], None, [4]]
    assert c.columns["loss_mask"].to_pylist() == [[1, 0], None, None]
    assert c.columns["loss_mask"].type == pa.list_(pa.uint8())
    assert c.columns["rollout_log_probs"].type == pa.list_(pa.float32())
    assert c.columns["reward"] == [1.0, None, 0.0]
    assert c.columns["metadata"] == [{"a": 1}, None, None]


def test_a_record_with_a_list_of_another_kind_is_kept_whole():
    recs = [
        {"tokens": np.array([1, 2])},
        {"tokens": [1, 2], "reward": 2.0},  # the JSON fallback's Python list
        {"tokens": np.array([[1], [2]])},  # nested
        {"tokens": np.array([2**63], dtype=np.uint64)},  # past int64
        {"tokens": np.array([1.5])},  # floats for token ids
        {"tokens": "1,2"},
    ]
    c = columnar(_chunk(recs))
    assert sorted(c.rows) == [1, 2, 3, 4, 5]
    assert c.rows[1] is recs[1]
    assert c.columns["tokens"].to_pylist() == [[1, 2], None, None, None, None, None]
    assert c.columns["reward"] == [None] * 6  # the kept record's own values are in rows


@st.composite
def _records(draw):
    out = []
    for _ in range(draw(st.integers(0, 8))):
        if draw(st.integers(0, 9)) == 0:
            out.append(None)
            continue
        rec = {}
        for k, kinds in LIST_KINDS.items():
            form = draw(st.sampled_from(["absent", "none", "array", "list"]))
            if form == "absent":
                continue
            n = draw(st.integers(0, 4))
            if form == "none":
                rec[k] = None
            elif form == "list":
                rec[k] = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
            elif "f" in kinds:
                rec[k] = np.array(draw(st.lists(st.floats(-5, 0, width=32), min_size=n, max_size=n)), dtype=np.float32)
            else:
                rec[k] = np.array(draw(st.lists(st.integers(0, 2**31 - 1), min_size=n, max_size=n)), dtype=np.int64)
        if draw(st.booleans()):
            rec["reward"] = draw(st.floats(-1, 1))
        rec["status"] = draw(st.sampled_from(["completed", "truncated", None]))
        out.append(rec)
    return out


def _plain(v):
    return v.tolist() if isinstance(v, np.ndarray) else v


@settings(deadline=None, derandomize=True, database=None, max_examples=150)
@given(_records())
def test_every_record_reads_back_the_same(recs):
    problems = {i: Problem(Location("f.jsonl", "line", i + 1), None, "x") for i, r in enumerate(recs) if r is None}
    rows, cols = _chunk(recs, problems), columnar(_chunk(recs, problems))
    assert len(cols) == len(rows)
    for name in list(LIST_KINDS) + ["reward", "status", "metadata"]:
        got = cols.values(name)
        want = rows.values(name)
        for g, w in zip(got, want):
            assert _plain(g) == _plain(w) or (np.asarray(_plain(w), dtype=float) == np.asarray(g, dtype=float)).all()
