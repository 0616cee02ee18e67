"""`rollout-cli report` end to end (CliRunner): the page's numbers equal `inspect --json`'s for the
same input, --json's path and counts, exit codes."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import SAMPLE_DATA
from inspect_samples import sample, write_jsonl
from rollout_cli.cli.app import app
from rollout_cli.reporting import read_data


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def inspect_json(*args: str) -> dict:
    r = run("inspect", *args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize("split", ["train", "eval"])
@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "pt"])
def test_page_numbers_equal_inspect_json(tmp_path, fmt, split):
    src = str(SAMPLE_DATA / fmt)
    out = tmp_path / "r.html"
    r = run("report", src, "-o", str(out), "-q")
    assert r.exit_code == 0, r.output
    page = read_data(str(out))["splits"][split]["inspect"]
    assert page == inspect_json(src, "--split", split)


def test_page_numbers_equal_inspect_json_converted_with_options(tmp_path, sample_out_clean):
    out = tmp_path / "r.html"
    assert run("report", str(sample_out_clean), "-o", str(out), "--max-anomalies", "1", "-q").exit_code == 0
    assert read_data(str(out))["splits"]["train"]["inspect"] == inspect_json(str(sample_out_clean), "--max-anomalies", "1")
    rk = str(SAMPLE_DATA / "reward_dict" / "jsonl")
    assert run("report", rk, "-o", str(out), "--reward-key", "accuracy", "--steps", "1", "--overwrite", "-q").exit_code == 0
    assert read_data(str(out))["splits"]["train"]["inspect"] == inspect_json(rk, "--reward-key", "accuracy", "--steps", "1")


def test_json_prints_path_and_counts(tmp_path):
    out = tmp_path / "r.html"
    r = run("report", str(SAMPLE_DATA / "jsonl"), "-o", str(out), "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["path"] == str(out) and res["bytes"] == out.stat().st_size
    assert res["counts"]["train"] == {"steps": 3, "samples": 46, "rows": 46, "rejected": 0, "rollouts": 35, "anomalies": 7,
                                      "rollouts_embedded": 35}
    assert res["counts"]["eval"]["samples"] == 7


def test_summary_line(tmp_path):
    r = run("report", str(SAMPLE_DATA / "jsonl"), "-o", str(tmp_path / "r.html"))
    assert r.exit_code == 0 and r.stdout.startswith(f"wrote {tmp_path / 'r.html'} (")
    assert "train: 3 step(s), 46 samples, 35 rollouts, 7 anomalies" in r.stdout


def test_invalid_samples_are_anomalies_on_the_page(tmp_path):
    p = write_jsonl(tmp_path / "d" / "1.jsonl", [sample(0, 0, rl=3, mask=[1, 1]), sample(1, 0), sample(2, 1), sample(3, 1, reward=0.0)])
    out = tmp_path / "r.html"
    r = run("report", str(p), "-o", str(out), "--json")
    assert r.exit_code == 0, r.output
    ins = read_data(str(out))["splits"]["train"]["inspect"]
    assert ins == inspect_json(str(p))
    assert ins["summary"]["anomaly_counts"]["loss_mask_length"] == 1 and ins["summary"]["rejected"] == 1


def test_exit_codes(tmp_path):
    out = tmp_path / "r.html"
    data = str(SAMPLE_DATA / "jsonl")
    assert run("report", data, "-o", str(out), "-q").exit_code == 0
    r = run("report", data, "-o", str(out), "--json")
    assert r.exit_code == 5 and json.loads(r.stdout)["error"] == "OutputExistsError"
    assert run("report", data, "-o", str(out), "--details", "-1").exit_code == 2
    assert run("report", str(tmp_path / "missing"), "-o", str(tmp_path / "x.html")).exit_code == 2
    assert run("report", data, "-o", str(out / "under-a-file.html")).exit_code == 6
    assert run("report", data, "-o", str(tmp_path / "no" / "such" / "dir.html")).exit_code == 6
    bad = tmp_path / "bad" / "1.parquet"
    bad.parent.mkdir()
    bad.write_bytes(b"garbage")
    r = run("report", str(bad), "-o", str(tmp_path / "b.html"))
    assert r.exit_code == 3 and "1.parquet" in r.output
    assert not (tmp_path / "b.html").exists()  # nothing written


def test_report_with_train_adds_the_trainer_section(tmp_path):
    import train_dumps as T

    rollout, train = T.write_run(tmp_path / "run", steps=(0, 1), edit=T.reward_fault)
    out = tmp_path / "r.html"
    r = CliRunner().invoke(app, ["report", str(rollout), "--train", str(train), "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["trainer"]["paired_steps"] == 2 and res["trainer"]["divergences"] == 1
    assert read_data(str(out))["trainer"]["audit"]["summary"]["divergences"] == 1
