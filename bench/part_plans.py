#!/usr/bin/env python3
"""Two ways of sharing one large JSONL step between workers, measured in one run.

* `handover` (what `rollout-cli convert` does): one byte range per worker; an idle worker takes
  over the second half of what the largest busy part has left (once per part, at least 8 MiB);
* `parts`: 4 x workers byte ranges of at least 8 MiB, pulled from the pool's queue, no handover.

Each run is `rollout-cli convert FILE OUT --overwrite --compression zstd -q` through this
script's `--as PLAN` mode, which for `parts` replaces the converting process's part plan and
turns its handover off before it runs the executable's `main` (the workers are unchanged).
Runs are interleaved (the plan that goes first alternates per pair), each on a warm page cache
after waiting for a quiet machine. Prints every run and the medians (also of a load-adjusted
time: the wall time times the share of the cores other processes left free meanwhile), checks
that both plans wrote the same shard bytes, and writes `bench/results/part-plans-<size>mb.json`.

    python bench/part_plans.py --size-mb 200 --pairs 7
    python bench/part_plans.py --size-mb 1024 --pairs 3
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

PLANS = ("handover", "parts")


def _run_as(plan: str, argv: list[str]) -> None:
    """Run the executable with the given part plan. As the executable does, the fork server is
    started first; then both plans import the same modules."""
    from rollout_cli.run.preload import start_pool_early

    start_pool_early()
    from rollout_cli.inputs.jsonl import split_ranges
    from rollout_cli.output.commit import staged_path
    from rollout_cli.run import convert
    from rollout_cli.run.tasks import PartTask

    if plan == "parts":
        def plan_parts(units, workers, staging_root):
            per_unit = -(-4 * workers // max(1, len(units))) if workers > 1 else 1
            tasks = []
            for u, unit in enumerate(units):
                inp = unit.input
                ranges = [(0, None)]
                if inp.format == "jsonl" and inp.path != "-" and not inp.path.endswith((".gz", ".zst")) and per_unit > 1:
                    ranges = split_ranges(inp.path, per_unit, min_bytes=8 << 20)
                for k, (a, b) in enumerate(ranges):
                    tasks.append(PartTask(u, k, inp, a, b, staged_path(staging_root, f"parts/u{u:05d}-p{k:04d}.arrow")))
            return tasks

        convert._plan_parts = plan_parts
        convert._Scheduler._hand_over = lambda self: None
    from rollout_cli.entry import main as entry_main

    sys.argv = ["rollout-cli"] + argv
    entry_main()


def shard_digests(out: str) -> dict[str, str]:
    found = {}
    for root, _, files in os.walk(out):
        if ".staging" in root:
            continue
        for name in files:
            if name.endswith((".parquet", ".arrow")):
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    found[os.path.relpath(path, out)] = hashlib.file_digest(f, "sha256").hexdigest()
    return dict(sorted(found.items()))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--as"]:
        _run_as(argv[1], argv[2:])
        return 0
    sys.path.insert(0, HERE)  # not in the measured process: run_convert imports numpy
    import procmon
    from run_convert import clear_dir, compile_subject, ensure_input, warm_cache

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--idle-wait", type=float, default=20.0, help="seconds to wait for a quiet machine before a run")
    ap.add_argument("--noisy-frac", type=float, default=0.15,
                    help="a run during which other processes used more than this share of a core is noisy")
    ap.add_argument("--retries", type=int, default=2, help="times a noisy run is repeated")
    ap.add_argument("--data-dir", default=os.path.join(HERE, ".data"))
    a = ap.parse_args(argv)
    compile_subject()
    src, _ = ensure_input(a.data_dir, a.size_mb, a.seed)
    size = os.path.getsize(src)
    out = os.path.join(a.data_dir, f"out-plans-{a.size_mb:g}mb")
    cores = os.cpu_count() or 1
    runs: list[dict] = []
    digests: dict[str, dict] = {}
    for k in range(a.pairs):
        order = PLANS if k % 2 == 0 else PLANS[::-1]
        for plan in order:
            for attempt in range(1 + a.retries):
                clear_dir(out)
                warm_cache(src)
                waited = procmon.wait_for_idle(a.idle_wait)
                cmd = [sys.executable, os.path.abspath(__file__), "--as", plan,
                       "convert", src, out, "--overwrite", "--compression", "zstd", "-q"]
                r = procmon.measure(cmd, pss=False)
                if r["rc"] != 0:
                    print(r["output"], file=sys.stderr)
                    return 1
                noisy = r["foreign_cpu_s"] > a.noisy_frac * r["wall_s"]
                if not noisy:
                    break
            digests.setdefault(plan, shard_digests(out))
            # the wall time scaled by the share of the cores other processes left to the run: a
            # rough correction for a shared machine (it assumes the run got the rest, evenly)
            share = min(r["foreign_cpu_s"] / r["wall_s"], cores - 0.1) / cores
            row = {"pair": k, "plan": plan, "wall_s": round(r["wall_s"], 3), "cpu_s": round(r["cpu_s"], 3),
                   "load_adjusted_s": round(r["wall_s"] * (1 - share), 3),
                   "foreign_cpu_s": round(r["foreign_cpu_s"], 3), "steal_s": round(r["steal_s"], 3),
                   "max_procs": r["max_procs"], "idle_wait_s": round(waited, 2), "noisy": noisy,
                   "attempts": attempt + 1}
            runs.append(row)
            print(json.dumps(row), flush=True)
    med = {p: statistics.median(r["wall_s"] for r in runs if r["plan"] == p) for p in PLANS}
    cpu = {p: statistics.median(r["cpu_s"] for r in runs if r["plan"] == p) for p in PLANS}
    adj = {p: statistics.median(r["load_adjusted_s"] for r in runs if r["plan"] == p) for p in PLANS}
    # the ratio within each pair, whose two runs are next to each other in time
    ratios = [q["wall_s"] / h["wall_s"] for h, q in
              ((next(r for r in runs if r["pair"] == k and r["plan"] == "handover"),
                next(r for r in runs if r["pair"] == k and r["plan"] == "parts")) for k in range(a.pairs))]
    same = digests["handover"] == digests["parts"]
    summary = {"input": src, "input_bytes": size, "pairs": a.pairs, "median_wall_s": med, "median_cpu_s": cpu,
               "median_load_adjusted_s": adj, "parts_over_handover": med["parts"] / med["handover"],
               "parts_over_handover_load_adjusted": adj["parts"] / adj["handover"],
               "median_pair_ratio": statistics.median(ratios), "pair_ratios": ratios,
               "noisy_runs": sum(r["noisy"] for r in runs), "same_shards": same, "runs": runs}
    for p in PLANS:
        print(f"{p:9s} median {med[p]:.3f} s  load-adjusted {adj[p]:.3f} s  CPU {cpu[p]:.2f} s  "
              f"({size / 1e6 / med[p]:.0f} MB/s)")
    print(f"parts / handover: {summary['parts_over_handover']:.3f} (medians), "
          f"{summary['median_pair_ratio']:.3f} (median of the pairs' ratios), "
          f"{summary['parts_over_handover_load_adjusted']:.3f} (load-adjusted); "
          f"noisy runs kept: {summary['noisy_runs']}; shards identical: {same}")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"part-plans-{a.size_mb:g}mb.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
