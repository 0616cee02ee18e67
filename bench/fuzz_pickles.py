#!/usr/bin/env python
"""The restricted unpickler fuzzed at length: random opcode programs naming the allowed globals,
and random mutations of real framework pickles (tests/helpers/pickle_fuzz.py: SkyRL, verl and
ROLL batches, slime/miles-style torch.save dumps, numpy arrays of every dtype the reader makes
under protocols 2 to 5), half of each by default.

The property, per case: the load gives a value that reads through (every array's bytes, every
object item touched), or raises the loader's PickleFormatError / UnsafePickleError (which every
reader turns into exit 3). A failure is any other exception, or a worker process ended by a
signal; each is reported with its case number, and the run exits 1 if there was any.

Cases run in batches, each in a fresh forked process (so a signal loses one batch, reported, not
the run); a case's bytes depend only on --seed and its number. Prints, and writes to --out as
JSON: cases run, values, refusals, failures, wall seconds, cases per second.

Usage: python bench/fuzz_pickles.py [--cases N] [--workers W] [--batch B] [--seed S] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
sys.path.insert(0, str(ROOT))

import pickle_fuzz as F  # noqa: E402

SEEDS: list = []


def case(seed: int, n: int) -> tuple[bytes, bool, str]:
    """Case `n` of a run: (bytes, is a torch archive, kind)."""
    rng = random.Random(seed * 1_000_003 + n)
    if n % 2:
        return F.opcode_program(rng), False, "opcodes"
    pick = SEEDS[rng.randrange(len(SEEDS))]
    data, archive = F.mutated_case(pick, rng)
    return data, archive, "mutation"


def run_batch(seed: int, start: int, count: int, out: str) -> None:
    counts = {"value": 0, "refused": 0}
    failures = []
    for n in range(start, start + count):
        data, archive, kind = case(seed, n)
        try:
            counts[F.run_case(data, archive)] += 1
        except F.FuzzFailure as e:
            failures.append({"case": n, "kind": kind, "error": str(e), "bytes": data[:4096].hex()})
    Path(out).write_text(json.dumps({"counts": counts, "failures": failures}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=1_000_000, help="cases to run (default 1,000,000)")
    ap.add_argument("--workers", type=int, default=2, help="processes at a time (default 2)")
    ap.add_argument("--batch", type=int, default=20_000, help="cases per forked process (default 20,000)")
    ap.add_argument("--seed", type=int, default=0, help="the run's seed (default 0)")
    ap.add_argument("--out", help="write the result JSON here")
    args = ap.parse_args()

    SEEDS.extend(F.seeds())  # built once, before the workers fork
    ctx = mp.get_context("fork")
    batches = [(s, min(args.batch, args.cases - s)) for s in range(0, args.cases, args.batch)]
    counts = {"value": 0, "refused": 0}
    failures: list = []
    signals: list = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        running: list = []
        pending = list(batches)
        while pending or running:
            while pending and len(running) < args.workers:
                start, count = pending.pop(0)
                out = os.path.join(tmp, f"{start}.json")
                p = ctx.Process(target=run_batch, args=(args.seed, start, count, out))
                p.start()
                running.append((p, start, count, out))
            p, start, count, out = running.pop(0)
            p.join()
            if p.exitcode != 0 or not os.path.exists(out):
                signals.append({"cases": [start, start + count], "exitcode": p.exitcode})
                continue
            got = json.loads(Path(out).read_text())
            for k, v in got["counts"].items():
                counts[k] += v
            failures += got["failures"]
            done = counts["value"] + counts["refused"] + len(failures)
            print(f"{done} cases, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    wall = time.perf_counter() - t0
    total = counts["value"] + counts["refused"] + len(failures)
    result = {
        "cases": total, "values": counts["value"], "refused": counts["refused"], "failures": len(failures),
        "batches_ended_by_a_signal_or_error": signals, "wall_s": round(wall, 1),
        "cases_per_s": round(total / wall, 1) if wall else None, "seed": args.seed, "seeds": len(SEEDS),
        "python": platform.python_version(), "failure_cases": failures[:20],
    }
    print(json.dumps({k: v for k, v in result.items() if k != "failure_cases"}, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 1 if failures or signals else 0


if __name__ == "__main__":
    sys.exit(main())
