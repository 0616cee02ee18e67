#!/usr/bin/env python3
"""`convert --engine ray` (a local Ray on this machine) against `--engine local`, same inputs.

Generates --steps step files of about --mb MiB each with bench/gen_rollouts.py
(run as a tool; seeds 1..N) into a temporary folder, warms the page cache, then times
`rollout-cli convert` as a whole process, round-robin over the engines, --reps times each:

* local        `--engine local` (the process pool)
* ray (cold)   `--engine ray` without a running Ray: the CLI starts a local Ray and stops it,
               so this includes Ray's startup and shutdown
* in-process   `convert(...)` called from Python, first with engine="local", then with
               engine="ray" in the same process once Ray is started and its workers are up
               (what a long-lived cluster costs per conversion; compared with local in-process)
* ray startup  `ray.init(...)` as the engine calls it, the first task on a worker that imports
               the pipeline, and `ray.shutdown()`, timed separately

Reports medians and the ratios against the local engine, and checks that both engines wrote
the same bytes (every file under data/, eval/, mmap/; the manifest without "volatile").

    python bench/ray_vs_local.py                # 4 steps x 50 MiB, 3 reps
    python bench/ray_vs_local.py --mb 20 --reps 1 --json /tmp/ray-vs-local.json

Ratios: the CLI rows against "local, CLI process", the in-process rows against "local, in-process".
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MAKE_ROLLOUTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen_rollouts.py")

STARTUP = r"""
import json, sys, time
t0 = time.perf_counter()
import ray
t_import = time.perf_counter()
ray.init(num_cpus=int(sys.argv[1]), include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
t_init = time.perf_counter()

@ray.remote
def first():
    import rollout_cli.run.convert  # what a stage task needs on its worker
    return 1

ray.get([first.remote() for _ in range(int(sys.argv[1]))])
t_task = time.perf_counter()
ray.shutdown()
t_down = time.perf_counter()
print(json.dumps({"import": t_import - t0, "init": t_init - t_import, "first_tasks": t_task - t_init,
                  "shutdown": t_down - t_task, "total": t_down - t0}))
"""

WARM = r"""
import json, sys, time
import ray
from rollout_cli.run.convert import ConvertOptions, convert
workers, reps, out, inputs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
local = []
for _ in range(reps):
    t = time.perf_counter()
    convert(inputs, out + "-local", ConvertOptions(engine="local", workers=workers, overwrite=True))
    local.append(time.perf_counter() - t)
ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)

@ray.remote
def warm():
    import rollout_cli.run.convert
    return 1

ray.get([warm.remote() for _ in range(workers)])
times = []
for _ in range(reps):
    t = time.perf_counter()
    convert(inputs, out, ConvertOptions(engine="ray", workers=workers, overwrite=True))
    times.append(time.perf_counter() - t)
