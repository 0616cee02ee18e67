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


def test_an_object_store_output_inspects_as_the_local_one(s3, tmp_path):
    """inspect (and so report) reads an s3:// output through its manifest: the same summary and
    groups as the local output of the same input, rejects included."""
    import shutil

    from inspect_samples import sample, write_jsonl
    from pyarrow import fs as pafs

    from rollout_cli.report import collect

    src = tmp_path / "in"
    shutil.copytree(DATA / "jsonl" / "rollout_data", src)
    write_jsonl(src / "9.jsonl", [sample(901, 901), sample(900, 900, mask=[1])])
    pafs.copy_files(str(src), "bkt/inspect-in", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=s3)
    local = do_convert([src], tmp_path / "out", shards=2, on_error="skip")
    do_convert(["s3://bkt/inspect-in"], "s3://bkt/inspect-out", shards=2, on_error="skip")
    for group_by in ("rollout_id", "status"):
        a = inspect_paths([str(local)], group_by)
        b = inspect_paths(["s3://bkt/inspect-out"], group_by)
        assert a["groups"] == b["groups"]
        assert [dict(p, source=None) for p in a["summary"]["per_step"]] == [dict(p, source=None) for p in b["summary"]["per_step"]]
        assert {k: v for k, v in a["summary"].items() if k != "per_step"} == {k: v for k, v in b["summary"].items() if k != "per_step"}
        assert {p["source"] for p in b["summary"]["per_step"]} == {"s3://bkt/inspect-out"}
    assert a["summary"]["anomaly_counts"]  # the rejected sample is listed from rejects.jsonl
    assert inspect_paths(["s3://bkt/inspect-out/manifest.json"], "status")["summary"] == b["summary"]
    do_convert([DATA / "jsonl"], tmp_path / "plain", shards=2)
    do_convert([DATA / "jsonl"], "s3://bkt/inspect-plain", shards=2)
    r_local, r_remote = collect([str(tmp_path / "plain")]), collect(["s3://bkt/inspect-plain"])
    assert r_remote["splits"]["train"]["steps"] == r_local["splits"]["train"]["steps"]
    assert r_remote["splits"]["train"]["distributions"] == r_local["splits"]["train"]["distributions"]
