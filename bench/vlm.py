#!/usr/bin/env python3
"""A vision-language run's figures: convert throughput against `cp` of the same `.pt` files,
convert's peak RSS against one step's tensor bytes, the output's size against the raw tensor
bytes, and the loader's delivery of a micro-batch's pixel values against a plain memcpy of the
same bytes (from resident memory, and from the output's IPC files freshly mapped, as the loader
reads them, into memory never touched before, as a new batch's is).

    python bench/vlm.py --steps 16 --samples 256 --patches 1000 --save bench/results/vlm.json

The run is made by bench/gen_vlm.py (synthetic processor shapes, bfloat16; kept in --workdir
and reused by a later sitting with the same shape). Timings are of alternating runs in one
sitting (--repeat each), the best kept: `cp -r` of the dumps, two `cp -r` of them (the output
holds the tensors twice: Parquet and the IPC copy), a Python process that reads each dump and
writes its bytes to two files, each fsynced (convert's floor: its writes without any work), and
convert. Before each, the previous command's copies or output are removed (untimed), so every
one writes into pages just freed (on this VM fresh pages cost several times more: see
docs/performance.md).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
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


def _write_twice(run: str, a: str, b: str) -> int:
    """The floor of a conversion that writes its input's bytes twice (the Parquet shard and the
    IPC copy): each file read whole, then written to two new files, each fsynced (as convert
    makes its files durable)."""
    for d, _, files in os.walk(run):
        for name in files:
            with open(os.path.join(d, name), "rb") as f:
                data = f.read()
            for root in (a, b):
                dst = os.path.join(root, os.path.relpath(d, run))
                os.makedirs(dst, exist_ok=True)
                with open(os.path.join(dst, name), "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
    return 0


def _copies(out: str, sizes: list[int]) -> dict:
    """Seconds to copy `sizes` bytes (each micro-batch's pixel bytes) into new arrays, one
    memcpy each (np.copyto, as the loader's join copies), best of three each, from:
    `anonymous`, resident anonymous memory, each copy freed at once, so the allocator hands the
    next the same warm pages (a plain memcpy); `mapped_cold`, the output's IPC files freshly
    mapped as the loader maps them (their pages in the page cache, the mapping's page tables
    empty), each copy freed at once; `mapped_new`, the same but every copy kept to the end, so
    each lands in memory never touched before, as the loader's join does while its consumer
    holds the batches before (the kernel maps and zeroes such pages on first touch)."""
    import glob
    import mmap

    import numpy as np

    files = sorted(glob.glob(os.path.join(out, "mmap", "**", "*.arrow"), recursive=True))
    total = sum(sizes)

    def run(srcs: list, hold: bool) -> float:
        at, i, held = 0, 0, []
        t0 = time.perf_counter()
        for n in sizes:
            while at + n > len(srcs[i]):  # the next file
                at, i = 0, (i + 1) % len(srcs)
            dst = np.empty(n, np.uint8)
            np.copyto(dst, srcs[i][at:at + n])
            if hold:
                held.append(dst)
            del dst
            at += n
        dt = time.perf_counter() - t0
        del held
        return dt

    best = {"anonymous": float("inf"), "mapped_cold": float("inf"), "mapped_new": float("inf")}
    anon = np.ones(total, np.uint8)
    for _ in range(3):
        best["anonymous"] = min(best["anonymous"], run([anon], False))
        for name, hold in (("mapped_cold", False), ("mapped_new", True)):
            maps = []
            for f in files:
                with open(f, "rb") as fh:
                    maps.append(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY))
            views = [np.frombuffer(m, np.uint8) for m in maps]
            best[name] = min(best[name], run(views, hold))
            del views
            for m in maps:
                m.close()
    return best


def _loader(out: str, world_size: int, max_tokens: int) -> dict:
    """Seconds to take every micro-batch's pixel values out of the loader (the join slime's
    get_batch makes), of which in the join itself (core/tensors.join: one np.concatenate a key),
    and to copy the same bytes (_copies), best of three."""
    from rollout_cli.core import tensors
    from rollout_cli.loader import open_dataset

    join = tensors.join
    in_join = [0.0]

    def timed_join(*a, **k):
        t0 = time.perf_counter()
        try:
            return join(*a, **k)
        finally:
            in_join[0] += time.perf_counter() - t0

    ds = open_dataset(out)
    best_load, best_join, nbytes, sizes = float("inf"), float("inf"), 0, []
    tensors.join = timed_join
    try:
        for _ in range(3):
            in_join[0] = 0.0
            t0 = time.perf_counter()
            sizes = []
            for rank in range(world_size):
                for b in ds.iter_batches(rank, world_size=world_size, max_tokens=max_tokens):
                    pv = b.multimodal_train_inputs.get("pixel_values")
                    if pv is not None:
                        sizes.append(pv.numel() * pv.element_size())
            best_load = min(best_load, time.perf_counter() - t0)
            best_join = min(best_join, in_join[0])
    finally:
        tensors.join = join
    nbytes = sum(sizes)
    copy = _copies(out, sizes)

    def ratio(base: float) -> float | None:
        return round(base / best_load, 3) if best_load else None

    return {"pixel_bytes": nbytes, "micro_batches": len(sizes),
            "loader_s": round(best_load, 3), "join_s": round(best_join, 3),
            "memcpy_s": round(copy["anonymous"], 3), "memcpy_mapped_cold_s": round(copy["mapped_cold"], 3),
            "memcpy_mapped_new_s": round(copy["mapped_new"], 3),
            "ratio_vs_memcpy": ratio(copy["anonymous"]), "ratio_vs_memcpy_mapped_cold": ratio(copy["mapped_cold"]),
            "ratio_vs_memcpy_mapped_new": ratio(copy["mapped_new"])}


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
    p.add_argument("--convert-args", default="", help="more convert options, one string (e.g. '--compression none')")
    p.add_argument("--write-twice", nargs=3, metavar=("RUN", "A", "B"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.write_twice:
        return _write_twice(*args.write_twice)
    work = args.workdir or tempfile.mkdtemp(prefix="vlm-bench-")
    run = os.path.join(work, "run")
    meta_path = os.path.join(work, "run.json")
    gen_args = ["--steps", str(args.steps), "--samples", str(args.samples), "--patches", str(args.patches), "--max-images", "1"]
    meta = None
    if os.path.exists(meta_path):  # a --workdir kept from an earlier sitting: the same run is reused
        with open(meta_path) as f:
            meta = json.load(f)
        meta = meta if meta.get("gen_args") == gen_args else None
    if meta is None:
        shutil.rmtree(run, ignore_errors=True)
        gen = subprocess.run([sys.executable, os.path.join(HERE, "gen_vlm.py"), "--out", run, *gen_args],
                             check=True, capture_output=True, text=True)
        meta = dict(json.loads(gen.stdout.strip().splitlines()[-1]), gen_args=gen_args)
        with open(meta_path, "w") as f:
            json.dump(meta, f)
    dump_bytes = _tree_bytes(run)
    out = os.path.join(work, "out")
    cli = [sys.executable, "-m", "rollout_cli"]
    copies = [os.path.join(work, "copy"), os.path.join(work, "copy2")]
    times: dict[str, list[float]] = {"cp": [], "cp_twice": [], "write_twice": [], "convert": []}
    rss = 0

    def clear() -> None:  # each timed command writes into pages just freed (untimed), as cp -r does after rm -r
        for d in (*copies, out):
            shutil.rmtree(d, ignore_errors=True)

    for _ in range(args.repeat):  # alternating, one sitting
        clear()
        times["cp"].append(_timed(["cp", "-r", run, copies[0]])[0])
        clear()
        times["cp_twice"].append(_timed(["sh", "-c", 'cp -r "$0" "$1" && cp -r "$0" "$2"', run, *copies])[0])
        clear()
        times["write_twice"].append(_timed([sys.executable, os.path.abspath(__file__), "--write-twice", run, *copies])[0])
        clear()
        dt, peak = _timed(cli + ["convert", run, out, "--image-token-id", "151655", "--workers", str(args.workers),
                                 *shlex.split(args.convert_args)])
        times["convert"].append(dt)
        rss = max(rss, peak)
    out_bytes = _tree_bytes(out)
    step_tensor = meta["tensor_bytes"] / args.steps
    best = {k: round(min(v), 3) for k, v in times.items()}
    res = {
        "run": {"steps": args.steps, "samples_per_step": args.samples, "patches_per_sample": args.patches,
                "dtype": "bfloat16", "tensor_bytes": meta["tensor_bytes"], "dump_bytes": dump_bytes},
        "convert": {"cp_s": best["cp"], "convert_s": best["convert"],
                    "throughput_vs_cp": round(best["cp"] / best["convert"], 3),
                    "peak_rss_bytes": rss, "peak_rss_vs_step_tensor_bytes": round(rss / step_tensor, 3),
                    "convert_args": args.convert_args, "all_s": {k: [round(x, 3) for x in v] for k, v in times.items()}},
        "floor": {"cp_twice_s": best["cp_twice"], "write_twice_fsync_s": best["write_twice"],
                  "cp_vs_cp_twice": round(best["cp"] / best["cp_twice"], 3),
                  "cp_vs_write_twice_fsync": round(best["cp"] / best["write_twice"], 3),
                  "convert_vs_write_twice_fsync": round(best["write_twice"] / best["convert"], 3)},
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
