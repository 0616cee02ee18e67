"""convert --schedule slime from the command line: flags, the Schedule help panel, warnings."""
from __future__ import annotations

import json

from typer.testing import CliRunner

import slime_cases
from conftest import write_jsonl
from rollout_cli.cli.app import app


def test_schedule_panel_fits_80_columns():
    res = CliRunner().invoke(app, ["convert", "--help"], env={"COLUMNS": "80", "TERM": "dumb"})
    assert res.exit_code == 0
    assert "Schedule" in res.output and "--global-batch-size" in res.output and "--keep-trailing" in res.output
    assert max(len(line) for line in res.output.splitlines()) <= 80


def test_convert_slime_warns_about_dropped_rollouts(tmp_path):
    write_jsonl(tmp_path / "1.jsonl", slime_cases.fresh_case("mixed_ids")["samples"])
    args = ["convert", str(tmp_path / "1.jsonl"), str(tmp_path / "out"), "--workers", "1", "--n-samples-per-prompt", "2",
            "--schedule", "slime", "--global-batch-size", "4", "--shards", "2", "--use-dynamic-batch-size",
            "--max-tokens-per-gpu", "12"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "slime drops the trailing 2 rollout(s) (2 samples; ids 4, 7)" in res.output
    ins = CliRunner().invoke(app, ["inspect", str(tmp_path / "out")])
    assert ins.exit_code == 0 and "slime drops the trailing 2 rollout(s)" in ins.output
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert m["counts"]["dropped"] == 2 and m["options"]["global_batch_size"] == 4
    res = CliRunner().invoke(app, args[:-3] + ["--micro-batch-size", "1", "--global-batch-size", "2", "--overwrite"])
    assert res.exit_code == 3 and "optimizer step 0: 3 samples" in res.output
    res = CliRunner().invoke(app, ["convert", str(tmp_path / "1.jsonl"), str(tmp_path / "o2"), "--global-batch-size", "2"])
    assert res.exit_code == 2 and "needs --schedule slime" in res.output
