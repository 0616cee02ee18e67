#!/usr/bin/env python3
"""The fast paths' budget: the whole run (bench/run_whole.py's data) converted with each fast
path on and off, in alternating runs, whole process trees measured by bench/procmon.py.

Each fast path has one switch (rollout_cli/core/tuning.py): an environment variable, 1 for
on and 0 for off, which this script sets on the converting process (its fork server and
workers inherit it). A fast path stays only if it buys at least 5% on the whole run (medians
of at least 5 alternating runs, CPU-s and wall). Each run replaces the output of the run
before it, as the held-out command does (--no-replace: emptied first, untimed). A switch in
WITH_LOAD (direct-io) is judged on convert + first load: each convert followed by a
fresh process that loads every shard of every step, as run_whole.py --then-load does.

    python bench/machinery.py                               # every switch, 16 steps, JSONL and Parquet, 6 reps
    python bench/machinery.py --switches NAME --steps 64 --reps 6
    python bench/machinery.py --steps 2 --reps 1 --quick    # a smoke test: it runs, nothing measured

The order of on and off alternates from rep to rep (on, off, off, on, on, off, ...) so neither
is always first after the warm-up. Each pair's first rep also checks that both wrote the same
shard bytes. Results: a table on stdout and bench/results/machinery.json.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import procmon  # noqa: E402
import run_convert  # noqa: E402
import run_whole  # noqa: E402

# switch name on the command line -> its environment variable (rollout_cli/core/tuning.py)
# (the early fork server went under the budget, 2026-12-06; the loader's step cache is
# measured by bench/loader.py --switches)
SWITCHES: dict[str, str] = {"direct-io": "ROLLOUT_CLI_DIRECT_IO", "fork-workers": "ROLLOUT_CLI_FORK_WORKERS"}
# switches judged on convert + the trainer's first load
WITH_LOAD: set[str] = {"direct-io"}
# what a fast path must buy to stay (issue's budget): 5% of the whole run
KEEP_GAIN = 0.05


def order(rep: int) -> tuple[str, str]:
    """The order of the two settings in rep `rep`: on, off | off, on | on, off | ...
    (ABBA pairs would also do; strict alternation keeps each first in half the reps, which is
    why main() makes the reps even: the first run after the idle wait writes into pages the VM
    has taken back meanwhile, 0.3-0.6 s slower at 64 steps, so with 5 reps the setting first in
    3 of them looked 6.6% slower than it was)."""
    return ("on", "off") if rep % 2 == 0 else ("off", "on")


def gain(on: float, off: float) -> float | None:
    """What the fast path saves, as a fraction of the time without it (off - on) / off."""
    if not off:
        return None
    return (off - on) / off


def medians(runs: list[dict], keys: tuple[str, ...]) -> dict[str, float]:
    """Median of each key over the runs that succeeded (rc 0)."""
    ok = [r for r in runs if r.get("rc") == 0]
    return {k: statistics.median(r[k] for r in ok) for k in keys if ok and all(k in r for r in ok)}


def compare(on_runs: list[dict], off_runs: list[dict], with_load: bool) -> dict:
    """Medians of wall and CPU-s on and off, off/on ratios, the gains and whether the fast path
    stays (it buys >= KEEP_GAIN of CPU-s or wall; of convert + first load where `with_load`)."""
    keys = ("wall_s", "cpu_s", "sys_s")
    if with_load:
        keys += ("load_wall_s", "load_cpu_s", "total_wall_s", "total_cpu_s")
    on, off = medians(on_runs, keys), medians(off_runs, keys)
    res = {"on": on, "off": off, "reps": [sum(r.get("rc") == 0 for r in on_runs), sum(r.get("rc") == 0 for r in off_runs)]}
    judged = ("total_wall_s", "total_cpu_s") if with_load else ("wall_s", "cpu_s")
    for k in keys:
        if k in on and k in off:
            res[f"ratio_{k}"] = off[k] / on[k] if on[k] else None  # > 1: the fast path is faster
            res[f"gain_{k}"] = gain(on[k], off[k])
    gains = [res.get(f"gain_{k}") for k in judged]
    res["judged_on"] = list(judged)
    res["keep"] = any(g is not None and g >= KEEP_GAIN for g in gains) if all(g is not None for g in gains) else None
    return res


def shard_digest(out: str) -> str:
    """One digest of every shard file (Parquet and Arrow IPC) of an output, by relative path."""
    h = hashlib.sha256()
    for p in sorted(glob.glob(os.path.join(out, "**", "*"), recursive=True)):
        if os.path.isfile(p) and p.endswith((".parquet", ".arrow")) and ".staging" not in p:
            h.update(os.path.relpath(p, out).encode() + b"\0")
            with open(p, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def run_pair(a, switch: str, fmt: str, exe: str) -> dict:
    run_dir, truth = run_whole.ensure_run(a.data_dir, a.steps, a.seed, (fmt,), a.quick)
    src = os.path.join(run_dir, fmt)
    files = sorted(glob.glob(os.path.join(src, f"step_*.{run_whole.EXT[fmt]}")))
    var = SWITCHES[switch]
    with_load = switch in WITH_LOAD and not a.no_load
    out_root = os.path.join(a.data_dir, f"machinery-out-{fmt}-{a.steps}")
    runs: dict[str, list[dict]] = {"on": [], "off": []}
    digests: dict[str, str] = {}
    args = shlex.split(run_whole.SUBJECT_ARGS)
    if a.replace:
        # each timed run replaces the output of the one before it (the held-out command): an
        # untimed run first leaves an output of each setting
        for setting in ("on", "off"):
            out = os.path.join(out_root, setting)
            run_convert.clear_dir(out)
            subprocess.run([exe, "convert", src, out, *args], check=True, stdout=subprocess.DEVNULL,
                           env=dict(os.environ, **{var: "1" if setting == "on" else "0"}))
    for rep in range(a.reps):
        for setting in order(rep):
            out = os.path.join(out_root, setting)
            cmd = [exe, "convert", src, out, *args]
            env = dict(os.environ, **{var: "1" if setting == "on" else "0"})
            prepare = ((lambda: run_whole.warm(files)) if a.replace else
                       (lambda: (run_convert.clear_dir(out), run_whole.warm(files))))
            r = procmon.measure_quiet(cmd, prepare,
                                      retries=a.retries, idle_wait=a.idle_wait, noisy_frac=a.noisy_frac,
                                      interval=a.interval_ms / 1000, pss=False, env=env, all_descendants=True)
            output = r.pop("output")
            r["rep"] = rep
            if r["rc"] != 0:
                r["error_tail"] = output[-2000:]
                print(f"  {switch} {setting}: FAILED rc={r['rc']}\n{output[-2000:]}", file=sys.stderr)
            else:
                if with_load:
                    lr = procmon.measure([sys.executable, "-c", run_whole.FIRST_LOAD, out, str(truth["tokens"])],
                                         interval=a.interval_ms / 1000, pss=False, env=env, all_descendants=True)
                    if lr["rc"] != 0:
                        r["rc"] = lr["rc"]
                        r["error_tail"] = lr["output"][-2000:]
                        print(f"  first load FAILED rc={lr['rc']}\n{lr['output'][-2000:]}", file=sys.stderr)
                    r.update(load_wall_s=lr["wall_s"], load_cpu_s=lr["cpu_s"],
                             total_wall_s=r["wall_s"] + lr["wall_s"], total_cpu_s=r["cpu_s"] + lr["cpu_s"])
                if setting not in digests:
                    digests[setting] = shard_digest(out)
            runs[setting].append(r)
            load = f"  + first load {r['load_wall_s']:.2f} s, cpu {r['load_cpu_s']:.2f}" if "load_wall_s" in r else ""
            print(f"  rep {rep} {fmt:8s} {switch:14s} {setting:3s} {r['wall_s']:7.2f} s  cpu {r['cpu_s']:6.2f} s "
                  f"(sys {r['sys_s']:5.2f}){load}{'  (noisy)' if r['noisy'] else ''}", file=sys.stderr, flush=True)
    res = compare(runs["on"], runs["off"], with_load)
    res.update(switch=switch, variable=var, format=fmt, steps=a.steps,
               same_shards=(digests.get("on") == digests.get("off")) if len(digests) == 2 else None, runs=runs)
    return res


def print_table(rows: list[dict]) -> None:
    f = lambda x, s: "-" if x is None else format(x, s)  # noqa: E731
    hdr = ["switch", "format", "reps", "wall on", "wall off", "off/on", "CPU on", "CPU off", "off/on",
           "conv+load CPU on", "off", "gain", "keep", "same shards"]
    lines = [hdr]
    for r in rows:
        on, off = r["on"], r["off"]
        lines.append([r["switch"], r["format"], f"{r['reps'][0]}/{r['reps'][1]}",
                      f(on.get("wall_s"), ".2f"), f(off.get("wall_s"), ".2f"), f(r.get("ratio_wall_s"), ".3f"),
                      f(on.get("cpu_s"), ".2f"), f(off.get("cpu_s"), ".2f"), f(r.get("ratio_cpu_s"), ".3f"),
                      f(on.get("total_cpu_s"), ".2f"), f(off.get("total_cpu_s"), ".2f"),
                      f(r.get("gain_total_cpu_s", r.get("gain_cpu_s")), "+.1%"),
                      {True: "yes", False: "NO", None: "?"}[r["keep"]], {True: "yes", False: "NO", None: "?"}[r["same_shards"]]])
    w = [max(len(str(l[i])) for l in lines) for i in range(len(hdr))]
    for i, l in enumerate(lines):
        print("  ".join(str(c).ljust(w[j]) if j < 2 else str(c).rjust(w[j]) for j, c in enumerate(l)).rstrip())
        if i == 0:
            print("  ".join("-" * x for x in w))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=16, help="steps in the whole run (default 16)")
    ap.add_argument("--formats", default="jsonl,parquet", help="comma list of jsonl, parquet, pt")
    ap.add_argument("--switches", default=",".join(SWITCHES), help=f"comma list of {', '.join(SWITCHES)}")
    ap.add_argument("--reps", type=int, default=6, help="timed runs of each setting, made even (default 6)")
    ap.add_argument("--no-load", action="store_true", help="a WITH_LOAD switch without the first load")
    ap.add_argument("--replace", action=argparse.BooleanOptionalAction, default=True,
                    help="each run replaces the previous run's output, the removal timed (default; as "
                         "run_whole.py); --no-replace: the output folder emptied before each run, untimed")
    ap.add_argument("--quick", action="store_true", help="steps of 10-20 MiB instead of 10-70")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--interval-ms", type=float, default=50)
    ap.add_argument("--idle-wait", type=float, default=10, help="wait up to this long for an idle machine")
    ap.add_argument("--noisy-frac", type=float, default=0.15,
                    help="a run is noisy if other processes used more than this fraction of a core")
    ap.add_argument("--retries", type=int, default=1, help="re-runs allowed for a noisy rep")
    ap.add_argument("--data-dir", default=os.path.join(HERE, ".data"))
    ap.add_argument("--results", default=os.path.join(HERE, "results", "machinery.json"))
    a = ap.parse_args(argv)
    a.reps += a.reps % 2  # each setting first in half the reps (see order)
    switches = [s.strip() for s in a.switches.split(",") if s.strip()]
    fmts = [s.strip() for s in a.formats.split(",") if s.strip()]
    bad = [s for s in switches if s not in SWITCHES] + [s for s in fmts if s not in run_whole.EXT]
    if bad:
        ap.error(f"unknown switch(es) or format(s): {bad}")
    exe = run_whole.find_subject()
    if exe is None:
        sys.exit("error: rollout-cli is not installed (pip install -e . in the repo root)")
    run_convert.compile_subject()
    rows = [run_pair(a, s, fmt, exe) for s in switches for fmt in fmts]
    print(f"\n{a.steps}-step whole run, medians of {a.reps} alternating runs per setting, {os.cpu_count()} CPUs; "
          f"CPU = user+sys of every process; gain = (off - on) / off of CPU-s (of convert + first load for "
          f"a WITH_LOAD switch); keep: >= {KEEP_GAIN:.0%} of CPU-s or wall")
    print_table(rows)
    os.makedirs(os.path.dirname(os.path.abspath(a.results)), exist_ok=True)
    with open(a.results, "w") as f:
        json.dump({"benchmark": "fast paths on and off, whole run", "measured_with": "bench/machinery.py",
                   "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "machine": platform.machine()},
                   "versions": run_convert.versions(),
                   "settings": {k: getattr(a, k) for k in ("steps", "reps", "quick", "seed", "no_load", "replace", "interval_ms",
                                                           "idle_wait", "noisy_frac", "retries")},
                   "keep_gain": KEEP_GAIN, "results": rows}, f, indent=1)
    print(f"wrote {os.path.relpath(a.results)}", file=sys.stderr)
    return 0 if all(r["reps"][0] == r["reps"][1] == a.reps and r["same_shards"] is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
