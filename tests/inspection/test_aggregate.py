"""rollout_cli.inspection.aggregate: summary counts, histograms, group rows, sort and limit."""
from __future__ import annotations


from inspect_samples import DATA
from rollout_cli.inspection import InspectOptions, inspect_paths


def test_summary_counts_sample_data():
    s = inspect_paths([str(DATA / "jsonl")])["summary"]
    assert (s["files"], s["steps"], s["samples"], s["rows"], s["rejected"]) == (3, 3, 46, 46, 0)
    assert (s["rollouts"], s["prompt_groups"]) == (16 + 8 + 11, 12)
    assert s["samples_per_rollout"] == {1: 27, 2: 5, 3: 3}
    assert s["group_sizes"] == {1: 1, 2: 5, 4: 6}  # in rollouts: a compact rollout is one member
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
