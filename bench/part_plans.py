#!/usr/bin/env python3
"""Two ways of sharing one large JSONL step between workers, measured in one run.

* `handover`: one byte range per worker; an idle worker takes over the second half of what the
  busiest part has left (at most once per part, when at least 8 MiB are left);
* `parts`: 4 x workers byte ranges of at least 8 MiB, pulled from the pool's queue.

Runs `rollout-cli convert FILE OUT --overwrite --compression zstd -q` with the environment
variable `ROLLOUT_CLI_PART_PLAN` set to each plan in turn, interleaved (the plan that goes
first alternates per pair), each run on a warm page cache and after waiting for a quiet
machine. Prints every run and the medians; writes `bench/results/part-plans-<size>mb.json`.
The variable is read by the converting process only while both plans exist in the code.

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
sys.path.insert(0, HERE)

import procmon  # noqa: E402
from run_convert import clear_dir, compile_subject, ensure_input, find_subject, warm_cache  # noqa: E402

PLANS = ("handover", "parts")


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
    exe = find_subject()
    if exe is None:
        print("rollout-cli is not on PATH", file=sys.stderr)
        return 2
    compile_subject()
    src, _ = ensure_input(a.data_dir, a.size_mb, a.seed)
    size = os.path.getsize(src)
    out = os.path.join(a.data_dir, f"out-plans-{a.size_mb:g}mb")
    runs: list[dict] = []
    digests: dict[str, dict] = {}
    for k in range(a.pairs):
        order = PLANS if k % 2 == 0 else PLANS[::-1]
        for plan in order:
            for attempt in range(1 + a.retries):
                clear_dir(out)
                warm_cache(src)
                waited = procmon.wait_for_idle(a.idle_wait)
                env = dict(os.environ, ROLLOUT_CLI_PART_PLAN=plan)
                r = procmon.measure([exe, "convert", src, out, "--overwrite", "--compression", "zstd", "-q"],
                                    pss=False, env=env)
                if r["rc"] != 0:
                    print(r["output"], file=sys.stderr)
                    return 1
                noisy = r["foreign_cpu_s"] > a.noisy_frac * r["wall_s"]
                if not noisy:
                    break
            digests.setdefault(plan, shard_digests(out))
            row = {"pair": k, "plan": plan, "wall_s": round(r["wall_s"], 3), "cpu_s": round(r["cpu_s"], 3),
                   "foreign_cpu_s": round(r["foreign_cpu_s"], 3), "steal_s": round(r["steal_s"], 3),
                   "max_procs": r["max_procs"], "idle_wait_s": round(waited, 2), "noisy": noisy,
                   "attempts": attempt + 1}
            runs.append(row)
            print(json.dumps(row), flush=True)
    med = {p: statistics.median(r["wall_s"] for r in runs if r["plan"] == p) for p in PLANS}
    cpu = {p: statistics.median(r["cpu_s"] for r in runs if r["plan"] == p) for p in PLANS}
    # the ratio within each pair, whose two runs are next to each other in time
    ratios = [q["wall_s"] / h["wall_s"] for h, q in
              ((next(r for r in runs if r["pair"] == k and r["plan"] == "handover"),
                next(r for r in runs if r["pair"] == k and r["plan"] == "parts")) for k in range(a.pairs))]
    same = digests["handover"] == digests["parts"]
    summary = {"input": src, "input_bytes": size, "pairs": a.pairs, "median_wall_s": med, "median_cpu_s": cpu,
               "parts_over_handover": med["parts"] / med["handover"],
               "median_pair_ratio": statistics.median(ratios), "pair_ratios": ratios,
               "noisy_runs": sum(r["noisy"] for r in runs), "same_shards": same, "runs": runs}
    for p in PLANS:
        print(f"{p:9s} median {med[p]:.3f} s  CPU {cpu[p]:.2f} s  ({size / 1e6 / med[p]:.0f} MB/s)")
    print(f"parts / handover: {summary['parts_over_handover']:.3f} (medians), "
          f"{summary['median_pair_ratio']:.3f} (median of the pairs' ratios); "
          f"noisy runs kept: {summary['noisy_runs']}; shards identical: {same}")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"part-plans-{a.size_mb:g}mb.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
