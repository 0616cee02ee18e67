"""rollout_cli.inspect.stats: the ids and rewards inspect shows are the ones convert writes; anomalies; aggregation."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from inspect_samples import sample, write_jsonl
from rollout_cli.run.convert import ConvertOptions, convert
from rollout_cli.core.errors import InvalidInputError, UsageError
from rollout_cli.inspect import ANOMALY_KINDS, InspectOptions, inspect_paths, iter_steps, show_rollout

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "sample_data"
FORMATS = ("jsonl", "parquet", "pt")
ROW_COLUMNS = ("step", "rollout_id", "sample_index", "group_index", "reward", "raw_reward", "rollout_mask_sum", "status",
               "truncated", "response_length", "total_length", "source_name")


# ------------------------------------------------------------------------------------------ helpers




def rows_of(paths, **opts) -> pa.Table:
    """inspect's per-sample rows, all steps, in convert's order."""
    return pa.concat_tables([sd.rows for sd in iter_steps([str(p) for p in paths], InspectOptions(**opts))])


def converted_rows(out: Path, split: str = "train") -> pa.Table:
    # shards in manifest order (steps in order); with one shard per step, rows are in input order
    m = orjson.loads((out / "manifest.json").read_bytes())
    parts = []
    for s in m["steps"]:
        if s["split"] == split:
            for sh in s["shards"]:
                parts.append(pq.read_table(out / sh["path"]))
    t = pa.concat_tables(parts)
    mask_sum = pa.array([sum(x) for x in t.column("loss_mask").to_pylist()], pa.int64())
    return t.append_column("mask_sum", mask_sum)


def assert_rows_equal(inspected: pa.Table, written: pa.Table) -> None:
    assert inspected.num_rows == written.num_rows
    for c in ROW_COLUMNS + ("mask_sum",):
        a, b = inspected.column(c), written.column(c)
        if c == "reward":  # float32 both sides, bit for bit
            assert np.array_equal(a.to_numpy().view(np.uint32), pc.cast(b, pa.float32()).to_numpy().view(np.uint32)), c
        else:
            assert a.to_pylist() == pc.cast(b, a.type).to_pylist(), c


def do_convert(inputs, out: Path, **opts) -> Path:
    convert([str(p) for p in inputs], str(out), ConvertOptions(overwrite=True, mmap=False, **opts))
    return out


# --------------------------------------------------------------------------- same as convert writes


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("split", ["train", "eval"])
def test_rows_match_convert(tmp_path, fmt, split):
    out = do_convert([DATA / fmt], tmp_path / "out")
    assert_rows_equal(rows_of([DATA / fmt], split=split), converted_rows(out, split))


@pytest.mark.parametrize(
    "opts",
    [
        {"advantage_estimator": "reinforce_plus_plus_baseline"},
        {"advantage_estimator": "ppo"},
        {"grpo_std_normalization": False},
        {"rewards_normalization": False},
        {"n_samples_per_prompt": 4},
        {"rollout_id_scope": "step"},
        {"rollout_id_scope": "group"},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_rows_match_convert_with_options(tmp_path, opts):
    out = do_convert([DATA / "jsonl"], tmp_path / "out", **opts)
    assert_rows_equal(rows_of([DATA / "jsonl"], **opts), converted_rows(out))


def test_rows_match_convert_reward_key(tmp_path):
    src = DATA / "reward_dict" / "jsonl"
    out = do_convert([src], tmp_path / "out", reward_key="accuracy")
    assert_rows_equal(rows_of([src], reward_key="accuracy"), converted_rows(out))


@pytest.mark.parametrize("scope", ["step", "group"])
def test_reused_ids_match_convert(tmp_path, scope):
    f = write_jsonl(tmp_path / "in" / "5.jsonl", [
        sample(0, 0, 7, 1.0), sample(1, 0, 7, 0.0), sample(2, 0, None, 1.0),
        sample(3, 1, 7, 0.0), sample(4, 1, None, 1.0), sample(5, 1, 0, 1.0),
    ])
    out = do_convert([f], tmp_path / "out", rollout_id_scope=scope)
    assert_rows_equal(rows_of([f], rollout_id_scope=scope), converted_rows(out))


def test_invalid_samples_are_left_out_as_convert_skip_does(tmp_path):
    f = write_jsonl(tmp_path / "in" / "2.jsonl", [
        sample(0, 0, None, 1.0), sample(1, 0, 4, 0.0, mask=[1, 1]), sample(2, 0, 4, 1.0), sample(3, 0, None, 0.0),
        sample(4, 1, None, 1.0, status="weird"), sample(5, 1, None, 0.0), sample(6, 1, None, 0.5),
    ])
    with pytest.raises(InvalidInputError):
        do_convert([f], tmp_path / "fail")
    out = do_convert([f], tmp_path / "out", on_error="skip")
    assert_rows_equal(rows_of([f]), converted_rows(out))
    r = inspect_paths([str(f)])
    s = r["summary"]
    assert (s["samples"], s["rows"], s["rejected"]) == (7, 4, 3)
    kinds = [a["kind"] for a in r["anomalies"]]
    assert kinds.count("loss_mask_length") == 1 and kinds.count("invalid_sample") == 1 and kinds.count("rejected_sibling") == 1
    lm = next(a for a in r["anomalies"] if a["kind"] == "loss_mask_length")
    assert lm["where"] == [{"file": str(f), "line": 2}] and lm["level"] == "error" and lm["rollout_id"] == 4
    # the same anomalies come back from the converted output's rejects.jsonl
    r2 = inspect_paths([str(out)])
    assert sorted(a["kind"] for a in r2["anomalies"] if a["kind"] in ("loss_mask_length", "invalid_sample", "rejected_sibling")) == \
        ["invalid_sample", "loss_mask_length", "rejected_sibling"]
    assert (r2["summary"]["samples"], r2["summary"]["rows"], r2["summary"]["rejected"]) == (7, 4, 3)


# ------------------------------------------------------------------------ dumps == converted output


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


def test_summary_counts_sample_data():
    s = inspect_paths([str(DATA / "jsonl")])["summary"]
    assert (s["files"], s["steps"], s["samples"], s["rows"], s["rejected"]) == (3, 3, 46, 46, 0)
    assert (s["rollouts"], s["prompt_groups"]) == (16 + 8 + 11, 12)
    assert s["samples_per_rollout"] == {1: 27, 2: 5, 3: 3}
    assert s["group_sizes"] == {2: 1, 3: 2, 4: 7, 5: 2}
    assert s["status"] == {"completed": 40, "truncated": 5, "aborted": 1}
    assert s["tokens"]["total"] == 524 + 366 + 406
    assert s["tokens"]["prompt"] + s["tokens"]["response"] == s["tokens"]["total"]
    assert [p["step"] for p in s["per_step"]] == [1, 2, 3]
    assert [p["zero_variance_groups"] for p in s["per_step"]] == [2, 1, 1]
    assert s["rewards"]["reward"]["count"] == 46
    assert any("eval" in n for n in s["notes"])
    e = inspect_paths([str(DATA / "jsonl")], options=InspectOptions(split="eval"))["summary"]
    assert (e["steps"], e["samples"], e["rollouts"]) == (1, 7, 7)


def test_groups_sort_and_limit():
    r = inspect_paths([str(DATA / "jsonl")], "rollout_id", sort="samples", limit=3)
    assert r["summary"]["groups_total"] == 35 and len(r["groups"]) == 3
    assert [g["samples"] for g in r["groups"]] == [3, 3, 3]
    assert [g["key"] for g in r["groups"]] == [[2, 16], [2, 26], [3, 7]]  # ties by key
    r = inspect_paths([str(DATA / "jsonl")], "group_index", sort="reward_min:asc")
    mins = [g["reward_min"] for g in r["groups"]]
    assert mins == sorted(mins)
    r = inspect_paths([str(DATA / "jsonl")], "status")
    assert [(g["key"], g["samples"]) for g in r["groups"]] == [("aborted", 1), ("completed", 40), ("truncated", 5)]


# ---------------------------------------------------------------------------------------- anomalies


def anomalies_of(paths, **opts) -> dict[str, list[dict]]:
    r = inspect_paths([str(p) for p in paths], options=InspectOptions(**opts))
    out: dict[str, list[dict]] = {}
    for a in r["anomalies"]:
        out.setdefault(a["kind"], []).append(a)
    assert {k: len(v) for k, v in out.items()} == r["summary"]["anomaly_counts"]
    return out


def test_id_anomalies(tmp_path):
    f = write_jsonl(tmp_path / "1.jsonl", [
        sample(0, 0, 5, 1.0), sample(1, 0, None, 0.0), sample(2, 0, 5, 1.0),  # rollout 5 not adjacent
        sample(3, 1, 8, 1.0), sample(4, 1, None, 0.0), sample(5, 2, 8, 0.0), sample(6, 2, None, 1.0),  # 8 in two groups
    ])
    strict = anomalies_of([f])
    reuse = strict["id_reused_across_groups"]
    assert len(reuse) == 1 and reuse[0]["level"] == "error" and reuse[0]["rollout_id"] == 8 and reuse[0]["groups"] == [1, 2]
    assert reuse[0]["where"] == [{"file": str(f), "line": 4}, {"file": str(f), "line": 6}]
    assert strict["mixed_ids"][0]["level"] == "info" and strict["mixed_ids"][0]["step"] == 1
    nonadj = {a["rollout_id"]: a for a in strict["non_adjacent_siblings"]}
    assert nonadj[5]["where"] == [{"file": str(f), "line": 1}, {"file": str(f), "line": 3}]
    # not fatal: strict leaves the conflicting samples out, as convert --on-error skip
    s = inspect_paths([str(f)])["summary"]
    assert (s["samples"], s["rows"], s["rejected"]) == (7, 5, 2)
    merged = anomalies_of([f], rollout_id_scope="step")
    assert merged["id_reused_across_groups"][0]["level"] == "warning"
    g = inspect_paths([str(f)], "rollout_id", InspectOptions(rollout_id_scope="step"))["groups"]
    assert next(x for x in g if x["key"] == [1, 8])["group_index"] == [1, 2]


def test_group_and_mask_anomalies(tmp_path):
    f = write_jsonl(tmp_path / "2.jsonl", [
        sample(0, 0, None, 1.0), sample(1, 0, None, 0.0), sample(2, 0, None, 1.0),
        sample(3, 1, None, 1.0), sample(4, 1, None, 1.0, mask=[0, 0, 0]), sample(5, 1, None, 1.0),
        sample(6, 2, None, 1.0),
        sample(7, 3, None, 0.0, remove_sample=True), sample(8, 3, None, 1.0), sample(9, 3, None, 1.0),
    ])
    a = anomalies_of([f])
    assert [x["group_index"] for x in a["single_sample_group"]] == [2]
    assert a["single_sample_group"][0]["where"] == [{"file": str(f), "line": 7}]
    assert a["uneven_groups"][0]["expected"] == 3 and a["uneven_groups"][0]["groups"] == [2]
    assert [x["group_index"] for x in a["zero_variance_group"]] == [1]
    zero = {x["sample_index"]: x for x in a["all_zero_loss_mask"]}
    assert zero[4]["level"] == "warning" and zero[4]["remove_sample"] is False
    assert zero[7]["level"] == "info" and zero[7]["remove_sample"] is True
    # an explicit group size makes every other size uneven
    b = anomalies_of([f], n_samples_per_prompt=4)
    assert b["uneven_groups"][0]["expected"] == 4 and b["uneven_groups"][0]["groups"] == [0, 1, 2, 3]


def test_missing_group_index_is_an_anomaly(tmp_path):
    f = write_jsonl(tmp_path / "4.jsonl", [sample(0, None, None, 1.0), sample(1, None, None, 0.0)])
    a = anomalies_of([f])
    assert list(a) == ["group_index_missing"] and a["group_index_missing"][0]["level"] == "error"
    s = inspect_paths([str(f)])["summary"]
    assert s["rewards"]["reward"]["count"] == 0 and s["rows"] == 2
    s = inspect_paths([str(f)], options=InspectOptions(n_samples_per_prompt=2))["summary"]
    assert s["rewards"]["reward"]["count"] == 2 and s["prompt_groups"] == 1


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


def test_anomaly_cap_keeps_counts(tmp_path):
    rows = [sample(i, i, None, 1.0) for i in range(5)] + [sample(5, 5, None, 1.0), sample(6, 5, None, 0.0)]
    f = write_jsonl(tmp_path / "3.jsonl", rows)
    r = inspect_paths([str(f)], options=InspectOptions(max_anomalies=2))
    assert r["summary"]["anomaly_counts"]["single_sample_group"] == 5
    assert sum(a["kind"] == "single_sample_group" for a in r["anomalies"]) == 2


def test_every_kind_is_documented():
    doc = (ROOT / "docs" / "inspect.md").read_text()
    for k in ANOMALY_KINDS:
        assert f"`{k}`" in doc, k


# ------------------------------------------------------------------------------------------- --show


def test_show_dump_and_output(tmp_path):
    r = show_rollout([str(DATA / "pt")], "2:16")["rollout"]
    assert (r["step"], r["rollout_id"], r["rollout_mask_sum"], r["text"]) == (2, 16, 18, True)
    assert [s["sample_index"] for s in r["samples"]] == [16, 17, 18]
    assert r["samples"][1]["mask_runs"] == [[1, 3], [0, 3], [1, 3]]
    assert "is_palindrome" in r["samples"][0]["response"]
    plain = do_convert([DATA / "jsonl"], tmp_path / "plain")
    o = show_rollout([str(plain)], "2:16")["rollout"]
    assert o["text"] is False and "--keep-text" in o["note"] and "prompt" not in o["samples"][0]
    assert [s["reward"] for s in o["samples"]] == [s["reward"] for s in r["samples"]]
    text = do_convert([DATA / "jsonl"], tmp_path / "text", keep_text=True)
    t = show_rollout([str(text)], "3:7")["rollout"]
    assert t["text"] is True and len(t["samples"]) == 3 and t["samples"][0]["label"] == "6"


def test_show_lists_rejected_siblings(tmp_path):
    f = write_jsonl(tmp_path / "2.jsonl", [sample(0, 0, 4, 1.0, mask=[1]), sample(1, 0, 4, 0.0), sample(2, 0, None, 0.0)])
    r = show_rollout([str(f)], "4")["rollout"]
    assert r["samples"] == [] and [x["field"] for x in r["rejected"]] == ["loss_mask", None]


# ------------------------------------------------------------------------------------------- errors


def test_usage_errors(tmp_path):
    with pytest.raises(UsageError):
        inspect_paths([str(DATA / "jsonl")], "nope")
    with pytest.raises(UsageError):
        inspect_paths([str(DATA / "jsonl")], "rollout_id", sort="bogus")
    with pytest.raises(UsageError):
        inspect_paths([str(DATA / "jsonl")], "step", sort="rollout_mask_sum")
    with pytest.raises(UsageError):
        inspect_paths([str(DATA / "jsonl")], limit=-1)
    with pytest.raises(UsageError):
        inspect_paths([str(tmp_path / "missing")])
    with pytest.raises(UsageError):
        show_rollout([str(DATA / "jsonl")], "16")  # three steps: needs STEP:ID
    with pytest.raises(UsageError):
        show_rollout([str(DATA / "jsonl")], "1:99")
    with pytest.raises(UsageError):
        show_rollout([str(DATA / "jsonl")], "a:b")
    out = do_convert([DATA / "jsonl"], tmp_path / "out")
    with pytest.raises(UsageError):
        inspect_paths([str(out), str(DATA / "jsonl")])
    with pytest.raises(UsageError):  # a shard is not a dump
        inspect_paths([str(out / "data" / "step-000001" / "shard-00000-of-00001.parquet")])


def test_unreadable_inputs(tmp_path):
    bad = tmp_path / "1.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(InvalidInputError):
        inspect_paths([str(bad)])
    out = do_convert([DATA / "jsonl"], tmp_path / "out")
    (out / "manifest.json").write_text("{")
    with pytest.raises(InvalidInputError):
        inspect_paths([str(out)])
    out2 = do_convert([DATA / "jsonl"], tmp_path / "out2")
    shutil.copy(bad, out2 / "data" / "step-000002" / "shard-00000-of-00001.parquet")
    with pytest.raises(InvalidInputError):
        inspect_paths([str(out2)])
