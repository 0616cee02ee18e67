"""Every script under bench/ parses its arguments: `--help` prints its usage and writes nothing
(run in an empty folder, which stays empty, and the repository's files stay as they were)."""
from __future__ import annotations

from pathlib import Path

from script_help import git_status, help_of

ROOT = Path(__file__).resolve().parents[2]


def test_every_bench_script_prints_usage_and_writes_nothing(tmp_path):
    scripts = sorted((ROOT / "bench").glob("*.py"))
    assert len(scripts) > 10
    before = git_status()
    for script in scripts:
        cwd = tmp_path / script.stem
        cwd.mkdir()
        help_of(script, cwd)
    assert git_status() == before
