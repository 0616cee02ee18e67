"""Tests of rollout_cli.entry: the executable's early fork-server guess, exit codes and pandas."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import SAMPLE_JSONL
from rollout_cli.entry import _pool_convert


@pytest.mark.parametrize("argv, pool", [
    (["convert", "in", "out", "--workers", "2"], True),
    (["convert", "in", "out", "--workers=2"], True),
    (["convert", "in", "out", "--workers", "1"], False),
    (["convert", "in", "out", "--workers=1"], False),
    (["convert", "in", "out", "--engine", "ray", "--workers", "2"], False),
    (["convert", "in", "out", "--engine=ray"], False),
    (["convert", "in", "out", "--engine", "local", "--workers", "4"], True),
    (["convert", "--help"], False),
    (["inspect", "out"], False),
    ([], False),
])
def test_pool_convert_guess(argv, pool):
    assert _pool_convert(argv) is pool


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout to a pipe is buffered
    return subprocess.run([sys.executable, "-m", "rollout_cli", *args], capture_output=True, text=True,
                          env=dict(env, COLUMNS="200"), timeout=300)


def test_exit_keeps_codes_and_flushes_piped_output(tmp_path):
    out = tmp_path / "out"
    done = _run("convert", str(SAMPLE_JSONL), str(out), "--json", "--workers", "2")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # the whole document came through the pipe
    assert result["counts"]["rows"] > 0 and (out / "manifest.json").exists()
    assert "leaked" not in done.stderr  # nothing left for the resource tracker to clean up

    usage = _run("convert", str(SAMPLE_JSONL), str(tmp_path / "o2"), "--compression", "lz4x")
    assert usage.returncode == 2 and "lz4x" in usage.stderr

    exists = _run("convert", str(SAMPLE_JSONL), str(out))
    assert exists.returncode == 5 and str(out) in exists.stderr

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "step_1.jsonl").write_text('{"tokens": [1, 2]\n')
    invalid = _run("convert", str(bad), str(tmp_path / "o3"))
    assert invalid.returncode == 3 and "step_1.jsonl:line 1" in invalid.stderr
    assert not (tmp_path / "o3").exists()


_NO_PANDAS_CODE = (
    "import sys\n"
    "from rollout_cli import entry\n"
    "sys.argv = ['rollout-cli', 'convert', *sys.argv[1:], '--workers', '1', '-q']\n"
    "try:\n"
    "    entry.main()\n"
    "finally:\n"
    "    sys.stderr.write(f'modules: {\"pandas\" in sys.modules} {\"pyarrow\" in sys.modules}\\n')\n"
)


def test_the_executable_never_imports_pandas(tmp_path):
    import pandas  # noqa: F401  (the test extra installs it)
    from conftest import SAMPLE_DATA

    done = subprocess.run([sys.executable, "-c", _NO_PANDAS_CODE, str(SAMPLE_DATA / "parquet"), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "modules: False True" in done.stderr  # the step was converted in this process, without pandas


def test_without_a_fork_server_the_executable_starts_nothing_early(monkeypatch):
    import multiprocessing as mp

    from rollout_cli.run.engines import fork_server

    monkeypatch.setattr(mp, "get_all_start_methods", lambda: ["spawn"])
    monkeypatch.setattr(fork_server, "_started_early", False)
    fork_server.start_early(["rollout_cli.run.stages"])
    assert not fork_server.started_early()


_EARLY_CODE = (
    "import sys\n"
    "from rollout_cli import entry\n"
    "from rollout_cli.run.engines import fork_server\n"
    "sys.argv = ['rollout-cli', 'convert', *sys.argv[1:], '--workers', '2', '-q']\n"
    "try:\n"
    "    entry.main()\n"
    "finally:\n"
    "    sys.stderr.write(f'early: {fork_server.started_early()}\\n')\n"
)


@pytest.mark.parametrize("switch, early", [(None, True), ("1", True), ("0", False)])
def test_the_early_pool_switch(tmp_path, switch, early):
    """ROLLOUT_CLI_EARLY_POOL=0 (core/tuning.py) skips the quick look at the command line and
    the early fork server; the pool then starts its server itself."""
    import multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods():
        early = False
    env = {k: v for k, v in os.environ.items() if k != "ROLLOUT_CLI_EARLY_POOL"}
    if switch is not None:
        env["ROLLOUT_CLI_EARLY_POOL"] = switch
    done = subprocess.run([sys.executable, "-c", _EARLY_CODE, str(SAMPLE_JSONL), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert f"early: {early}" in done.stderr
    assert (tmp_path / "out" / "manifest.json").exists()
