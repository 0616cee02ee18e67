"""Tests of rollout_cli.entry: exit codes, piped output and pandas."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import SAMPLE_JSONL


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
    "    sys.stderr.write(f'modules: {\"pandas\" in sys.modules} {\"pyarrow\" in sys.modules} '\n"
    "                     f'{\"pyarrow.compute\" in sys.modules}\\n')\n"
)


def test_the_executable_never_imports_pandas(tmp_path):
    import pandas  # noqa: F401  (the test extra installs it)
    from conftest import SAMPLE_DATA

    done = subprocess.run([sys.executable, "-c", _NO_PANDAS_CODE, str(SAMPLE_DATA / "parquet"), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "modules: False True" in done.stderr  # the step was converted in this process, without pandas


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "pt"])
def test_a_plain_conversion_never_imports_arrow_compute(tmp_path, fmt):
    """Nothing a plain step needs imports pyarrow.compute (26 ms, in every worker): the shipped
    samples hold null lists, null ids and weight_versions."""
    from conftest import SAMPLE_DATA

    done = subprocess.run([sys.executable, "-c", _NO_PANDAS_CODE, str(SAMPLE_DATA / fmt / "rollout_data"),
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "modules: False True False" in done.stderr