ray.shutdown()
print(json.dumps({"local_inproc": local, "ray_warm": times}))
"""


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-3000:]}")
    return r


def warm_cache(paths: list[str]) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(16 << 20):
                pass


def digest_output(out: str) -> dict[str, str]:
    res = {}
    for top in ("data", "eval", "mmap"):
        for d, _, names in os.walk(os.path.join(out, top)):
            for n in names:
                p = os.path.join(d, n)
                with open(p, "rb") as f:
                    res[os.path.relpath(p, out)] = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    m.pop("volatile", None)
    res["manifest.json"] = hashlib.sha256(json.dumps(m, sort_keys=True).encode()).hexdigest()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=50, help="MiB per step file")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--keep", help="use (and keep) this folder instead of a temporary one")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    tmp = args.keep or tempfile.mkdtemp(prefix="ray-vs-local-")
    os.makedirs(os.path.join(tmp, "in"), exist_ok=True)
    try:
        inputs = []
        t = time.perf_counter()
        for k in range(1, args.steps + 1):
            path = os.path.join(tmp, "in", f"step_{k:06d}.jsonl")
            if not os.path.exists(path):
                sh([sys.executable, MAKE_ROLLOUTS, "--target-mb", str(args.mb), "--seed", str(k), "--out", path])
            inputs.append(path)
        size = sum(os.path.getsize(p) for p in inputs)
        print(f"inputs: {len(inputs)} x ~{args.mb:g} MiB = {size / 2**20:.1f} MiB ({time.perf_counter() - t:.1f}s to generate); "
              f"workers {args.workers}; {os.cpu_count()} cores", file=sys.stderr)

        outs = {e: os.path.join(tmp, f"out-{e}") for e in ("local", "ray")}
        times: dict[str, list[float]] = {"local": [], "ray_cold": []}
        for rep in range(args.reps):
            for engine, key in (("local", "local"), ("ray", "ray_cold")):
                time.sleep(2)  # let a previous Ray's processes exit
                warm_cache(inputs)
                cmd = [sys.executable, "-m", "rollout_cli", "convert", *inputs, outs[engine], "-q", "--overwrite",
                       "--engine", engine, "--workers", str(args.workers)]
                t = time.perf_counter()
                sh(cmd)
                times[key].append(time.perf_counter() - t)
                print(f"rep {rep + 1}: {key:8s} {times[key][-1]:7.2f}s", file=sys.stderr)
        same = digest_output(outs["local"]) == digest_output(outs["ray"])

        startup = []
        for _ in range(args.reps):
            time.sleep(2)
            startup.append(json.loads(sh([sys.executable, "-c", STARTUP, str(args.workers)]).stdout.strip().splitlines()[-1]))
            print(f"ray startup: {startup[-1]['total']:.2f}s", file=sys.stderr)

        time.sleep(2)
        warm_cache(inputs)
        warm_out = os.path.join(tmp, "out-ray-warm")
        r = sh([sys.executable, "-c", WARM, str(args.workers), str(args.reps), warm_out, *inputs])
        times.update(json.loads(r.stdout.strip().splitlines()[-1]))
        same_warm = digest_output(outs["local"]) == digest_output(warm_out) == digest_output(warm_out + "-local")

        med = {k: statistics.median(v) for k, v in times.items()}
        st = {k: statistics.median(s[k] for s in startup) for k in startup[0]}
        import ray

        result = {
            "inputs": {"files": len(inputs), "mib": round(size / 2**20, 1)},
            "workers": args.workers,
            "cores": os.cpu_count(),
            "reps": args.reps,
            "python": platform.python_version(),
            "ray": ray.__version__,
            "seconds": {k: [round(x, 3) for x in v] for k, v in times.items()},
            "median_s": {k: round(v, 3) for k, v in med.items()},
            "ray_startup_median_s": {k: round(v, 3) for k, v in st.items()},
            "ratio_vs_local": {"ray_cold": round(med["ray_cold"] / med["local"], 3),
                               "ray_warm_vs_local_inproc": round(med["ray_warm"] / med["local_inproc"], 3)},
            "identical_output": same and same_warm,
        }
        print()
        print(f"{'engine':34s} {'median s':>9s} {'MiB/s':>8s} {'x local':>8s}")
        rows = (("local", "local", "local, CLI process"), ("ray_cold", "local", "ray, CLI process (starts Ray)"),
                ("local_inproc", "local_inproc", "local, in-process"), ("ray_warm", "local_inproc", "ray, in-process (Ray running)"))
        for k, base, name in rows:
            print(f"{name:34s} {med[k]:9.2f} {size / 2**20 / med[k]:8.1f} {med[k] / med[base]:8.2f}")
        print(f"ray startup (median): init {st['init']:.2f}s + first tasks {st['first_tasks']:.2f}s + shutdown {st['shutdown']:.2f}s"
              f" (import ray {st['import']:.2f}s) = {st['total']:.2f}s")
        print(f"identical output: {result['identical_output']}")
        print(json.dumps(result))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
        if not result["identical_output"]:
            sys.exit("the engines wrote different bytes")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
