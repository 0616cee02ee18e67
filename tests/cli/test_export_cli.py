"""`rollout-cli export`: exit codes and output."""
from __future__ import annotations

import json

import pytest
from conftest import SAMPLE_JSONL
from typer.testing import CliRunner

from rollout_cli.cli.app import app

import torch  # noqa: F401  (the test extra installs it)


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_export_cli(tmp_path):
    out, dest = tmp_path / "out", tmp_path / "dest"
    assert run("convert", SAMPLE_JSONL, out, "--workers", "1", "-q", "--on-error", "skip").exit_code == 0
    res = run("export", out, dest, "--format", "slime-pt", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert [f["path"] for f in data["files"]] == ["1.pt", "2.pt", "3.pt", "eval_3.pt"]
    again = run("export", out, dest, "--format", "slime-pt", "--split", "eval")
    assert again.exit_code == 5 and "--overwrite" in again.output
    ok = run("export", out, dest, "--format", "slime-pt", "--split", "eval", "--steps", "3", "--overwrite")
    assert ok.exit_code == 0 and "eval step 3, 7 samples" in ok.output
    assert sorted(p.name for p in dest.iterdir()) == [".rollout-cli-export.json", "eval_3.pt"]
    assert run("export", tmp_path / "nothing", dest, "--format", "slime-pt", "--overwrite").exit_code == 4
    assert run("export", out, dest, "--format", "csv").exit_code == 2
    assert run("export", out, dest, "--format", "slime-pt", "--steps", "x:y", "--overwrite").exit_code == 2
