#!/usr/bin/env python3
"""Load benchmark: converted train data -> one flat int32 token tensor.

Converts a generated step file with ``rollout-cli convert`` (or uses --out DIR), then
times, in this process, warm page cache, median of --reps after one warm-up:

  loader   ds = rollout_cli.open_dataset(OUT); for each shard: batch = ds.load(step, shard),
           then batch.tokens copied once into a preallocated torch int32 buffer
           (a fresh open_dataset every rep, so nothing cached in ds carries over);
  memcpy   numpy copy of the same token bytes, already in memory, into a preallocated
           buffer: the ceiling;
  hf       datasets.Dataset.from_parquet(files).with_format("torch")["tokens"] + torch.cat
           (its Arrow cache is built by the warm-up, so the timed reps reuse it).

Ratios are ceiling time / method time (1.0 = memcpy speed).  Every method's tokens are
compared element-wise with a plain pyarrow read of the Parquet files.

    python bench/run_load.py --size-mb 200
    python bench/run_load.py --out /path/to/converted --step 1

Results: stdout and bench/results/load-<size>mb.json (or load-custom.json with --out).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def die(msg: str, code: int = 2):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(code)


def step_files(out: str, step: int) -> list[str]:
    """The step's Parquet shard files, in shard order (hidden folders skipped)."""
    files = glob.glob(os.path.join(out, "**", f"step-{step:06d}", "*.parquet"), recursive=True)
    if not files:
        files = glob.glob(os.path.join(out, "**", "*.parquet"), recursive=True)
    files = [f for f in files if not any(p.startswith(".") for p in os.path.relpath(f, out).split(os.sep))]

    def key(f):
        m = re.search(r"shard-(\d+)", os.path.basename(f))
        return (int(m.group(1)) if m else 1 << 30, f)

    return sorted(files, key=key)


def reference_tokens(files: list[str]) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = []
    for f in files:
        col = pq.read_table(f, columns=["tokens"])["tokens"]
        for chunk in col.chunks:
            flat = chunk.flatten() if isinstance(chunk, (pa.ListArray, pa.LargeListArray)) else chunk
            parts.append(flat.to_numpy(zero_copy_only=False).astype(np.int32, copy=False))
    return np.concatenate(parts) if parts else np.empty(0, np.int32)


def as_tensor(x):
    """batch.tokens as a 1-D torch tensor, whatever the loader hands back."""
    import torch

    if isinstance(x, torch.Tensor):
        return x.reshape(-1)
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x.reshape(-1))
    try:
        import pyarrow as pa

        if isinstance(x, pa.ChunkedArray):
            x = x.combine_chunks()
        if isinstance(x, (pa.ListArray, pa.LargeListArray)):
            x = x.flatten()
        if isinstance(x, pa.Array):
            return torch.from_numpy(x.to_numpy(zero_copy_only=False))
    except ImportError:
        pass
    return torch.as_tensor(np.asarray(x)).reshape(-1)


