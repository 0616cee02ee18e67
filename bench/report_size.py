#!/usr/bin/env python3
"""Size and build time of `rollout-cli report` for a large run (default 500 steps x 512 samples).

Writes the steps with gen_rollouts.py (short samples: the page's size does not depend on the
token lists, only on the number of samples, rollouts and steps), converts them, and builds the
report of the converted output and of the dumps. Prints one JSON line per report.

    python bench/report_size.py --steps 500 --samples 512 --work /tmp/report-size
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gen_rollouts  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--work", required=True)
    p.add_argument("--dumps", action="store_true", help="also report on the dumps (reads them through validation)")
    a = p.parse_args()
    dumps = os.path.join(a.work, "dumps")
    os.makedirs(dumps, exist_ok=True)
    for s in range(1, a.steps + 1):
        path = os.path.join(dumps, f"{s}.jsonl")
        if not os.path.exists(path):
            gen_rollouts.generate(gen_rollouts.parse_args([
                "--out", path, "--num-samples", str(a.samples), "--seed", str(s), "--mean-tokens", "150",
                "--min-tokens", "64", "--max-tokens", "600", "-q"]))
    out = os.path.join(a.work, "out")
    cli = [sys.executable, "-m", "rollout_cli"]
    if not os.path.exists(os.path.join(out, "manifest.json")):
        subprocess.run(cli + ["convert", dumps, out, "--overwrite", "-q"], check=True)
    for name, src in [("converted", out)] + ([("dumps", dumps)] if a.dumps else []):
        html = os.path.join(a.work, f"report-{name}.html")
        t0 = time.perf_counter()
        r = subprocess.run(cli + ["report", src, "-o", html, "--overwrite", "--json"], check=True, capture_output=True, text=True)
        res = json.loads(r.stdout)
        print(json.dumps({"input": name, "steps": a.steps, "samples_per_step": a.samples, "bytes": res["bytes"],
                          "mb": round(res["bytes"] / 1e6, 2), "seconds": round(time.perf_counter() - t0, 1),
                          "rollouts_embedded": res["counts"]["train"]["rollouts_embedded"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
