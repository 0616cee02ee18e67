"""rollout_cli.verification.rows: each row invariant (lengths, mask values, step, status, nulls, remove_sample)
catches a row that breaks it, naming the row.

Each test damages a copy of a clean converted output in one way and checks that verify names the
damaged file and the broken invariant (verify_damage.py holds the tools).
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from conftest import copts
from rollout_cli.cli.app import app
from rollout_cli.core.errors import ExitCode
from rollout_cli.core.schema import train_schema
from rollout_cli.core.versions import SCHEMA_VERSION
from rollout_cli.verification.check import verify_output
from verify_damage import out  # noqa: F401 (the fixture)
from verify_damage import (
    manifest, save_manifest, step_entry, fails, refresh, rewrite_shard, read_shard,
    set_cell, multi_sample_rollout,
)


@pytest.mark.parametrize(
    "column, change, primary, consequences",
    [
        # (column, change, the invariant that must fail, what else may follow from it)
        ("response_length", lambda v: v + 1, "loss_mask_length", set()),
        ("total_length", lambda v: v + 1, "total_length", {"tokens"}),
        ("step", lambda v: v + 100, "step_column", set()),
        ("truncated", lambda v: not v, "status", set()),
        ("status", lambda v: "bogus", "status", set()),
        ("loss_mask", lambda v: [2] + v[1:], "loss_mask_values", {"rollout_mask_sum_total"}),
        ("loss_mask", lambda v: v + [1], "loss_mask_length", {"rollout_mask_sum_total"}),
    ],
)
def test_row_invariants(out, column, change, primary, consequences):
    m = manifest(out)
    shard = step_entry(m, 1)["shards"][1]
    t = read_shard(out, shard)
    row = 3
    t = set_cell(t, column, row, change(t.column(column)[row].as_py()))
    rewrite_shard(out, m, shard, t)
    res = verify_output(str(out))
    assert {f for f, _ in fails(res)} == {shard["path"]}, res["failures"]
    got = {inv for _, inv in fails(res)}
    assert primary in got and got <= {primary} | consequences, res["failures"]
    assert any(f"row {row}" in f["detail"] for f in res["failures"] if f["invariant"] == primary)


def test_null_in_a_required_column_is_caught(out):
    m = manifest(out)
    shard = step_entry(m, 1)["shards"][0]
    t = pq.read_table(out / shard["path"])
    i = t.schema.get_field_index("rollout_mask_sum")  # reward is nullable from schema version 4 on
    t = t.set_column(i, pa.field("rollout_mask_sum", pa.int64()),
                     pa.array([None] + t.column("rollout_mask_sum").to_pylist()[1:], pa.int64()))
    pq.write_table(t, out / shard["path"])  # a nullable field: the schema check fails too
    refresh(out, shard)
    save_manifest(out, m)
    assert (shard["path"], "schema") in fails(verify_output(str(out)))


def test_a_removed_row_with_a_nonzero_mask_is_caught_with_exit_4(out):
    """remove_sample true means slime zeroed the loss mask: a row that says so and still trains
    on tokens is broken (only that row's invariant fails; its sums are untouched)."""
    m = manifest(out)
    shard, t, rows = multi_sample_rollout(out, m)
    r = rows[0]
    assert sum(t.column("loss_mask")[r].as_py()) > 0 and t.column("remove_sample")[r].as_py() is False
    rewrite_shard(out, m, shard, set_cell(t, "remove_sample", r, True))
    res = verify_output(str(out))
    assert fails(res) == {(shard["path"], "remove_sample")}
    assert f"row {r}: remove_sample is true but its loss_mask sums to" in res["failures"][0]["detail"]
    cli = CliRunner().invoke(app, ["verify", str(out)])
    assert cli.exit_code == ExitCode.INTEGRITY == 4 and "remove_sample" in cli.output


def test_the_removed_sample_of_the_sample_data_passes(out):
    """sample_data step 1, sample 10: remove_sample true and a mask of zeros, as convert wrote it."""
    m = manifest(out)
    flagged = [(s["step"], r) for s in m["steps"] for sh in s["shards"]
               for r in read_shard(out, sh).filter(pa.compute.field("remove_sample")).column("rollout_position").to_pylist()]
    assert flagged == [(1, 10)]
    assert verify_output(str(out))["ok"]


def test_remove_sample_of_another_type_is_caught(out):
    m = manifest(out)
    shard = step_entry(m, 1)["shards"][0]
    t = read_shard(out, shard)
    schema = train_schema()
    i = schema.get_field_index("remove_sample")
    narrow = schema.set(i, pa.field("remove_sample", pa.int8(), nullable=False))
    pq.write_table(t.cast(narrow), out / shard["path"])
    refresh(out, shard)
    save_manifest(out, m)
    res = verify_output(str(out))
    assert fails(res) == {(shard["path"], "schema")}
    assert "remove_sample: int8 not null, expected bool not null" in res["failures"][0]["detail"]


def test_an_output_of_schema_version_2_passes(out):
    """Outputs written before the remove_sample column (schema version 2) are still verified
    against the schema of their version, in full and quick mode."""
    from old_outputs import as_schema_version_2

    as_schema_version_2(out)
    for quick in (False, True):
        res = verify_output(str(out), quick=quick)
        assert res["ok"], res["failures"]
        assert res["schema_version"] == 2


def test_an_output_written_by_schema_version_3_passes(tmp_path):
    """The committed output of schema version 3 (rewards not null, no weight_versions) verifies
    against its version's schema, in full and quick mode."""
    from old_outputs import schema_3_output

    out = schema_3_output(tmp_path / "v3")
    for quick in (False, True):
        res = verify_output(str(out), quick=quick)
        assert res["ok"], res["failures"]
        assert res["schema_version"] == 3


def test_an_output_written_by_schema_version_4_passes(tmp_path):
    """The committed output of schema version 4 (no token_exact) verifies against its version's
    schema, in full and quick mode."""
    from old_outputs import schema_4_output

    out = schema_4_output(tmp_path / "v4")
    for quick in (False, True):
        res = verify_output(str(out), quick=quick)
        assert res["ok"], res["failures"]
        assert res["schema_version"] == 4


def test_null_rewards_pass_from_schema_version_4_only(tmp_path, monkeypatch):
    """verify accepts rewards the framework did not record (null) in a version-4 output; the
    same nulls in a version-3 output break its schema (rewards were not null then)."""
    from lineage_cases import jsonl_without_rewards, write_unrecorded
    from old_outputs import schema_3_output
    from rollout_cli.run.convert import convert

    jsonl_without_rewards(monkeypatch)
    convert([str(write_unrecorded(tmp_path / "in"))], str(tmp_path / "out"), copts(mmap=True))
    res = verify_output(str(tmp_path / "out"))
    assert res["ok"] and res["schema_version"] == SCHEMA_VERSION, res["failures"]
    out = schema_3_output(tmp_path / "v3")
    m = manifest(out)
    shard = step_entry(m, 3)["shards"][0]
    t = pq.read_table(out / shard["path"])
    i = t.schema.get_field_index("reward")
    t = t.set_column(i, pa.field("reward", pa.float32()), pa.array([None] + t.column("reward").to_pylist()[1:], pa.float32()))
    pq.write_table(t, out / shard["path"])
    refresh(out, shard)
    save_manifest(out, m)
    res = verify_output(str(out))
    assert (shard["path"], "schema") in fails(res) and "reward: float, expected float not null" in str(res["failures"])
