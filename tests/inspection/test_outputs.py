"""inspect on converted output (rollout_cli.inspection.outputs): the same groups as its dumps; anomalies from shards, manifest and rejects."""
from __future__ import annotations

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from inspect_samples import DATA, anomalies_of, do_convert, sample, write_jsonl
from rollout_cli.inspection import inspect_paths


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

    from rollout_cli.reporting import collect

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


def _removed(paths) -> list[tuple]:
    """The samples remove_sample left out, without where they are (a dump line, a shard row)."""
    r = inspect_paths([str(p) for p in paths])
    assert "all_zero_loss_mask" not in r["summary"]["anomaly_counts"]  # no anomaly
    return sorted((x["step"], x["level"], x["rollout_id"], x["sample_index"]) for x in r["removed"])


@pytest.mark.parametrize("fmt", ["jsonl", "pt"])
def test_a_removed_sample_is_classified_alike_on_dumps_and_on_the_output(tmp_path, fmt):
    """sample_data step 1, sample 10 has remove_sample: inspect on the dumps reads the flag, on
    the output the remove_sample column: the same listing (info, not an anomaly), the same rows
    and the same counts; --show gives the flag on both."""
    from inspect_samples import rows_of
    from rollout_cli.inspection import show_rollout

    out = do_convert([DATA / fmt], tmp_path / "out", shards=2)
    on_dumps, on_output = _removed([DATA / fmt]), _removed([out])
    assert on_dumps == on_output
    assert [(step, level, rid) for step, level, rid, _ in on_output] == [(1, "info", 10)]
    a, b = inspect_paths([str(DATA / fmt)]), inspect_paths([str(out)])
    assert a["summary"]["anomaly_counts"] == b["summary"]["anomaly_counts"]
    dumps_rows = rows_of([DATA / fmt]).filter(pa.compute.equal(pa.compute.field("step"), 1))
    out_rows = rows_of([out]).filter(pa.compute.equal(pa.compute.field("step"), 1))
    flags = lambda t: sorted(zip(t.column("rollout_id").to_pylist(), t.column("remove_sample").to_pylist()))
    assert flags(dumps_rows) == flags(out_rows) and sum(r for _, r in flags(out_rows)) == 1
    for src in (DATA / fmt, out):
        shown = show_rollout([str(src)], "1:10")["rollout"]["samples"]
        assert [(s["remove_sample"], s["mask_sum"]) for s in shown] == [(True, 0)], src
        assert [s["remove_sample"] for s in show_rollout([str(src)], "1:9")["rollout"]["samples"]] == [False]


def test_an_output_of_schema_version_2_has_no_remove_sample_to_show(tmp_path):
    """An output written before the column: inspect still reads it; the flag is unknown (null),
    so a zeroed mask is a warning, as it was then."""
    from old_outputs import as_schema_version_2
    from rollout_cli.inspection import show_rollout

    out = as_schema_version_2(do_convert([DATA / "jsonl"], tmp_path / "out", shards=2))
    found = sorted((a["step"], a["level"], a["rollout_id"], a["remove_sample"])
                   for a in anomalies_of([out]).get("all_zero_loss_mask", []))
    assert found == [(1, "warning", 10, None)] and inspect_paths([str(out)])["removed"] == []
    assert show_rollout([str(out)], "1:10")["rollout"]["samples"][0]["remove_sample"] is None
    assert inspect_paths([str(out)])["summary"]["rows"] == inspect_paths([str(DATA / "jsonl")])["summary"]["rows"]


def _rejects_kinds(out) -> dict:
    r = inspect_paths([str(out)])
    return {a["where"][0]["line"]: (a["kind"], a.get("rule")) for a in r["anomalies"]
            if a["kind"] in ("loss_mask_length", "invalid_sample", "rejected_sibling")}


def _rewrite_rejects(out, change) -> None:
    path = out / "rejects.jsonl"
    recs = [change(orjson.loads(line)) for line in path.read_bytes().splitlines()]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))


def test_rejects_are_classified_by_their_rule_id(tmp_path):
    """The anomaly kind of a reject comes from its rule id, not from its wording; a
    rejects.jsonl written before reject records carried one is still read."""
    f = write_jsonl(tmp_path / "in" / "2.jsonl", [
        sample(0, 0, None, 1.0), sample(1, 0, 4, 0.0, mask=[1, 1]), sample(2, 0, 4, 1.0), sample(3, 0, None, 0.0),
        sample(4, 1, None, 1.0, status="weird"),
    ])
    out = do_convert([f], tmp_path / "out", on_error="skip")
    want = {2: ("loss_mask_length", "loss_mask.length"), 3: ("rejected_sibling", None),
            5: ("invalid_sample", "status.unknown")}
    assert _rejects_kinds(out) == want
    written = (out / "rejects.jsonl").read_bytes()
    _rewrite_rejects(out, lambda r: dict(r, reason="reworded"))
    assert _rejects_kinds(out) == want
    (out / "rejects.jsonl").write_bytes(written)
    _rewrite_rejects(out, lambda r: {k: v for k, v in r.items() if k != "rule"})
    assert _rejects_kinds(out) == {2: ("loss_mask_length", "loss_mask.length"), 3: ("rejected_sibling", None),
                                   5: ("invalid_sample", None)}
