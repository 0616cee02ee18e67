"""The root command (cli/app.py): under --json a command-line mistake (unknown option, bad value,
missing argument) answers with the same one JSON object on stdout as every other error, the
usage text going to stderr; without --json stdout stays empty. In process (CliRunner) and
through the installed executable."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rollout_cli.cli.app import app

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("convert", "inspect", "verify", "report", "export", "audit")

# (arguments, a word of the message): each a mistake click finds while parsing
MISTAKES = [
    (["--bogus-flag", "x"], "--bogus-flag"),  # unknown option
    ([], "Missing argument"),  # the paths are required
]
BAD_VALUES = {  # an option of each command given a value of the wrong type
    "convert": ["--workers", "many", "in", "out"],
    "inspect": ["--split", "nope", "x"],
    "verify": ["--quick=maybe", "x"],
    "report": ["--details", "lots", "x"],
    "export": ["--format", "nope", "x", "y"],
    "audit": ["--max-divergences", "lots", "x"],
}


def error_object(stdout: str) -> dict:
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    obj = json.loads(lines[0])
    assert set(obj) == {"error", "message", "exit_code"}, obj
    assert obj["error"] == "UsageError" and obj["exit_code"] == 2
    return obj


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("args,word", MISTAKES)
def test_json_usage_error_is_one_object(command, args, word):
    r = CliRunner().invoke(app, [command, "--json", *args])
    assert r.exit_code == 2, r.output
    assert word in error_object(r.stdout)["message"]
    assert "Usage: " in r.stderr and "Usage: " not in r.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_json_bad_value_is_one_object(command):
    args = BAD_VALUES[command]
    r = CliRunner().invoke(app, [command, *args, "--json"])  # --json after the mistake too
    assert r.exit_code == 2, r.output
    flag = args[0].split("=")[0]
    assert flag in error_object(r.stdout)["message"]
    assert flag in r.stderr and flag not in r.stdout.replace(flag, "", 1)


def test_without_json_stdout_stays_empty():
    r = CliRunner().invoke(app, ["inspect", "--bogus-flag", "x"])
    assert r.exit_code == 2 and r.stdout == ""
    assert "--bogus-flag" in r.stderr


def test_json_after_double_dash_is_a_path():
    """`--` ends the options: a --json after it is a path, not the flag."""
    r = CliRunner().invoke(app, ["inspect", "--bogus-flag", "--", "--json"])
    assert r.exit_code == 2 and r.stdout == ""


def test_executable_prints_the_object_on_stdout():
    exe = Path(sys.executable).with_name("rollout-cli")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "rollout_cli"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([*argv, "inspect", "--json", "--split", "nope", str(ROOT / "sample_data" / "jsonl")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "--split" in error_object(p.stdout)["message"]
    assert "Usage: rollout-cli inspect" in p.stderr
