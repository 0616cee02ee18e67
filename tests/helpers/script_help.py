"""Running a repository script with --help: it must print its usage and write nothing."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def git_status() -> str:
    """The repository's changed and untracked files, to compare before and after."""
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True,
                          text=True).stdout


def help_of(script: Path, cwd: Path) -> str:
    """The script's --help output, run in `cwd` (an empty folder); asserts it exits 0, prints a
    usage and leaves `cwd` empty."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run([sys.executable, str(script), "--help"], cwd=cwd, capture_output=True, text=True, timeout=120,
                       env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage:"), p.stdout[:200]
    assert list(cwd.iterdir()) == [], f"{script.name} --help wrote {sorted(x.name for x in cwd.iterdir())}"
    return p.stdout
