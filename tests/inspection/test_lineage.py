"""rollout_cli.inspection.lineage: per step, the weight versions present and the samples that span
more than one, and the rewards not recorded, the same on dumps and on their converted output
(and absent from an output of schema version 3, which kept neither)."""
from __future__ import annotations

import pyarrow as pa
from typer.testing import CliRunner

from conftest import copts
from lineage_cases import jsonl_without_rewards, write_unrecorded
from old_outputs import schema_3_output, schema_4_output
from rollout_cli.cli.app import app
from rollout_cli.inspection import inspect_paths
from rollout_cli.inspection.lineage import step_lineage, version_order
from rollout_cli.run.convert import convert


def test_versions_in_order_and_samples_of_several():
    rows = pa.table({"weight_versions": pa.array([["10"], ["9", "10"], None, ["v2"], ["10", "10"]], pa.list_(pa.string())),
                     "raw_reward": pa.array([1.0, None, 0.0, None, 1.0])})
    assert step_lineage(rows) == {"weight_versions": {"9": 1, "10": 3, "v2": 1}, "multi_version_samples": 1,
                                  "rewards_not_recorded": 2}
    assert sorted(["v1", "10", "9"], key=version_order) == ["9", "10", "v1"]


def test_dumps_and_their_output_show_the_same_lineage_and_unrecorded_rewards(tmp_path, monkeypatch):
    jsonl_without_rewards(monkeypatch)
    src = write_unrecorded(tmp_path / "in")
    convert([str(src)], str(tmp_path / "out"), copts())
    for path in (src, tmp_path / "out"):
        r = inspect_paths([str(path)])
        s, p = r["summary"], r["summary"]["per_step"][0]
        assert (p["weight_versions"], p["multi_version_samples"], p["rewards_not_recorded"]) == ({"0": 1, "1": 6}, 1, 4)
        assert (s["rewards_not_recorded"], s["multi_version_samples"]) == (4, 1)
        assert s["rewards"]["raw_reward"]["count"] == 2 and p["raw_reward_mean"] == 0.5
        mv = [a for a in r["anomalies"] if a["kind"] == "multi_version_sample"]
        assert [(a["weight_versions"], a["level"]) for a in mv] == [(["0", "1"], "info")]
    text = CliRunner().invoke(app, ["inspect", str(tmp_path / "out")])
    assert text.exit_code == 0, text.output
    assert "not recorded for 4 samples" in text.output and "lineage (weight versions" in text.output
    assert "0: 1, 1: 6" in text.output
    shown = CliRunner().invoke(app, ["inspect", str(tmp_path / "out"), "--show", "1:0"])
    assert "reward not recorded" in shown.output and "weight versions 1" in shown.output


def test_a_step_without_any_reward_says_not_recorded(tmp_path, monkeypatch):
    jsonl_without_rewards(monkeypatch)
    (tmp_path / "in").mkdir()
    rec = b'{"index": 0, "group_index": 0, "tokens": [1, 2, 3], "response_length": 1, "status": "completed"}\n'
    (tmp_path / "in" / "2.jsonl").write_bytes(rec * 2)
    text = CliRunner().invoke(app, ["inspect", str(tmp_path / "in")])
    assert text.exit_code == 0, text.output
    assert "raw_reward, reward: not recorded" in text.output and "not recorded  not recorded" in text.output


def test_an_output_of_schema_version_3_has_no_lineage(tmp_path):
    r = inspect_paths([str(schema_3_output(tmp_path / "v3"))])
    p = r["summary"]["per_step"][0]
    assert (p["weight_versions"], p["multi_version_samples"], p["rewards_not_recorded"], p["rows"]) == ({}, 0, 0, 6)


def test_older_outputs_read_every_row_as_token_exact(tmp_path):
    for make, name in ((schema_3_output, "v3"), (schema_4_output, "v4")):
        s = inspect_paths([str(make(tmp_path / name))])["summary"]
        assert (s["not_token_exact"], s["per_step"][0]["not_token_exact"], s["rows"]) == (0, 0, 6)
