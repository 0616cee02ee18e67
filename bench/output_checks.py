#!/usr/bin/env python3
"""What reading an output as data costs: loader epochs (bench/loader.py's `load` and
`iter-numpy` methods, its consumer touching every byte of every batch) and a `verify` of the
loader bench's output (bench/loader.py makes it: 16 steps, 4 shards), each run with the
readers' checks (output/files.py: the file kind and location before and after opening, the
schema, Arrow's full validation) and with them turned into no-ops, alternating, in this process.

    python bench/loader.py --quick            # or a full run: makes bench/.data/loader-16-s0/out-4
    python bench/output_checks.py [--out OUT] [--reps 21]

Prints, per workload, the CPU seconds with and without the checks (minimum and median) and the
median of the per-pair ratios, then the checks' own cost per shard (warm, best of 5)."""
from __future__ import annotations

import argparse
import mmap
import os
import statistics
import sys
import time
import timeit
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(HERE / ".data" / "loader-16-s0" / "out-4"))
    ap.add_argument("--reps", type=int, default=21)
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    import pyarrow as pa

    import rollout_cli.output.batches as batches
    import rollout_cli.output.files as files
    import rollout_cli.verification.files as vfiles
    from rollout_cli.output.model import open_output
    from rollout_cli.verification.check import verify_output

    real = [(m, n, getattr(m, n)) for m in (files, batches, vfiles) for n in ("check_arrow", "check_regular", "_check", "_refuse_outside")
            if hasattr(m, n)]

    _OFF = {"check_regular": lambda p, *_, **__: os.stat(p), "_check": lambda p, *_, **__: (os.stat(p), True)}

    def checks(on: bool) -> None:  # off: a stat where a stat result is used, else nothing
        for m, n, f in real:
            setattr(m, n, f if on else _OFF.get(n, lambda *_, **__: None))

    import loader as bench_loader  # bench/loader.py: its epochs and consumer

    steps = open_output(a.out).step_numbers()

    def epoch(method: str):
        return lambda: bench_loader.consume(bench_loader.streams(method, a.out, 6, 6, 16384, steps))

    def verify() -> None:
        assert verify_output(a.out)["ok"]

    for name, fn in (("loader epoch, load", epoch("load")), ("loader epoch, iter-numpy (W=6, 16384)", epoch("iter-numpy")),
                     ("verify", verify)):
        fn()
        t: dict[bool, list[float]] = {True: [], False: []}
        for i in range(a.reps):
            for on in ((True, False) if i % 2 == 0 else (False, True)):
                checks(on)
                c0 = time.process_time()
                fn()
                t[on].append(time.process_time() - c0)
        checks(True)
        ratio = statistics.median(x / y for x, y in zip(t[True], t[False]))
        print(f"{name}: CPU-s with checks min {min(t[True]):.4f} median {statistics.median(t[True]):.4f}; "
              f"without min {min(t[False]):.4f} median {statistics.median(t[False]):.4f}; "
              f"min ratio {min(t[True]) / min(t[False]):.3f}, median pair ratio {ratio:.3f}")

    o = open_output(a.out)
    sh = o.shard(o.step_numbers()[0], 0)
    path = o.full_path(sh.mmap.path)
    region = mmap.mmap(files.open_regular(path), 0, access=mmap.ACCESS_READ)
    batch = pa.ipc.open_file(pa.BufferReader(pa.py_buffer(region))).get_batch(0)

    def best(fn, n=2000) -> float:
        return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6

    def plain_map():
        with open(path, "rb") as f:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)

    print(f"per shard, warm: full validation {best(lambda: batch.validate(full=True)):.1f} us "
          f"(basic {best(batch.validate):.1f} us), with the schema compared {best(lambda: files.check_arrow(path, batch, o.schema)):.1f} us; "
          f"checked open + map {best(lambda: files.map_regular(path, o.root, mmap.ACCESS_COPY)):.1f} us "
          f"against a plain one {best(plain_map):.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
