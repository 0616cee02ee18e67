"""inspect on converted output (rollout_cli.inspect.outputs): the same groups as its dumps; anomalies from shards, manifest and rejects."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from inspect_samples import DATA, anomalies_of, do_convert
from rollout_cli.inspect import inspect_paths


@pytest.mark.parametrize("group_by", ["rollout_id", "group_index", "step", "status", "source_name"])
def test_converted_output_gives_the_same_groups(tmp_path, group_by):
    out = do_convert([DATA / "parquet"], tmp_path / "out", shards=3)
    a = inspect_paths([str(DATA / "parquet")], group_by)
    b = inspect_paths([str(out)], group_by)
    assert a["groups"] == b["groups"]
    for k in ("steps", "samples", "rows", "rollouts", "prompt_groups", "tokens", "samples_per_rollout", "group_sizes", "status",
              "truncation_rate", "rewards", "anomaly_counts", "groups_total"):
        assert a["summary"][k] == b["summary"][k], k
    assert b["summary"]["files"] == 9 and a["summary"]["files"] == 3


def test_converted_output_anomalies(tmp_path):
    out = do_convert([DATA / "jsonl"], tmp_path / "out")
    shard = out / "data" / "step-000001" / "shard-00000-of-00001.parquet"
    t = pq.read_table(shard)
    sums = t.column("rollout_mask_sum").to_pylist()
    sums[2] += 1
    masks = t.column("loss_mask").to_pylist()
    masks[5] = masks[5][:-1]
    t = t.set_column(t.schema.get_field_index("rollout_mask_sum"), "rollout_mask_sum", pa.array(sums, pa.int64()))
    t = t.set_column(t.schema.get_field_index("loss_mask"), "loss_mask", pa.array(masks, pa.list_(pa.uint8())))
    pq.write_table(t, shard)
    a = anomalies_of([out])
    assert a["rollout_mask_sum_mismatch"][0]["where"] == [{"file": str(shard), "row": 2}]
    assert a["loss_mask_length"][0]["where"] == [{"file": str(shard), "row": 5}]
    assert a["mixed_ids"][0]["step"] == 3  # from the manifest
