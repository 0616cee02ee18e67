#!/usr/bin/env python3
"""The regression guard: a previous release (a tag or a commit) and the working tree installed
side by side and timed in one sitting, alternating, on the whole run of bench/run_whole.py.

The previous release is checked out with `git worktree add --detach` under
bench/.data/compare/<commit>/src and installed into its own virtualenv beside it
(`--system-site-packages`, `pip install --no-deps -e`: the same third-party libraries as the
working tree's); both packages' bytecode is compiled first. The working tree is the rollout-cli
installed next to this interpreter (`pip install -e .`); the script stops when that install is
not this checkout.

For each format (JSONL, Parquet, .pt) the same run is converted by both, the order alternating
from rep to rep (old, new | new, old | ...), each run replacing the output of the one before it
(the removal inside the wall time), with the held-out command: `rollout-cli convert RUN OUT
--n-samples-per-prompt 8 --overwrite -q`. Then, on each side's own output, alternating too:
`rollout-cli verify OUT`, and a loader epoch (a fresh process: `rollout_cli.open_dataset(OUT)`,
every shard of every step loaded and its tokens copied into one buffer), each after the output's
files are read once into the page cache, as the inputs are before each convert. `--with-polars` adds
polars' per-file copy as a third tool of each convert round (its wall is the target's
denominator); `--verify-floor` adds the floor under verify (BLAKE3 of every file of OUT and one
Parquet decode of every shard, in one process).

Printed: medians of wall and CPU-s (user+sys of the whole process tree) of each side and the
ratio new/old of each (> 1: the working tree is slower). Written: bench/results/compare.json.

    python bench/compare.py --old v0.2.0                        # 16 steps, JSONL, Parquet and .pt, 5 reps
    python bench/compare.py --old 17eab79 --formats jsonl --reps 7 --no-verify --no-loader
    python bench/compare.py --old HEAD~1 --steps 4 --reps 1     # a smoke test
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import procmon  # noqa: E402
import run_convert  # noqa: E402
import run_whole  # noqa: E402

CONVERT_ARGS = ["--n-samples-per-prompt", "8", "--overwrite", "-q"]

# a loader epoch: every shard of every step, its tokens copied into one buffer
EPOCH = r"""
import sys, warnings
import numpy as np
import rollout_cli
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
ds = rollout_cli.open_dataset(sys.argv[1])
buf = np.empty(int(sys.argv[2]), dtype=np.int32)
off = 0
for step in ds.steps:
    for shard in range(ds.num_shards):
        t = ds.load(step, shard).tokens.numpy()
        buf[off:off + t.size] = t
        off += t.size
assert off == buf.size, (off, buf.size)
print(int(buf.sum(dtype=np.int64)))
"""

# the floor under verify: BLAKE3 of every file of OUT, one Parquet decode of every shard
VERIFY_FLOOR = r"""
import os, sys
import blake3
import pyarrow.parquet as pq
rows = 0
for root, _, names in os.walk(sys.argv[1]):
    for n in sorted(names):
        p = os.path.join(root, n)
        h = blake3.blake3(max_threads=blake3.blake3.AUTO)
        h.update_mmap(p)
        h.digest()
        if n.endswith(".parquet"):
            rows += pq.read_table(p).num_rows
