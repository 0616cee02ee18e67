#!/usr/bin/env python3
"""A vision-language run's figures: convert throughput against `cp` of the same `.pt` files,
convert's peak RSS against one step's tensor bytes, the output's size against the raw tensor
bytes, and the loader's delivery of a micro-batch's pixel values against a plain memcpy of the
same bytes.

    python bench/vlm.py --steps 16 --samples 256 --patches 1000 --save bench/results/vlm.json

The run is made by bench/gen_vlm.py (synthetic processor shapes, bfloat16). Timings are of
alternating runs in one sitting (--repeat each), the best kept.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _tree_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def _timed(cmd: list[str]) -> tuple[float, int]:
    """(seconds, peak RSS bytes of the child) of one command."""
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: its own rusage, so one command's peak is measured alone
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.execvp(cmd[0], cmd)
    _, status, ru = os.wait4(pid, 0)
    dt = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd}: failed")
    return dt, ru.ru_maxrss * 1024


def _loader(out: str, world_size: int, max_tokens: int) -> dict:
    """Seconds to take every micro-batch's pixel values out of the loader (the join slime's
    get_batch makes), and to memcpy the same bytes, best of three."""
    import numpy as np
    import torch

    from rollout_cli.loader import open_dataset

    ds = open_dataset(out)
    best_load, best_copy, nbytes = float("inf"), float("inf"), 0
    for _ in range(3):
        t0 = time.perf_counter()
        total = 0
        sizes = []
        for rank in range(world_size):
            for b in ds.iter_batches(rank, world_size=world_size, max_tokens=max_tokens):
                pv = b.multimodal_train_inputs.get("pixel_values")
                if pv is not None:
                    total += pv.numel() * pv.element_size()
                    sizes.append(pv.numel() * pv.element_size())
        best_load = min(best_load, time.perf_counter() - t0)
        nbytes = total
        src = [np.ones(n, np.uint8) for n in sizes]
        t0 = time.perf_counter()
        for s in src:
            torch.from_numpy(s).clone()
        best_copy = min(best_copy, time.perf_counter() - t0)
    return {"pixel_bytes": nbytes, "loader_s": round(best_load, 3), "memcpy_s": round(best_copy, 3),
            "ratio_vs_memcpy": round(best_copy / best_load, 3) if best_load else None}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--samples", type=int, default=256)
    p.add_argument("--patches", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--workers", type=int, default=1, help="convert's --workers (1: its peak RSS is one process's)")
    p.add_argument("--workdir", default=None)
    p.add_argument("--save", default=None)
    args = p.parse_args(argv)
    work = args.workdir or tempfile.mkdtemp(prefix="vlm-bench-")
    run = os.path.join(work, "run")
    gen = subprocess.run([sys.executable, os.path.join(HERE, "gen_vlm.py"), "--out", run, "--steps", str(args.steps),
                          "--samples", str(args.samples), "--patches", str(args.patches), "--max-images", "1"],
                         check=True, capture_output=True, text=True)
    meta = json.loads(gen.stdout.strip().splitlines()[-1])
    dump_bytes = _tree_bytes(run)
    out = os.path.join(work, "out")
    cli = [sys.executable, "-m", "rollout_cli"]
    cp_s, conv_s, rss = [], [], 0
    for _ in range(args.repeat):  # alternating: cp, convert
        shutil.rmtree(os.path.join(work, "copy"), ignore_errors=True)
        cp_s.append(_timed(["cp", "-r", run, os.path.join(work, "copy")])[0])
        dt, peak = _timed(cli + ["convert", run, out, "--overwrite", "--image-token-id", "151655",
                                 "--workers", str(args.workers)])
        conv_s.append(dt)
        rss = max(rss, peak)
    out_bytes = _tree_bytes(out)
    step_tensor = meta["tensor_bytes"] / args.steps
    res = {
        "run": {"steps": args.steps, "samples_per_step": args.samples, "patches_per_sample": args.patches,
                "dtype": "bfloat16", "tensor_bytes": meta["tensor_bytes"], "dump_bytes": dump_bytes},
        "convert": {"cp_s": round(min(cp_s), 3), "convert_s": round(min(conv_s), 3),
                    "throughput_vs_cp": round(min(cp_s) / min(conv_s), 3),
                    "peak_rss_bytes": rss, "peak_rss_vs_step_tensor_bytes": round(rss / step_tensor, 3)},
        "output": {"bytes": out_bytes, "vs_tensor_bytes": round(out_bytes / meta["tensor_bytes"], 3)},
        "loader": _loader(out, args.world_size, args.max_tokens),
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps(res, indent=1))
    if args.save:
        with open(args.save, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
