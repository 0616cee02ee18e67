#!/usr/bin/env python3
"""CLI start-up cost: wall time of `rollout-cli --help`, and what `import rollout_cli.cli.app` pulls in.

* median (and min/max) wall time of `rollout-cli --help` over --runs runs after one
  warm-up, next to `python -c pass` as the interpreter floor;
* in a fresh `python -X importtime -c "import rollout_cli.cli.app"`: whether torch (and other
  heavy packages) end up in sys.modules, the total import time of rollout_cli.cli.app and the
  slowest imports (cumulative).

    python bench/startup.py [--runs 10]

Results: stdout and bench/results/startup.json.  Exits 1 if torch is imported.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HEAVY = ("torch", "pyarrow", "pyarrow.parquet", "numpy", "polars", "pandas", "datasets", "ray",
         "duckdb", "zstandard", "blake3", "orjson", "rich", "typer")

PROBE = r"""
import json, sys
import rollout_cli.cli.app
print("@@" + json.dumps({m: m in sys.modules for m in %r}))
""" % (HEAVY,)


def wall(cmd: list[str], runs: int) -> dict:
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # warm-up
    ts = []
    rc = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode or rc
        ts.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts), "runs": runs, "rc": rc}


def parse_importtime(stderr: str) -> list[tuple[str, int, int]]:
    """(module, self_us, cumulative_us) from -X importtime output."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        parts = line[len("import time:"):].split("|")
        if len(parts) != 3:
            continue
        try:
            rows.append((parts[2].strip(), int(parts[0]), int(parts[1])))
        except ValueError:
            continue
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    a = ap.parse_args(argv)

    exe = shutil.which("rollout-cli") or os.path.join(os.path.dirname(sys.executable), "rollout-cli")
    if not os.access(exe, os.X_OK):
        print("error: rollout-cli is not installed (pip install -e . in the repo root)", file=sys.stderr)
        return 2

    floor = wall([sys.executable, "-c", "pass"], a.runs)
    helpt = wall([exe, "--help"], a.runs)
    if helpt["rc"]:
        print(f"warning: `rollout-cli --help` exited {helpt['rc']}", file=sys.stderr)

    p = subprocess.run([sys.executable, "-X", "importtime", "-c", PROBE], capture_output=True, text=True)
    if p.returncode != 0:
        print(f"error: `import rollout_cli.cli.app` failed:\n{p.stderr[-2000:]}", file=sys.stderr)
        return 2
    loaded = json.loads(next(l for l in p.stdout.splitlines() if l.startswith("@@"))[2:])
    rows = parse_importtime(p.stderr)
    cli_us = next((c for n, _, c in rows if n == "rollout_cli.cli.app"), None)
    top = sorted(rows, key=lambda r: -r[2])
    top_level = [r for r in top if "." not in r[0] or r[0].startswith("rollout_cli")][:10]

    print(f"`rollout-cli --help`: median {helpt['median_s'] * 1e3:.0f} ms "
          f"(min {helpt['min_s'] * 1e3:.0f}, max {helpt['max_s'] * 1e3:.0f}) over {a.runs} runs; "
          f"`python -c pass`: {floor['median_s'] * 1e3:.0f} ms")
    print(f"import rollout_cli.cli.app: {cli_us / 1e3:.0f} ms cumulative (-X importtime)" if cli_us else
          "import rollout_cli.cli.app: (not in -X importtime output)")
    print(f"torch imported by rollout_cli.cli.app: {'YES' if loaded['torch'] else 'no'}")
    print("heavy modules loaded: " + (", ".join(m for m, v in loaded.items() if v) or "none"))
    print("slowest imports (cumulative ms): " + ", ".join(f"{n} {c / 1e3:.0f}" for n, _, c in top_level))

    os.makedirs(a.results_dir, exist_ok=True)
    path = os.path.join(a.results_dir, "startup.json")
    with open(path, "w") as f:
        json.dump({"benchmark": "startup", "measured_with": "bench/startup.py",
                   "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "help": helpt, "python_pass": floor,
                   "import_cli_cumulative_ms": cli_us and cli_us / 1e3, "torch_imported": loaded["torch"],
                   "modules_loaded": loaded,
                   "slowest_imports_ms": [[n, c / 1e3] for n, _, c in top_level]}, f, indent=1)
    print(f"wrote {os.path.relpath(path)}", file=sys.stderr)
    return 1 if loaded["torch"] else 0


if __name__ == "__main__":
    sys.exit(main())