print(rows)
"""


def git(*args: str, cwd: str = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def install_old(ref: str, data_dir: str) -> tuple[str, str]:
    """(commit, python) of `ref` checked out and installed under data_dir/compare/<commit>/."""
    sha = git("rev-parse", "--verify", ref + "^{commit}")
    base = os.path.abspath(os.path.join(data_dir, "compare", sha[:12]))
    src, venv = os.path.join(base, "src"), os.path.join(base, "venv")
    py = os.path.join(venv, "bin", "python")
    if not os.path.isdir(os.path.join(src, "rollout_cli")):
        os.makedirs(base, exist_ok=True)
        subprocess.run(["git", "worktree", "add", "--detach", src, sha], cwd=ROOT, check=True,
                       stdout=subprocess.DEVNULL)
    if not os.path.exists(os.path.join(venv, "bin", "rollout-cli")):
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "-e", src], check=True)
    where = package_dir(py)
    if os.path.realpath(where) != os.path.realpath(os.path.join(src, "rollout_cli")):
        sys.exit(f"error: {py} imports rollout_cli from {where}, not from {src}")
    return sha, py


def package_dir(py: str) -> str:
    return subprocess.run([py, "-c", "import os, rollout_cli; print(os.path.dirname(rollout_cli.__file__))"],
                          cwd="/", check=True, capture_output=True, text=True).stdout.strip()


def compile_package(py: str) -> None:
    subprocess.run([py, "-m", "compileall", "-q", package_dir(py)], check=True, stdout=subprocess.DEVNULL)


def measure(cmd: list[str], prepare, a) -> dict:
    # run outside the checkout: a pool's fork server puts its working folder on sys.path, and
    # the old side's workers would import this checkout's package from it
    r = procmon.measure_quiet(cmd, prepare, retries=a.retries, idle_wait=a.idle_wait, noisy_frac=a.noisy_frac,
                              interval=0.05, pss=False, all_descendants=True, cwd=a.data_dir)
    out = r.pop("output")
    if r["rc"] != 0:
        sys.exit(f"error: {' '.join(cmd[:3])} ... exited {r['rc']}\n{out[-2000:]}")
    return {k: r[k] for k in ("wall_s", "cpu_s", "user_s", "sys_s", "foreign_cpu_s", "noisy")}


def output_files(out: str) -> list[str]:
    return sorted(os.path.join(root, n) for root, _, names in os.walk(out) for n in names)


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def rounds(names: list[str], reps: int):
    """(rep, name) in alternating order: the first name rotates from rep to rep."""
    for rep in range(reps):
        k = rep % len(names)
        for name in names[k:] + names[:k]:
            yield rep, name


def bench_format(a, fmt: str, sides: dict[str, str]) -> dict:
    run_dir, truth = run_whole.ensure_run(a.data_dir, a.steps, a.seed, (fmt,), False)
    src = os.path.join(run_dir, fmt)
    files = sorted(glob.glob(os.path.join(src, f"step_*.{run_whole.EXT[fmt]}")))
    outs = {name: os.path.join(a.data_dir, f"compare-out-{fmt}-{a.steps}", name) for name in sides}
    tools = list(sides) + (["polars"] if a.with_polars and fmt != "pt" else [])
    if "polars" in tools:
        outs["polars"] = os.path.join(a.data_dir, f"compare-out-{fmt}-{a.steps}", "polars")

    def cmd(tool: str) -> list[str]:
        if tool == "polars":
            return run_whole.tool_cmd("polars", fmt, src, files, outs[tool], None)[0]
        exe = os.path.join(os.path.dirname(sides[tool]), "rollout-cli")
        return [exe, "convert", src, outs[tool], *CONVERT_ARGS]

    for tool in tools:  # an output to replace, and a warm-up
        run_convert.clear_dir(outs[tool])
        subprocess.run(cmd(tool), check=True, stdout=subprocess.DEVNULL, cwd=a.data_dir)
    res: dict = {"format": fmt, "bytes": sum(os.path.getsize(p) for p in files), "samples": truth["samples"],
                 "convert": {t: [] for t in tools}}
    print(f"{fmt}, {a.steps} steps: {res['bytes'] / 1e6:,.0f} MB", file=sys.stderr, flush=True)
    for rep, tool in rounds(tools, a.reps):
        r = measure(cmd(tool), lambda: run_whole.warm(files), a)
        res["convert"][tool].append(r)
        print(f"  convert rep {rep} {tool:7s} {r['wall_s']:6.2f} s  cpu {r['cpu_s']:6.2f} s", file=sys.stderr, flush=True)
    for tool in tools:
        if tool != "polars":
            check = run_convert.verify(outs[tool], truth)
            if not check.get("ok"):
                sys.exit(f"error: {tool}'s output does not match the input: {check}")
    jobs = {}
    if a.verify:
        jobs["verify"] = lambda t: [os.path.join(os.path.dirname(sides[t]), "rollout-cli"), "verify", outs[t], "-q"]
    if a.loader:
        jobs["loader epoch"] = lambda t: [sides[t], "-c", EPOCH, outs[t], str(truth["tokens"])]
    names = list(sides)
    if a.verify_floor:
        names += [f"floor:{t}" for t in sides]
    for job, make in jobs.items():
        per = names if job == "verify" else list(sides)
        res[job] = {n: [] for n in per}
        for rep, n in rounds(per, a.reps):
            out = outs[n[6:]] if n.startswith("floor:") else outs[n]
            c = [sys.executable, "-c", VERIFY_FLOOR, out] if n.startswith("floor:") else make(n)
            # every reader starts from the page cache: the shards are written past it (O_DIRECT),
            # so without this the first reader of an output read it from the disk and the others
            # from memory, and the machine's reclaim of idle pages made that vary from run to run
            r = measure(c, lambda: run_whole.warm(output_files(out)), a)
            res[job][n].append(r)
            print(f"  {job} rep {rep} {n:9s} {r['wall_s']:6.2f} s  cpu {r['cpu_s']:6.2f} s", file=sys.stderr, flush=True)
    return res


def summary(results: list[dict]) -> list[dict]:
    rows = []
    for res in results:
        for job in ("convert", "verify", "loader epoch"):
            if job not in res:
                continue
            runs = res[job]
            row = {"format": res["format"], "job": job}
            for n, rs in runs.items():
                row[n] = {"wall_s": median_of(rs, "wall_s"), "cpu_s": median_of(rs, "cpu_s"), "reps": len(rs)}
            for k in ("wall_s", "cpu_s"):
                row[f"new/old {k}"] = row["new"][k] / row["old"][k]
                if "polars" in row:
                    row[f"new/polars {k}"] = row["new"][k] / row["polars"][k]
                    row[f"old/polars {k}"] = row["old"][k] / row["polars"][k]
                if "floor:new" in row:
                    row[f"new/floor {k}"] = row["new"][k] / row["floor:new"][k]
                    row[f"old/floor {k}"] = row["old"][k] / row["floor:old"][k]
            rows.append(row)
    return rows


def print_summary(rows: list[dict], a, old_sha: str) -> None:
    print(f"\nwhole run of {a.steps} steps: working tree (new) against {a.old} ({old_sha[:12]}, old); "
          f"medians of {a.reps} alternating runs, wall / CPU-s of the whole process tree")
    hdr = ["format", "job", "old wall/CPU s", "new wall/CPU s", "new/old wall", "new/old CPU", "also"]
    lines = [hdr]
    for r in rows:
        also = []
        if "polars" in r:
            also.append(f"x polars wall: new {r['new/polars wall_s']:.2f}, old {r['old/polars wall_s']:.2f}; "
                        f"CPU new {r['new/polars cpu_s']:.2f}, old {r['old/polars cpu_s']:.2f}")
        if "floor:new" in r:
            also.append(f"x floor wall: new {r['new/floor wall_s']:.2f}, old {r['old/floor wall_s']:.2f}; "
                        f"CPU new {r['new/floor cpu_s']:.2f}, old {r['old/floor cpu_s']:.2f}")
        lines.append([r["format"], r["job"], f"{r['old']['wall_s']:.2f} / {r['old']['cpu_s']:.2f}",
                      f"{r['new']['wall_s']:.2f} / {r['new']['cpu_s']:.2f}", f"{r['new/old wall_s']:.3f}",
                      f"{r['new/old cpu_s']:.3f}", "; ".join(also)])
    w = [max(len(l[i]) for l in lines) for i in range(len(hdr))]
    for i, l in enumerate(lines):
        print("  ".join(c.ljust(w[j]) for j, c in enumerate(l)).rstrip())
        if i == 0:
            print("  ".join("-" * x for x in w))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="the previous release: a tag, a commit or any git revision")
    ap.add_argument("--steps", type=int, default=16, help="run length (default 16)")
    ap.add_argument("--formats", default="jsonl,parquet,pt", help="comma list of jsonl, parquet, pt")
    ap.add_argument("--reps", type=int, default=5, help="timed runs of each side (default 5)")
    ap.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                    help="time `rollout-cli verify` of each side's output (default on)")
    ap.add_argument("--verify-floor", action="store_true",
                    help="also time verify's floor: BLAKE3 of the files + one Parquet decode of the shards")
    ap.add_argument("--loader", action=argparse.BooleanOptionalAction, default=True,
                    help="time a loader epoch over each side's output (default on)")
    ap.add_argument("--with-polars", action="store_true", help="polars' per-file copy as a third tool of each round")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--idle-wait", type=float, default=2, help="wait up to this long for an idle machine")
    ap.add_argument("--noisy-frac", type=float, default=0.15,
                    help="a run is noisy if other processes used more than this fraction of a core")
    ap.add_argument("--retries", type=int, default=1, help="re-runs allowed for a noisy run")
    ap.add_argument("--data-dir", default=os.path.join(HERE, ".data"))
    ap.add_argument("--results", default=os.path.join(HERE, "results", "compare.json"))
    a = ap.parse_args(argv)
    fmts = [f.strip() for f in a.formats.split(",") if f.strip()]
    bad = [f for f in fmts if f not in run_whole.FORMAT_TOOLS]
    if bad:
        ap.error(f"unknown format(s) {bad}")
    here = package_dir(sys.executable)
    if os.path.realpath(here) != os.path.realpath(os.path.join(ROOT, "rollout_cli")):
        sys.exit(f"error: {sys.executable} imports rollout_cli from {here}, not from this checkout "
                 f"(pip install --no-deps -e {ROOT})")
    old_sha, old_py = install_old(a.old, a.data_dir)
    sides = {"old": old_py, "new": sys.executable}
    for py in sides.values():
        compile_package(py)
    results = [bench_format(a, fmt, sides) for fmt in fmts]
    rows = summary(results)
    print_summary(rows, a, old_sha)
    os.makedirs(os.path.dirname(a.results), exist_ok=True)
    with open(a.results, "w") as f:
        json.dump({"benchmark": "regression guard (bench/compare.py)", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   "old": {"ref": a.old, "commit": old_sha},
                   "new": {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))},
                   "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
                   "versions": run_convert.versions(), "argv": sys.argv[1:],
                   "settings": {k: getattr(a, k) for k in ("steps", "formats", "reps", "verify", "verify_floor",
                                                           "loader", "with_polars", "seed")},
                   "convert_args": CONVERT_ARGS, "summary": rows, "runs": results}, f, indent=1)
    print(f"wrote {os.path.relpath(a.results)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
