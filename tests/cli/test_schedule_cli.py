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


def test_denominators_count_the_rows_the_schedule_keeps(tmp_path):
    """Trailing rollouts slime drops are written nowhere, so the step and group totals leave them out."""
    import pyarrow.parquet as pq

    from rollout_cli.verification.check import verify_output

    write_jsonl(tmp_path / "1.jsonl", slime_cases.fresh_case("mixed_ids")["samples"])
    args = ["convert", str(tmp_path / "1.jsonl"), str(tmp_path / "out"), "--workers", "1", "--n-samples-per-prompt", "2",
            "--schedule", "slime", "--global-batch-size", "4", "--shards", "2", "--use-dynamic-batch-size",
            "--max-tokens-per-gpu", "12", "-q"]
    assert CliRunner().invoke(app, args).exit_code == 0
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    s = m["steps"][0]
    rows = [r for sh in s["shards"] for r in pq.read_table(tmp_path / "out" / sh["path"]).to_pylist()]
    assert s["step_samples"] == s["rows"] == len(rows) and s["step_rollouts"] == len({r["rollout_id"] for r in rows}) == 4
    assert {r["step_mask_sum"] for r in rows} == {sum(sum(r["loss_mask"]) for r in rows)}
    assert verify_output(str(tmp_path / "out"))["failures"] == []
