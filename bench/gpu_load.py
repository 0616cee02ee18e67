#!/usr/bin/env python3
"""Shard -> GPU throughput of rollout_cli.loader.load, as a ratio to a plain pinned host-to-device copy.

What is timed (median of --reps runs after one warm-up, each run from a warm page cache):

  ref  pinned H2D            one pinned host buffer of the batch's bytes -> `.to(cuda, non_blocking=True)`
                             + synchronize: the ceiling for any loader.
  load + .to(cuda)           `Dataset.load(step, shard)` (mmap of the Arrow IPC copy, zero-copy views)
                             + `.to(cuda)` (one pinned staging copy, one async H2D copy) + synchronize.
  parquet load + .to(cuda)   the same through the Parquet fallback (decode), for comparison.
  ref  host memcpy           a copy of the same bytes between two preallocated host buffers.
  load + staging copy        `load` + the copy of every tensor into one preallocated host buffer
                             (what `pin_memory()` does, minus the page-locking).

Before anything is timed, the shard's files are dropped from the page cache (posix_fadvise
DONTNEED; --keep-cache leaves them): the first load then reads them as a trainer's first load
after `convert` does (the shards are written straight to the device, not through the cache),
and how that load brings them into the cache decides how many page faults every later load
takes, which the table shows per run ("faults").

GB/s counts every byte the batch moves (tokens, cu_seqlens, loss_mask, log-probs and the
per-sample arrays; tokens/loss_mask/log-probs are nearly all of it: see "payload share").  The
ratio column divides by the reference of the same side (H2D or host memcpy).

Without CUDA this is a dry run: it says so and measures only the host side.

    python bench/gpu_load.py                       # generates ~100 MiB of JSONL, converts, measures
    python bench/gpu_load.py --size-mb 400 --reps 9
    python bench/gpu_load.py --out OUT --step 1    # an existing converted output
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from rollout_cli.loader.load import PackedBatch, open_dataset  # noqa: E402

_ALIGN = 64


def ensure_output(data_dir: str, size_mb: float, seed: int, shards: int, compression: str) -> str:
    """Generate (once) a step of synthetic rollouts with bench/gen_rollouts.py and convert it (once)."""
    d = os.path.join(data_dir, f"gpu-load-r{size_mb:g}mb-s{seed}")
    src = os.path.join(d, "in", "step_000001.jsonl")
    out = os.path.join(d, f"out-{shards}sh-{compression}")
    if os.path.exists(os.path.join(out, "manifest.json")):
        return out
    if not os.path.exists(src + ".meta.json"):
        os.makedirs(os.path.dirname(src), exist_ok=True)
        print(f"generating {src} ({size_mb:g} MiB) ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, os.path.join(HERE, "gen_rollouts.py"), "--target-mb", str(size_mb),
                        "--seed", str(seed), "--out", src, "-q"], check=True)
    from rollout_cli.run.convert import ConvertOptions, convert

    print(f"converting to {out} ...", file=sys.stderr, flush=True)
    t = time.perf_counter()
    convert([src], out, ConvertOptions(shards=shards, compression=compression, overwrite=True))
    print(f"  {time.perf_counter() - t:.1f}s", file=sys.stderr, flush=True)
    return out


def layout(b: PackedBatch) -> tuple[dict[str, tuple[int, int]], int]:
    off, lay = 0, {}
    for name, t in b.tensors().items():
        off = -(-off // _ALIGN) * _ALIGN
        lay[name] = (off, t.numel() * t.element_size())
        off += lay[name][1]
    return lay, off


def stage_into(b: PackedBatch, buf: torch.Tensor, lay: dict) -> None:
    for name, t in b.tensors().items():
        off, n = lay[name]
        buf[off:off + n].view(t.dtype).copy_(t)


def median_s(fn, reps: int) -> tuple[float, list[float], float]:
    """(median s, every run's s, median minor page faults per run) after one warm-up."""
    fn()  # warm-up
    times, faults = [], []
    for _ in range(reps):
        f = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f)
    return statistics.median(times), times, statistics.median(faults)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="an existing converted output directory (default: generate and convert)")
    ap.add_argument("--size-mb", type=float, default=100, help="size of the generated JSONL step (MiB)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shards", type=int, default=1, help="shards when converting (the loaded shard is --shard)")
    ap.add_argument("--compression", default="zstd", help="Parquet compression when converting")
    ap.add_argument("--step", type=int, help="step to load (default: the first)")
    ap.add_argument("--shard", type=int, default=0)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--data-dir", default=os.path.join(HERE, ".data"))
    ap.add_argument("--keep-cache", action="store_true",
                    help="leave the shard's pages in the page cache as they are (default: drop them first)")
    ap.add_argument("--json", help="also write the results to this JSON file")
    a = ap.parse_args()

    out = a.out or ensure_output(a.data_dir, a.size_mb, a.seed, a.shards, a.compression)
    ds = open_dataset(out)
    step = a.step if a.step is not None else ds.steps[0]
    has_parquet_only = ds.paths(step, a.shard)[1] is None
    if not a.keep_cache:
        for p in ds.paths(step, a.shard):
            if p is not None:
                fd = os.open(p, os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)
    b0 = ds.load(step, a.shard)
    lay, total = layout(b0)
    nbytes = b0.nbytes
    payload = sum(t.numel() * t.element_size() for t in (b0.tokens, b0.loss_mask, b0.rollout_log_probs, b0.teacher_log_probs)
                  if t is not None)
    cuda = a.device.startswith("cuda") and torch.cuda.is_available()
    print(f"shard: step {step} shard {a.shard} of {out}: {b0.num_samples} samples, {b0.num_tokens:,} tokens, "
          f"{nbytes / 1e6:.1f} MB moved (payload share tokens/loss_mask/log-probs {payload / nbytes:.1%})"
          + (" [no Arrow IPC copy: Parquet path]" if has_parquet_only else ""))
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"reps {a.reps} (median)")
    rows: list[dict] = []

    def add(name: str, side: str, fn) -> None:
        med, times, faults = median_s(fn, a.reps)
        rows.append({"name": name, "side": side, "median_s": med, "times_s": times, "gbps": nbytes / med / 1e9,
                     "faults": faults})

    if cuda:
        dev = torch.device(a.device)
        src = torch.empty(total, dtype=torch.uint8, pin_memory=True)
        src.fill_(1)

        def ref_h2d():
            src.to(dev, non_blocking=True)
            torch.cuda.synchronize(dev)

        def subject():
            ds.load(step, a.shard).to(dev, non_blocking=True)
            torch.cuda.synchronize(dev)

        def subject_parquet():
            ds.load(step, a.shard, source="parquet").to(dev, non_blocking=True)
            torch.cuda.synchronize(dev)

        def host_pin():
            ds.load(step, a.shard, pin_memory=True)

        add("ref  pinned H2D copy", "h2d", ref_h2d)
        add("load + .to(cuda)", "h2d", subject)
        add("parquet load + .to(cuda)", "h2d", subject_parquet)
        add("load(pin_memory=True) (host side)", "host", host_pin)
        # correctness of what was timed
        g = ds.load(step, a.shard).to(dev).cpu()
        assert all(torch.equal(t, g.tensors()[k]) for k, t in b0.tensors().items())
    else:
        print(f"no CUDA device available (device {a.device!r}): dry run, host side only "
              "(shard -> staging buffer vs memcpy; the staging buffer cannot be pinned without CUDA)")

    a_src = torch.empty(total, dtype=torch.uint8)
    a_src.fill_(1)
    a_dst = torch.empty(total, dtype=torch.uint8)
    a_dst.fill_(0)
    staging = torch.empty(total, dtype=torch.uint8)
    staging.fill_(0)

    def ref_memcpy():
        a_dst.copy_(a_src)

    def host_stage():
        stage_into(ds.load(step, a.shard), staging, lay)

    def host_stage_parquet():
        stage_into(ds.load(step, a.shard, source="parquet"), staging, lay)

    add("ref  host memcpy", "host", ref_memcpy)
    add("load + staging copy", "host", host_stage)
    add("parquet load + staging copy", "host", host_stage_parquet)
    check = torch.empty(total, dtype=torch.uint8)
    stage_into(b0, check, lay)
    assert torch.equal(check, staging)

    ref = {side: next(r["median_s"] for r in rows if r["side"] == side and r["name"].startswith("ref"))
           for side in {r["side"] for r in rows}}
    print(f"\n{'what':<36} {'median ms':>10} {'GB/s':>8} {'÷ ref time':>11} {'faults':>7}")
    for r in rows:
        r["ratio_vs_ref"] = ref[r["side"]] / r["median_s"]
        print(f"{r['name']:<36} {r['median_s'] * 1e3:>10.2f} {r['gbps']:>8.2f} {r['ratio_vs_ref']:>10.2f}x {r['faults']:>7.0f}")
    if cuda:
        sub = next(r for r in rows if r["name"] == "load + .to(cuda)")
        print(f"\nshard -> GPU: {sub['gbps']:.2f} GB/s = {sub['ratio_vs_ref']:.2f}x of a pinned H2D copy of the same bytes")
    else:
        sub = next(r for r in rows if r["name"] == "load + staging copy")
        print(f"\n(dry run) shard -> host staging: {sub['gbps']:.2f} GB/s = {sub['ratio_vs_ref']:.2f}x of memcpy")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"out": out, "step": step, "shard": a.shard, "samples": b0.num_samples, "tokens": b0.num_tokens,
                       "bytes": nbytes, "payload_bytes": payload, "cuda": cuda, "page_cache_dropped": not a.keep_cache,
                       "device": torch.cuda.get_device_name(0) if cuda else None, "torch": torch.__version__,
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
