"""rollout_cli.verification.denominators: rollout_mask_sum, the prompt group's and the step's denominators
that a row carries must be shared and equal what its shards hold.

Each test damages a copy of a clean converted output in one way and checks that verify names the
damaged file and the broken invariant (verify_damage.py holds the tools).
"""
from __future__ import annotations

import pyarrow as pa
import pytest

from rollout_cli.core.options import ConvertOptions
from rollout_cli.run.convert import convert
from rollout_cli.verification.check import verify_output
from conftest import SAMPLE_JSONL
from verify_damage import out  # noqa: F401 (the fixture)
from verify_damage import (
    manifest, save_manifest, step_entry, fails, rewrite_shard, read_shard, set_cell,
    multi_sample_rollout,
)


def test_sibling_with_a_different_mask_sum_is_caught(out):
    """Rewrite a shard with pyarrow, one sibling's rollout_mask_sum changed, checksum fixed."""
    m = manifest(out)
    shard, t, rows = multi_sample_rollout(out, m)
    t = set_cell(t, "rollout_mask_sum", rows[1], t.column("rollout_mask_sum")[rows[1]].as_py() + 1)
    rewrite_shard(out, m, shard, t)
    res = verify_output(str(out))
    assert fails(res) == {(shard["path"], "rollout_mask_sum_shared")}, res["failures"]


def test_mask_sum_that_is_not_the_loss_mask_total_is_caught(out):
    m = manifest(out)
    shard, t, rows = multi_sample_rollout(out, m)
    v = t.column("rollout_mask_sum")[rows[0]].as_py() + 7
    for r in rows:
        t = set_cell(t, "rollout_mask_sum", r, v)
    rewrite_shard(out, m, shard, t)
    assert fails(verify_output(str(out))) == {(shard["path"], "rollout_mask_sum_total")}


def _group_rows(t: pa.Table) -> list[int]:
    """Row positions of one prompt group with at least two samples in the table."""
    gi = t.column("group_index").to_pylist()
    for g in gi:
        rows = [i for i, x in enumerate(gi) if x == g and g is not None]
        if len(rows) >= 2:
            return rows
    raise AssertionError("sample data lost its multi-sample groups")


def test_clean_output_carries_consistent_denominators(out):
    m = manifest(out)
    for s in m["steps"]:
        rows = [r for sh in s["shards"] for r in read_shard(out, sh).to_pylist()]
        assert s["step_samples"] == s["rows"] == len(rows)
        assert s["step_mask_sum"] == sum(sum(r["loss_mask"]) for r in rows)
        assert {(r["step_mask_sum"], r["step_rollouts"], r["step_samples"]) for r in rows} == {
            (s["step_mask_sum"], s["step_rollouts"], s["step_samples"])}


def test_group_value_not_shared_by_siblings_is_caught(out):
    m = manifest(out)
    shard = step_entry(m, 2)["shards"][0]
    t = read_shard(out, shard)
    rows = _group_rows(t)
    t = set_cell(t, "group_mask_sum", rows[-1], t.column("group_mask_sum")[rows[-1]].as_py() + 1)
    rewrite_shard(out, m, shard, t)
    res = verify_output(str(out))
    assert fails(res) == {(shard["path"], "group_fields_shared")}, res["failures"]


def test_group_rollouts_that_is_not_the_groups_count_is_caught(out):
    """Every row of the group (in both shards: a group may span them) says one rollout more."""
    m = manifest(out)
    shards = step_entry(m, 2)["shards"]
    t = read_shard(out, shards[0])
    g = t.column("group_index")[_group_rows(t)[0]].as_py()
    for shard in shards:
        t = read_shard(out, shard)
        for r, x in enumerate(t.column("group_index").to_pylist()):
            if x == g:
                t = set_cell(t, "group_rollouts", r, t.column("group_rollouts")[r].as_py() + 1)
        rewrite_shard(out, m, shard, t)
    res = verify_output(str(out))
    assert {inv for _, inv in fails(res)} == {"group_fields_total"}, res["failures"]
    assert f"group_index {g}:" in res["failures"][0]["detail"]


def test_step_value_that_differs_between_shards_is_caught(out):
    """One shard's rows say another step_mask_sum than the other shard's and the manifest's."""
    m = manifest(out)
    shard = step_entry(m, 1)["shards"][1]
    t = read_shard(out, shard)
    col = t.column("step_mask_sum")
    t = t.set_column(t.schema.get_field_index("step_mask_sum"), "step_mask_sum",
                     pa.array([v + 5 for v in col.to_pylist()], pa.int64()))
    rewrite_shard(out, m, shard, t)
    res = verify_output(str(out))
    assert fails(res) == {(shard["path"], "step_fields")}, res["failures"]
    assert "the manifest records" in res["failures"][0]["detail"]


@pytest.mark.parametrize("field", ["step_mask_sum", "step_rollouts", "step_samples", "step_groups"])
def test_step_value_edited_in_the_manifest_is_caught(out, field):
    m = manifest(out)
    s = step_entry(m, 2)
    s[field] += 1
    save_manifest(out, m)
    got = fails(verify_output(str(out)))
    assert {inv for _, inv in got} == {"step_fields"}
    # every shard's rows disagree with the edited value (rollouts and samples: the manifest too)
    assert {sh["path"] for sh in s["shards"]} <= {f for f, _ in got}


def test_rollout_baseline_siblings_with_different_rewards_are_caught(tmp_path):
    out = tmp_path / "out"
    convert([str(SAMPLE_JSONL)], str(out), ConvertOptions(shards=2, workers=1, reward_baseline="rollout", sibling_reward="mean"))
    assert verify_output(str(out))["failures"] == []
    m = manifest(out)
    assert m["options"]["reward_baseline"] == "rollout" and m["options"]["sibling_reward"] == "mean"
    shard, t, rows = multi_sample_rollout(out, m)
    t = set_cell(t, "reward", rows[0], t.column("reward")[rows[0]].as_py() + 0.5)
    rewrite_shard(out, m, shard, t)
    res = verify_output(str(out))
    assert fails(res) == {(shard["path"], "rollout_reward_shared")}, res["failures"]
