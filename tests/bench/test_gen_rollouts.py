"""bench/gen_rollouts.py: writes its dump (and the sidecar) where --out says, its folders
created, and the dump is one a conversion reads."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import copts, read_rows
from rollout_cli.run.convert import convert

ROOT = Path(__file__).resolve().parents[2]


def test_creates_the_output_folder_and_converts(tmp_path):
    out = tmp_path / "not" / "yet" / "rollout_data" / "1.jsonl"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "gen_rollouts.py"), "--num-samples", "24", "--seed", "3",
                        "--mean-tokens", "100", "--min-tokens", "64", "--max-tokens", "200", "--out", str(out), "-q"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert len(out.read_bytes().splitlines()) == 24
    assert json.loads(Path(f"{out}.meta.json").read_text())["samples"] == 24
    convert([str(out.parent)], str(tmp_path / "converted"), copts())
    assert len(read_rows(tmp_path / "converted", step=1)) == 24
