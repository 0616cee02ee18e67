"""Tests of rollout_cli.entry: the executable's early fork-server guess and its exit."""
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


@pytest.mark.parametrize("preset, seen", [(None, "1"), ("4", "4")])
def test_openblas_is_kept_to_one_thread_unless_set(monkeypatch, preset, seen):
    import rollout_cli.cli.app as app
    from rollout_cli import entry

    monkeypatch.setenv("OPENBLAS_NUM_THREADS", preset or "x")
    if preset is None:
        monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    got = {}
    monkeypatch.setattr(sys, "argv", ["rollout-cli", "inspect", "out"])
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # the executable refuses pandas
    monkeypatch.setattr(entry.gc, "freeze", lambda: None)  # and freezes what it imported
    monkeypatch.setattr(app, "main", lambda: got.setdefault("v", os.environ.get("OPENBLAS_NUM_THREADS")))
    monkeypatch.setattr(entry, "_leave", lambda code: got.setdefault("code", code))
    entry.main()
    assert got == {"v": seen, "code": 0}


_NO_PANDAS_CODE = (
    "import sys\n"
    "from rollout_cli import entry\n"
    "leave = entry._leave\n"
    "def check(code):\n"
    "    import gc\n"
    "    sys.stderr.write(f'modules: {\"pandas\" in sys.modules} {\"pyarrow\" in sys.modules}\\n')\n"
    "    sys.stderr.write(f'collecting: {gc.isenabled()} {gc.get_freeze_count() > 1000}\\n')\n"
    "    leave(code)\n"
    "entry._leave = check\n"
    "sys.argv = ['rollout-cli', 'convert', *sys.argv[1:], '--workers', '1', '-q']\n"
    "entry.main()\n"
)


def test_the_executable_never_imports_pandas_and_freezes_its_imports(tmp_path):
    import pandas  # noqa: F401  (the test extra installs it)
    from conftest import SAMPLE_DATA

    done = subprocess.run([sys.executable, "-c", _NO_PANDAS_CODE, str(SAMPLE_DATA / "parquet"), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "modules: False True" in done.stderr  # the step was converted in this process, without pandas
    assert "collecting: True True" in done.stderr  # what the executable imported is frozen
