"""bench/pickled.py --quick: writes one step of each framework, reads each both ways, and
reports a ratio per framework (a smoke test; the numbers come from a quiet machine)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_mode_reports_each_framework(tmp_path):
    out = tmp_path / "pickled.json"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "pickled.py"), "--quick", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    report = json.loads(out.read_text())
    assert set(report["results"]) == {"skyrl", "verl", "roll"}
    for r in report["results"].values():
        assert r["ours_s"] > 0 and r["theirs_s"] > 0 and r["speed_ratio"] == round(r["theirs_s"] / r["ours_s"], 3)
    assert "speed ratio" in p.stdout