def median_time(fn, reps: int) -> tuple[float, list[float]]:
    fn()  # warm-up
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), ts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=200, help="generated input size (MiB)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=7, help="timed reps per method (>= 5)")
    ap.add_argument("--out", help="use this already converted folder (skip the conversion)")
    ap.add_argument("--step", type=int, default=1)
    ap.add_argument("--shards", help="comma list of shard numbers (default: one per Parquet file of the step)")
    ap.add_argument("--skip-hf", action="store_true", help="leave out HF datasets")
    ap.add_argument("--data-dir", default=os.path.join(HERE, ".data"))
    ap.add_argument("--results-dir", default=os.path.join(HERE, "results"))
    a = ap.parse_args(argv)
    if a.reps < 5:
        ap.error("--reps must be >= 5")

    try:
        import rollout_cli
    except ImportError as e:
        die(f"cannot import rollout_cli ({e}); install the package: pip install -e .")
    try:
        rollout_cli.open_dataset  # noqa: B018  (the package may resolve it lazily)
    except (AttributeError, ImportError):
        die("rollout_cli.open_dataset is missing: the loader API (open_dataset(OUT).load(step, shard)) "
            "is not in this version of the package, so there is nothing to benchmark yet")
    import warnings

    import torch

    # zero-copy views of read-only Arrow buffers: torch warns, the benchmark only reads them
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    if a.out:
        out = a.out
        tag = "custom"
    else:
        from run_convert import ensure_input, find_subject

        exe = find_subject()
        if exe is None:
            die("rollout-cli is not installed (pip install -e .), or pass --out with a converted folder")
        src, _ = ensure_input(a.data_dir, a.size_mb, a.seed)
        tag = f"{a.size_mb:g}mb"
        out = os.path.join(a.data_dir, f"load-{tag}")
        if os.path.isdir(out):
            shutil.rmtree(out)
        cmd = [exe, "convert", src, out, "--overwrite", "--compression", "zstd", "-q"]
        print("converting:", " ".join(cmd), file=sys.stderr, flush=True)
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            die(f"rollout-cli convert failed (rc={p.returncode}):\n{(p.stdout + p.stderr)[-2000:]}")

    files = step_files(out, a.step)
    if not files:
        die(f"no Parquet files for step {a.step} under {out}")
    shards = [int(s) for s in a.shards.split(",")] if a.shards else list(range(len(files)))
    ref = reference_tokens(files)
    n_tok = len(ref)
    nbytes = n_tok * 4
    print(f"{out}: step {a.step}, {len(files)} Parquet file(s), {n_tok:,} tokens ({nbytes / 1e6:,.1f} MB int32)",
          file=sys.stderr, flush=True)
    results = {}

    # (a) the project's loader
    buf = torch.empty(n_tok, dtype=torch.int32)
    buf.zero_()  # fault the pages in now, not inside the timed copy
    info = {}

    def run_loader():
        ds = rollout_cli.open_dataset(out)
        off = 0
        for shard in shards:
            batch = ds.load(a.step, shard)
            t = as_tensor(batch.tokens)
            n = t.numel()
            if off + n > n_tok:
                raise RuntimeError(f"loader returned more tokens than the files hold ({off + n} > {n_tok})")
            buf[off:off + n].copy_(t)
            off += n
            info["dtype"] = str(t.dtype)
            info["type"] = f"{type(batch.tokens).__module__}.{type(batch.tokens).__name__}"
        info["tokens"] = off

    t_open, _ = median_time(lambda: rollout_cli.open_dataset(out), a.reps)
    med, ts = median_time(run_loader, a.reps)
    ok = info["tokens"] == n_tok and bool(np.array_equal(buf.numpy(), ref))
    results["loader"] = {"median_s": med, "times_s": ts, "open_dataset_median_s": t_open,
                         "tokens_type": info["type"], "tokens_dtype": info["dtype"],
                         "tokens_loaded": info["tokens"], "equal_to_parquet": ok}

    # (b) the ceiling: memcpy of the same bytes, already in memory, into a preallocated buffer
    src_arr = buf.numpy().copy()
    dst = np.empty_like(src_arr)
    dst.fill(0)
    med_c, ts_c = median_time(lambda: np.copyto(dst, src_arr), a.reps)
    results["memcpy"] = {"median_s": med_c, "times_s": ts_c, "equal_to_parquet": bool(np.array_equal(dst, ref))}

    # (c) HF datasets
    if not a.skip_hf:
        try:
            import datasets
            from datasets import Dataset
        except ImportError:
            die("HF datasets is not installed (pip install datasets), or pass --skip-hf")
        datasets.disable_progress_bars()
        datasets.logging.set_verbosity_error()
        cache = os.path.join(a.data_dir, "hf-cache")
        shutil.rmtree(cache, ignore_errors=True)
        hf = {}

        def run_hf():
            ds = Dataset.from_parquet(files, cache_dir=cache)
            col = ds.with_format("torch")["tokens"]
            tensors = col if isinstance(col, list) else col[:]  # datasets >= 4 returns a lazy Column
            hf["x"] = torch.cat(tensors)

        t0 = time.perf_counter()
        run_hf()  # cold: builds the Arrow cache
        t_cold = time.perf_counter() - t0
        med_h, ts_h = median_time(run_hf, a.reps)
        x = hf.pop("x")
        results["hf"] = {"median_s": med_h, "times_s": ts_h, "cold_first_s": t_cold, "tokens_dtype": str(x.dtype),
                         "equal_to_parquet": bool(x.numel() == n_tok and np.array_equal(x.numpy(), ref)),
                         "version": datasets.__version__}

    for k, r in results.items():
        r["gb_per_s"] = nbytes / 1e9 / r["median_s"]
        r["ceiling_ratio"] = med_c / r["median_s"]

    print(f"\nload step {a.step} tokens into one int32 buffer: {n_tok:,} tokens = {nbytes / 1e6:,.1f} MB, "
          f"median of {a.reps} after a warm-up, warm page cache; ratio = memcpy time / method time")
    print(f"{'method':8s}  {'median ms':>10s}  {'min ms':>8s}  {'GB/s':>6s}  {'ratio':>7s}  {'dtype':>11s}  correct")
    for k, r in results.items():
        dtype = r.get("tokens_dtype", "int32")
        print(f"{k:8s}  {r['median_s'] * 1e3:10.1f}  {min(r['times_s']) * 1e3:8.1f}  {r['gb_per_s']:6.2f}  "
              f"{r['ceiling_ratio']:7.4f}  {dtype:>11s}  {'yes' if r['equal_to_parquet'] else 'NO'}")
    print(f"(open_dataset alone: {t_open * 1e3:.2f} ms median)")

    os.makedirs(a.results_dir, exist_ok=True)
    path = os.path.join(a.results_dir, f"load-{tag}.json")
    from importlib import metadata as md

    def ver(p):
        try:
            return md.version(p)
        except md.PackageNotFoundError:
            return None

    with open(path, "w") as f:
        json.dump({"benchmark": "load", "measured_with": "bench/run_load.py",
                   "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
                   "versions": {p: ver(p) for p in ("rollout-cli", "torch", "pyarrow", "numpy", "datasets")},
                   "converted": os.path.relpath(out, HERE) if not a.out else out, "step": a.step,
                   "shards": shards, "files": len(files), "tokens": n_tok, "token_bytes": nbytes,
                   "reps": a.reps, "results": results}, f, indent=1)
    print(f"\nwrote {os.path.relpath(path)}", file=sys.stderr)
    return 0 if all(r["equal_to_parquet"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
