"""bench/pickled.py --quick: writes one step of each framework, reads each both ways, and
reports a ratio per framework for the unpickler and for the whole reader (a smoke test; the numbers come from a quiet machine)."""
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
        for x in (r, r["reader"]):
            assert x["ours_s"] > 0 and x["theirs_s"] > 0 and x["speed_ratio"] == round(x["theirs_s"] / x["ours_s"], 3)
        assert r["reader"]["rows"] == report["rows"]  # every row read and mapped, none a problem
    assert "speed ratio" in p.stdout and p.stdout.count(" reader ") == 3
