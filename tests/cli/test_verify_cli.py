"""`rollout-cli verify OUT [--json] [--quick]` end to end: exit codes, messages, the JSON object."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rollout_cli.cli.app import app
from conftest import ROOT



def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def out(sample_out) -> Path:
    return sample_out


def corrupt_a_shard(out: Path) -> str:
    m = json.loads((out / "manifest.json").read_text())
    rel = m["steps"][1]["shards"][0]["path"]
    import pyarrow.parquet as pq

    col = pq.ParquetFile(out / rel).metadata.row_group(0).column(4)  # tokens: a data page, not the footer
    data = bytearray((out / rel).read_bytes())
    data[col.data_page_offset + col.total_compressed_size // 2] ^= 0x01
    (out / rel).write_bytes(bytes(data))
    return rel


def test_ok_exits_0_with_a_short_summary(out):
    res = invoke("verify", str(out))
    assert res.exit_code == 0, res.output
    assert res.stdout.count("\n") == 1 and "ok" in res.stdout and "8 shards" in res.stdout and "53 rows" in res.stdout
    assert res.stderr == ""


def test_quiet_ok_prints_nothing(out):
    res = invoke("verify", str(out), "-q")
    assert res.exit_code == 0 and res.stdout == ""


def test_json_ok_prints_the_result_object(out):
    res = invoke("verify", str(out), "--json")
    assert res.exit_code == 0
    obj = json.loads(res.stdout)
    assert obj["ok"] is True and obj["failures"] == [] and obj["quick"] is False
    assert "manifest.json" in obj["files"] and obj["checked"]["shards"] == 8


def test_corrupt_shard_exits_4_naming_file_and_invariant(out):
    rel = corrupt_a_shard(out)
    res = invoke("verify", str(out))
    assert res.exit_code == 4
    assert rel in res.stderr and "checksum" in res.stderr
    assert "Traceback" not in res.output and res.stdout == ""


def test_json_failure_prints_the_result_object_and_exits_4(out):
    rel = corrupt_a_shard(out)
    res = invoke("verify", str(out), "--json")
    assert res.exit_code == 4
    obj = json.loads(res.stdout)
    assert obj["ok"] is False
    assert obj["failures"] == [{"file": rel, "invariant": "checksum", "detail": obj["failures"][0]["detail"]}]


def test_quick_checks_sizes_only(out):
    corrupt_a_shard(out)  # same size: --quick cannot see it
    res = invoke("verify", str(out), "--quick", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["quick"] is True
    m = json.loads((out / "manifest.json").read_text())
    (out / m["steps"][0]["shards"][1]["mmap"]["path"]).unlink()
    res = invoke("verify", str(out), "--quick")
    assert res.exit_code == 4 and "file_present" in res.stderr


def test_stray_file_exits_4(out):
    (out / "data" / "step-000001" / "leftover.parquet.tmp").write_bytes(b"x")
    res = invoke("verify", str(out))
    assert res.exit_code == 4 and "data/step-000001/leftover.parquet.tmp" in res.stderr and "unexpected_file" in res.stderr


def test_interrupted_output_exits_4(out):
    (out / "manifest.json").unlink()
    res = invoke("verify", str(out))
    assert res.exit_code == 4 and "manifest" in res.stderr


def test_missing_directory_is_a_usage_error(tmp_path):
    res = invoke("verify", str(tmp_path / "absent"))
    assert res.exit_code == 2 and "no such directory" in res.stderr


def test_real_process_exit_codes(out):
    """Through `python -m rollout_cli`: the exit status a CI job sees."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    ok = subprocess.run([sys.executable, "-m", "rollout_cli", "verify", str(out)], capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stderr
    rel = corrupt_a_shard(out)
    bad = subprocess.run([sys.executable, "-m", "rollout_cli", "verify", str(out)], capture_output=True, text=True, env=env)
    assert bad.returncode == 4 and rel in bad.stderr and "Traceback" not in bad.stderr


def test_help_lists_verify():
    res = invoke("--help")
    assert res.exit_code == 0 and "verify" in res.stdout
