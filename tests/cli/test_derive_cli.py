"""`rollout-cli derive` (cli/derive.py) through Typer's CliRunner: its --json is the library
result's to_dict(), and the documented exit codes."""
from __future__ import annotations

import json

import pytest
from derive_cases import converted_run
from typer.testing import CliRunner

import rollout_cli
from rollout_cli.cli.app import app


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return converted_run(tmp_path_factory.mktemp("derive_cli"))


def run(*args):
    return CliRunner().invoke(app, ["derive", *map(str, args)])


def test_json_is_the_library_result(out, tmp_path):
    r = run(out, tmp_path / "a", "--as", "sft", "--select", "best", "--min-reward", "1", "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    lib = rollout_cli.derive(str(out), str(tmp_path / "b"), as_="sft", select="best", min_reward=1).to_dict()
    for d in (got, lib):
        d.pop("elapsed_seconds"), d.pop("dest")
    assert got == lib
    assert got["rows"] == {"train": 3}


def test_summary_and_quiet(out, tmp_path):
    r = run(out, tmp_path / "a", "--as", "dpo")
    assert r.exit_code == 0
    assert "derived 2 dpo rows from 8 candidate rollouts of 12" in r.stdout
    r = run(out, tmp_path / "b", "--as", "dpo", "-q")
    assert r.exit_code == 0 and r.stdout == ""


def test_exit_codes(out, tmp_path):
    assert run(out, tmp_path / "a", "--as", "sft").exit_code == 0
    r = run(out, tmp_path / "a", "--as", "sft", "--json")
    assert r.exit_code == 5 and json.loads(r.stdout)["exit_code"] == 5
    assert run(out, tmp_path / "a", "--as", "sft", "--overwrite").exit_code == 0
    assert run(tmp_path / "nothing", tmp_path / "b", "--as", "sft").exit_code == 3
    assert not (tmp_path / "b").exists()
    assert run(out, tmp_path / "b", "--as", "nope").exit_code == 2
    assert run(out, tmp_path / "b", "--as", "kto").exit_code == 2  # --min-reward required
    assert run(out, tmp_path / "b", "--as", "sft", "--pointwise").exit_code == 2
    assert run(out, tmp_path / "b", "--as", "sft", "--test-fraction", "1.5").exit_code == 2
    assert run(out, tmp_path / "b", "--as", "sft", "--split", "eval").exit_code == 2  # the run has no eval step
    assert run(out, tmp_path / "b", "--as", "sft", "--steps", "5:9").exit_code == 2
    assert not (tmp_path / "b").exists()
    assert run(out, tmp_path / "b", "--as", "sft", "--steps", "1").exit_code == 0
