"""rollout_cli.pipeline.staleness: `--max-staleness N` rejects whole rollouts whose oldest weight
version is more than N steps behind their step, into the rejects report, where the input's
format says how a version compares with a step."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import SAMPLE_DATA, copts, make_sample, read_jsonl, read_rows, write_jsonl
from rollout_cli.core.errors import Location, UsageError
from rollout_cli.inputs.slime_pt.versions import versions_behind
from rollout_cli.pipeline.staleness import STALE_RULE, oldest_versions, stale_problem, stale_rollouts
from rollout_cli.run.convert import convert


def test_a_rows_oldest_version_is_the_one_furthest_behind_and_comparable():
    rows = [["6"], ["4", "6"], None, [], ["x"], ["x", "3"], ["7"]]
    assert oldest_versions(rows, 5, versions_behind) == [(0, "6"), (2, "4"), None, None, None, (3, "3"), (-1, "7")]


def test_a_rollout_is_stale_by_its_oldest_sample():
    oldest = [(0, "6"), (2, "4"), (0, "6"), None, (5, "1")]
    ids = np.array([10, 10, 11, 12, 12])
    assert stale_rollouts(oldest, ids, 1, 5) == {10: (2, "4"), 12: (5, "1")}
    assert stale_rollouts(oldest, ids, 2, 5) == {12: (5, "1")}
    assert stale_rollouts(oldest, ids, 5, 5) == {}
    p = stale_problem(Location("a.jsonl", "line", 3), 10, 2, "4", 5, 1)
    assert (p.field, p.rule) == ("weight_versions", STALE_RULE)
    assert p.message == "rollout 10: its oldest weight version '4' is 2 steps behind step 5, more than --max-staleness 1"


def _run(tmp_path, versions: list, **kw):
    """Step 5 of slime JSONL: rollout r (explicit id) of prompt group r // 2, two samples each,
    the samples' weight versions as given (one list per sample)."""
    recs = [make_sample(index=i, group_index=i // 4, rollout_id=i // 2, reward=float(i % 3), weight_versions=v)
            for i, v in enumerate(versions)]
    write_jsonl(tmp_path / "in" / "5.jsonl", recs)
    return convert([str(tmp_path / "in")], str(tmp_path / "out"), copts(**kw))


def test_stale_rollouts_go_whole_to_the_rejects_report_even_under_on_error_fail(tmp_path):
    # rollout 0: current (version 6 = step 5's own); rollout 1: one sample resumed from version 4;
    # rollout 2: no versions (not judged); rollout 3: version 5, one behind
    versions = [["6"], ["6"], ["6"], ["4", "6"], None, [], ["5"], ["5"]]
    res = _run(tmp_path, versions, max_staleness=1)
    rows = read_rows(tmp_path / "out", step=5)
    assert sorted({r["rollout_id"] for r in rows}) == [0, 2, 3]
    rejects = read_jsonl(tmp_path / "out" / "rejects.jsonl")
    assert [(r["line"], r["rollout_id"], r["rule"], r["field"]) for r in rejects] == [
        (3, 1, STALE_RULE, "weight_versions"), (4, 1, STALE_RULE, "weight_versions")]
    assert "oldest weight version '4' is 2 steps behind step 5, more than --max-staleness 1" in rejects[0]["reason"]
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert m["options"]["max_staleness"] == 1 and res["rejects"]["count"] == 2
    # the prompt group's reward statistics are over the rows kept
    assert [r["weight_versions"] for r in rows] == [["6"], ["6"], None, None, ["5"], ["5"]]


def test_stale_rejects_are_not_errors_for_max_errors(tmp_path):
    versions = [["1"], ["1"], ["6"], ["6"]]
    _run(tmp_path, versions, max_staleness=0, on_error="skip", max_errors=0)
    assert [r["rule"] for r in read_jsonl(tmp_path / "out" / "rejects.jsonl")] == [STALE_RULE] * 2


def test_without_the_option_nothing_is_judged_or_recorded(tmp_path):
    _run(tmp_path, [["1"], ["1"], ["6"], ["6"]])
    assert not (tmp_path / "out" / "rejects.jsonl").exists()
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert "max_staleness" not in m["options"]


def test_a_format_whose_versions_are_not_comparable_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match=r"--max-staleness: the weight versions of nemo_rl inputs are not comparable"):
        convert([str(SAMPLE_DATA / "nemo_rl")], str(tmp_path / "out"), copts(max_staleness=2))
    with pytest.raises(UsageError, match="--max-staleness: expected 0 or more steps"):
        convert([str(SAMPLE_DATA / "jsonl")], str(tmp_path / "out"), copts(max_staleness=-1))
