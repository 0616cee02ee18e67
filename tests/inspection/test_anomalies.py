"""rollout_cli.inspection.anomalies: id, group and mask anomalies, their cap, their docs."""
from __future__ import annotations


from inspect_samples import ROOT, anomalies_of, sample, write_jsonl
from rollout_cli.inspection import ANOMALY_KINDS, InspectOptions, inspect_paths


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
    assert list(zero) == [4] and zero[4]["level"] == "warning" and zero[4]["remove_sample"] is False
    # a removed sample is no anomaly: counted, and listed apart
    r = inspect_paths([str(f)])
    assert r["summary"]["removed_samples"] == 1 and r["summary"]["per_step"][0]["removed_samples"] == 1
    assert [(x["level"], x["step"], x["sample_index"], x["where"]) for x in r["removed"]] == [
        ("info", 2, 7, [{"file": str(f), "line": 8}])]
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


def test_an_agentic_run_of_compact_rollouts_is_quiet(tmp_path):
    """Prompt groups of 8 rollouts each, a rollout 1-3 samples (an agent's turns), some turns
    removed by a sample filter: group sizes are 8 rollouts everywhere (no uneven_groups) and the
    removed samples are a count and a listing, not anomalies."""
    rows, index, rid = [], 0, 0
    for g in range(4):
        for r in range(8):
            rid += 1
            for turn in range(1 + (g + r) % 3):
                removed = (g + r + turn) % 5 == 0
                rows.append(sample(index, g, rid, float((r + turn) % 2), remove_sample=removed,
                                   mask=[0, 0, 0] if removed else None))
                index += 1
    f = write_jsonl(tmp_path / "1.jsonl", rows)
    r = inspect_paths([str(f)], options=InspectOptions(n_samples_per_prompt=8))
    kinds = r["summary"]["anomaly_counts"]
    assert "uneven_groups" not in kinds and "all_zero_loss_mask" not in kinds
    assert r["summary"]["group_sizes"] == {8: 4}
    removed = sum(1 for x in rows if x["remove_sample"])
    assert removed and r["summary"]["removed_samples"] == removed == len(r["removed"])
    # a group short of one rollout is uneven, by rollouts
    short = [x for x in rows if not (x["group_index"] == 0 and x["rollout_id"] == 1)]
    a = anomalies_of([write_jsonl(tmp_path / "2.jsonl", short)], n_samples_per_prompt=8)
    assert a["uneven_groups"][0]["group_sizes"] == {7: 1, 8: 3} and a["uneven_groups"][0]["groups"] == [0]


def test_anomalies_come_most_severe_first_then_by_step(tmp_path):
    f1 = write_jsonl(tmp_path / "d" / "1.jsonl", [sample(0, 0, None, 1.0), sample(1, 0, None, 1.0)])  # zero variance
    f2 = write_jsonl(tmp_path / "d" / "2.jsonl", [sample(2, 0, None, 1.0), sample(3, 0, None, 0.0, mask=[0, 0, 0]),
                                                   sample(4, 1, None, 1.0)])  # zero mask, one-sample group
    got = [(a["level"], a["step"]) for a in inspect_paths([str(tmp_path / "d")])["anomalies"]]
    rank = {"error": 0, "warning": 1, "info": 2}
    assert got == sorted(got, key=lambda x: (rank[x[0]], x[1]))
    assert ("warning", 2) in got and ("info", 1) in got  # step 2's warnings before step 1's info
