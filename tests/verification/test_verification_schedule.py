"""rollout_cli.verification.schedule: under --schedule slime a step's schedule record must add up and
every shard's rollout_position, optimizer_step and micro_batch columns must follow it; under the
balanced layout those columns stay null.

Each test damages a copy of a clean converted output in one way and checks that verify names the
damaged file and the broken invariant (verify_damage.py holds the tools).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import SAMPLE_JSONL
from rollout_cli.verification.check import verify_output
from verify_damage import out  # noqa: F401 (the fixture)
from verify_damage import convert_cli, fails, manifest, read_shard, rewrite_shard, save_manifest, set_cell, step_entry


@pytest.fixture
def scheduled(tmp_path) -> Path:
    """The sample JSONL converted with slime's schedule (global batch size 2)."""
    o = tmp_path / "sched"
    convert_cli([SAMPLE_JSONL], o, "--schedule", "slime", "--global-batch-size", "2")
    return o


def test_a_scheduled_output_passes(scheduled):
    m = manifest(scheduled)
    assert all(isinstance(s.get("schedule"), dict) for s in m["steps"] if s["split"] == "train")
    assert verify_output(str(scheduled))["failures"] == []


def test_a_schedule_record_that_does_not_add_up_is_caught(scheduled):
    m = manifest(scheduled)
    sc = step_entry(m, 1)["schedule"]
    sc["global_batch_sizes"][0] += 1  # more rollouts than the step has
    save_manifest(scheduled, m)
    res = verify_output(str(scheduled))
    assert fails(res) == {("manifest.json", "schedule")}, res["failures"]
    assert "train step 1: global_batch_sizes" in res["failures"][0]["detail"]


def test_a_micro_batch_out_of_order_is_caught(scheduled):
    m = manifest(scheduled)
    shard = step_entry(m, 1)["shards"][0]
    t = read_shard(scheduled, shard)
    t = set_cell(t, "micro_batch", 0, 99)
    rewrite_shard(scheduled, m, shard, t)
    res = verify_output(str(scheduled))
    assert fails(res) == {(shard["path"], "schedule")}, res["failures"]
    assert any("micro-batches" in f["detail"] for f in res["failures"])


def test_schedule_columns_under_the_balanced_layout_are_caught(out):
    m = manifest(out)
    assert "schedule" not in m["options"]
    shard = step_entry(m, 1)["shards"][0]
    t = set_cell(read_shard(out, shard), "optimizer_step", 0, 0)
    rewrite_shard(out, m, shard, t)
    res = verify_output(str(out))
    assert fails(res) == {(shard["path"], "schedule")}, res["failures"]
    assert "balanced layout" in res["failures"][0]["detail"]
