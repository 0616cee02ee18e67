"""Stage 4b (fields.py, and the per-sample fields normalize.py derives): rollout_mask_sum,
loss masks (default ones, zeros for remove_sample), truncated, raw_reward, source_name."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import slime_reference as ref
from conftest import make_sample
from slime_cases import CASES, fresh_case
from rollout_cli.pipeline.fields import rollout_mask_sums
from rollout_cli.pipeline.validate import normalize_chunk
from rollout_cli.inputs.base import RawChunk


def test_mask_sums_hand_computed():
    ids = np.array([3, 1, 3, 2, 1], dtype=np.int64)
    totals = np.array([2, 5, 4, 0, 1], dtype=np.int64)
    # rollout 3: 2+4, rollout 1: 5+1, rollout 2: 0
    assert rollout_mask_sums(ids, totals).tolist() == [6, 6, 6, 0, 6]


def test_mask_sums_single_and_empty():
    assert rollout_mask_sums(np.array([9]), np.array([4])).tolist() == [4]
    assert rollout_mask_sums(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)).tolist() == []


def test_mask_sums_large_values_exact():
    ids = np.array([0, 0, 1], dtype=np.int64)
    totals = np.array([2**40 + 1, 2**40 + 2, 7], dtype=np.int64)
    assert rollout_mask_sums(ids, totals).tolist() == [2**41 + 3, 2**41 + 3, 7]


def test_mask_sums_negative_and_huge_ids():
    ids = np.array([-5, 2**62, -5, 2**62], dtype=np.int64)
    totals = np.array([1, 2, 3, 4], dtype=np.int64)
    assert rollout_mask_sums(ids, totals).tolist() == [4, 6, 4, 6]


def _rows(samples, reward_key=None):
    chunk = RawChunk("f.jsonl", "line", list(range(1, len(samples) + 1)), samples)
    nc = normalize_chunk(chunk, 0, reward_key=reward_key, keep_text=False)
    assert all(nc.valid), nc.problems
    return pa.Table.from_batches(nc.batches).to_pylist()


@pytest.mark.parametrize("name", sorted(CASES))
def test_mask_sums_match_oracle(name):
    case = fresh_case(name)
    samples = case["samples"]
    td = ref.convert_samples_to_train_data(samples, **case["args"])
    rows = _rows(samples, case["args"].get("reward_key"))
    ids = np.asarray(td["rollout_ids"], dtype=np.int64)
    totals = np.asarray([r["_mask_total"] for r in rows], dtype=np.int64)
    assert [r["loss_mask"] for r in rows] == td["loss_masks"]
    assert rollout_mask_sums(ids, totals).tolist() == td["rollout_mask_sums"]


def test_removed_sibling_case():
    # slime_cases: removed_sibling gives rollout_mask_sums [3, 2, 2]
    case = fresh_case("removed_sibling")
    rows = _rows(case["samples"])
    ids = np.asarray(ref.fill_rollout_ids(case["samples"]), dtype=np.int64)
    sums = rollout_mask_sums(ids, np.asarray([r["_mask_total"] for r in rows]))
    assert sums.tolist() == [3, 2, 2]


def test_loss_mask_default_ones_and_remove_sample_zeros():
    rows = _rows([
        make_sample(index=0, response_length=3, loss_mask=None),
        make_sample(index=1, response_length=3, loss_mask=[1, 0, 1], remove_sample=True),
        make_sample(index=2, response_length=2, loss_mask=None, remove_sample=True),
        make_sample(index=3, response_length=0, loss_mask=[]),
    ])
    assert [r["loss_mask"] for r in rows] == [[1, 1, 1], [0, 0, 0], [0, 0], []]
    assert [r["_mask_total"] for r in rows] == [3, 0, 0, 0]


@pytest.mark.parametrize("status,truncated", [
    ("completed", False), ("truncated", True), ("aborted", False), ("failed", False), ("pending", False),
])
def test_truncated_from_status(status, truncated):
    (row,) = _rows([make_sample(status=status)])
    assert row["truncated"] is truncated
    assert row["status"] == status


def test_raw_reward_prefers_metadata():
    rows = _rows([
        make_sample(index=0, reward=0.9, metadata={"raw_reward": 1.0}),
        make_sample(index=1, reward=0.0, metadata={}),
        make_sample(index=2, reward=0.25, metadata=None),
    ])
    assert [r["raw_reward"] for r in rows] == [1.0, 0.0, 0.25]
    assert [r["_reward_value"] for r in rows] == [0.9, 0.0, 0.25]


def test_source_name_rules_match_get_source():
    samples = [
        make_sample(index=0, metadata={"source_name": "code"}, source="math"),
        make_sample(index=1, metadata={"source_name": "code"}),
        make_sample(index=2, metadata={"source_name": ""}),
        make_sample(index=3, metadata={}),
        make_sample(index=4, metadata={}, source=""),
    ]
    rows = _rows(samples)
    assert [r["source_name"] for r in rows] == [ref.get_source(s) for s in samples] == [
        "math", "code", "unknown", "unknown", "unknown"]


def test_round_number_and_train_metadata():
    rows = _rows([
        make_sample(index=0, metadata={"round_number": 3}, train_metadata={"k": [1, 2]}),
        make_sample(index=1, metadata={}),
    ])
    assert [r["round_number"] for r in rows] == [3, None]
    import json

    assert json.loads(rows[0]["train_metadata"]) == {"k": [1, 2]}
    assert rows[1]["train_metadata"] is None


def test_log_probs_are_float32():
    (row,) = _rows([make_sample(index=0, response_length=2, rollout_log_probs=[-0.1, -1e-3])])
    assert row["rollout_log_probs"] == [float(np.float32(-0.1)), float(np.float32(-1e-3))]
