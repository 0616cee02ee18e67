#!/usr/bin/env python3
"""The trainer's data path: `iter_batches` at a world size other than the shard count, under a
token budget, against today's per-shard `Dataset.load`, both consumed by a checksum that
touches every byte; the tokens per rank of its repartition against slime's partitioner; on a
GPU, host-to-device of a micro-batch against a pinned copy of the same bytes.

Input: a run of S step files (`step_000001.jsonl` ...) made once by the shared generator
(../shared/bench/make_rollouts.py beside the repository or a folder above it, else
bench/gen_rollouts.py; `--generator` names another), each step's size drawn as run_whole.py
draws them (16 steps: 10-70 MiB of JSONL), converted once with `rollout-cli convert --shards N`
(a fresh process); both cached under bench/.data/loader-<S>-s<seed>/.

Throughput, in this process, warm page cache, reps alternating between the methods (the first
one rotating), median of --reps after one warm-up round:

  load           ds = open_dataset(OUT); ds.load(step, shard) for every step and shard
                 (today's path: one PackedBatch per step and rank at the converted world size)
  iter-torch     ds = open_dataset(OUT); one ds.iter_batches(rank, world_size=W, max_tokens=B)
                 per rank, consumed together, micro-batch k of every rank in turn (a single
                 controller serving every rank, as slime's rollout manager splits a step: the
                 iterators of one opened output share its mapped shards and each step's plan)
  iter-numpy     the same from open_output(OUT).iter_batches(..., backend="numpy") (no torch)
  iter-per-rank  open_output(OUT).iter_batches(rank, ..., backend="numpy") on a fresh output per
                 rank, rank after rank: what a trainer running one rank per process pays (each
                 rank maps every shard of a step and plans the whole step itself)
  copy-floor     `load`'s batches, each copied whole (every array, one memcpy each) into one
                 buffer reused throughout, then checksummed there: the least any loader that
                 copies the bytes it serves once can cost (a repartition at another world size
                 has to: a rank's rows lie in every shard), with no planning and no Python
                 per row; its ratio bounds what the iterators can reach on this machine

The consumer XORs every byte of every batch, taken whole as it lies in memory
(`batch.buffers()`: a repartitioned micro-batch is one block, a shard's views are one buffer an
array; `np.bitwise_xor.reduce` over uint64 views, the tail as uint8): the bytes are read once,
as a trainer's one copy to the device would. Reported: tokens/s (tokens = the samples' total
lengths), bytes touched per second, wall and CPU medians, and each method's tokens/s over
`load`'s (target: iter at >= 0.8x). An untimed pass first checks that every method serves the
same samples (count, token sum, token-id sum).

Balance, per step: max/mean tokens per rank of the repartition at W; the same for slime's
partitioner (`get_seqlen_balanced_partitions(total_lengths, W, equal_size=True)`, which is
pipeline/schedule.balanced_equal_parts with slime's tie rules) over the step's samples, padded
with zero-length entries to a multiple of W as its equal-size split needs; and the bound the
largest rollout (with --keep-groups: prompt group) sets, max(1, its tokens / (step tokens / W)),
which no split that keeps it whole goes under. A step meets the target when the repartition's
figure is <= max(1.05 x slime's, the bound).

GPU (only where torch.cuda.is_available()): rank 0's micro-batches, each `batch.to("cuda")`
from the unpinned CPU batch (pin + one copy) and from a batch pinned beforehand, synchronised,
against a pre-pinned uint8 tensor of the same byte count `.to("cuda", non_blocking=True)`;
ratio = copy time / batch time (target >= 0.8).

    python bench/loader.py                                   # 16 steps, 4 shards, W 6, budget 16384, 7 reps
    python bench/loader.py --world-size 3 --max-tokens 8192 --reps 5
    python bench/loader.py --quick                           # tiny sizes, 1 rep: a smoke test, no figures

Results: a table on stdout and bench/results/loader-<S>.json (--results elsewhere; -quick
appended in quick mode).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import run_whole  # noqa: E402  (the step sizes of a whole run)

METHODS = ("load", "iter-torch", "iter-numpy", "iter-per-rank", "copy-floor")
# --quick: 48 short samples a step (both generators take these arguments)
QUICK_GEN = ["--num-samples", "48", "--mean-tokens", "300", "--min-tokens", "64", "--max-tokens", "1200"]
# --switches: a fast path of the loader (rollout_cli/core/tuning.py) -> its environment variable;
# each iterator method runs again with it off ("iter-numpy/no-step-cache"), in the same rounds
SWITCHES = {"step-cache": "ROLLOUT_CLI_STEP_CACHE"}
SWITCHED = ("iter-torch", "iter-numpy", "iter-per-rank")
TARGET_RATIO = 0.8
SLIME_SLACK = 1.05


# ------------------------------------------------------------------------------------------
# the data
# ------------------------------------------------------------------------------------------


def generator(named: str | None = None) -> str:
    """The shared generator beside the repository or a folder above it, else the project's."""
    if named:
        return named
    for up in (ROOT.parent, ROOT.parent.parent):
        cand = up / "shared" / "bench" / "make_rollouts.py"
        if cand.is_file():
            return str(cand)
    return str(HERE / "gen_rollouts.py")


def ensure_run(data_dir: Path, steps: int, seed: int, quick: bool, gen: str) -> tuple[Path, dict]:
    """The run's step files, generated once: (folder, what was asked of the generator)."""
    d = data_dir / f"loader-{steps}{'q' if quick else ''}-s{seed}" / "dumps"
    d.mkdir(parents=True, exist_ok=True)
    sizes = None if quick else run_whole.step_sizes(steps, seed)
    for i in range(steps):
        step = i + 1
        path = d / f"step_{step:06d}.jsonl"
        if path.exists():
            continue
        size = QUICK_GEN if quick else ["--target-mb", str(sizes[i])]
        tmp = d / f".tmp_{step:06d}.jsonl"
        subprocess.run([sys.executable, gen, *size, "--seed", str(seed * 100_003 + step), "--out", str(tmp)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for side in (".truth.json", ".meta.json"):
            if Path(str(tmp) + side).exists():
                os.remove(str(tmp) + side)
        os.replace(tmp, path)
    return d, {"generator": os.path.relpath(gen, ROOT), "step_mib": sizes, "quick_args": QUICK_GEN if quick else None}


def ensure_output(dumps: Path, shards: int, keep_groups: bool) -> Path:
    """The run converted with --shards (a fresh `rollout-cli convert` process), once."""
    out = dumps.parent / f"out-{shards}{'-groups' if keep_groups else ''}"
    stamp = out / ".bench-inputs.json"
    want = sorted((p.name, p.stat().st_size) for p in dumps.glob("step_*.jsonl"))
    if (out / "manifest.json").exists() and stamp.exists() and json.loads(stamp.read_text()) == [list(w) for w in want]:
        return out
    cmd = [sys.executable, "-m", "rollout_cli", "convert", str(dumps), str(out), "--shards", str(shards),
           "--overwrite", "-q"] + (["--keep-groups"] if keep_groups else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    subprocess.run(cmd, check=True, env=env)
    stamp.write_text(json.dumps(want))
    return out


# ------------------------------------------------------------------------------------------
# the consumer
# ------------------------------------------------------------------------------------------


def touch(a: np.ndarray) -> int:
    """XOR of every byte of `a` (read once): uint64 words, then the tail bytes."""
    b = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    n = b.size - b.size % 8
    x = int(np.bitwise_xor.reduce(b[:n].view(np.uint64))) if n else 0
    if n < b.size:
        x ^= int(np.bitwise_xor.reduce(b[n:]))
    return x


def batch_buffers(batch) -> list[np.ndarray]:
    """The memory a batch's arrays lie in (PackedBatch.buffers() through .numpy(), or the numpy
    backend's Batch.buffers())."""
    return [b if isinstance(b, np.ndarray) else b.numpy() for b in batch.buffers()]


class Copied:
    """A batch whose buffers() copies every one of its arrays into one staging buffer, reused
    for every batch, and hands that (copy-floor)."""

    stage = np.empty(0, np.uint8)

    def __init__(self, batch):
        self.batch = batch
        self.tokens = batch.tokens
        self.response_lengths = batch.response_lengths

    def buffers(self) -> list[np.ndarray]:
        parts = batch_buffers(self.batch)
        total = sum(p.nbytes for p in parts)
        if Copied.stage.nbytes < total:
            Copied.stage = np.empty(total, np.uint8)
            Copied.stage[:] = 0  # written once before: reuse costs no page faults
        np.concatenate(parts, out=Copied.stage[:total])
        return [Copied.stage[:total]]


def consume(batches) -> dict:
    """Touch every byte of every batch; counts of what was served."""
    x, nbytes, tokens, batches_n = 0, 0, 0, 0
    for b in batches:
        for a in batch_buffers(b):
            x ^= touch(a)
            nbytes += a.nbytes
        tokens += int(b.tokens.shape[0])
        batches_n += 1
    return {"xor": x, "bytes": nbytes, "tokens": tokens, "batches": batches_n}


def streams(method: str, out: str, ranks: int, world_size: int, max_tokens: int | None, steps: list[int]):
    """The batches `method` serves, for every rank, in order."""
    if method in ("load", "copy-floor"):
        from rollout_cli.loader import open_dataset

        ds = open_dataset(out)
        wrap = Copied if method == "copy-floor" else (lambda b: b)
        return (wrap(ds.load(s, r)) for s in steps for r in range(ds.num_shards))
    from rollout_cli.output.model import open_output

    if method == "iter-per-rank":
        return (b for r in range(ranks)
                for b in open_output(out).iter_batches(r, world_size=world_size, max_tokens=max_tokens, backend="numpy"))
    if method == "iter-torch":
        from rollout_cli.loader import open_dataset

        ds = open_dataset(out)
        its = [ds.iter_batches(r, world_size=world_size, max_tokens=max_tokens) for r in range(ranks)]
    else:
        o = open_output(out)
        its = [o.iter_batches(r, world_size=world_size, max_tokens=max_tokens, backend="numpy") for r in range(ranks)]
    return (b for group in zip(*its) for b in group)  # every rank's micro-batch k, then k + 1, step after step


def served(method: str, out: str, ranks: int, world_size: int, max_tokens: int | None, steps: list[int]) -> dict:
    """What a method serves, order-free: samples, tokens, the sum of the token ids."""
    n = tokens = ids = 0
    for b in streams(method, out, ranks, world_size, max_tokens, steps):
        t = b.tokens.numpy() if hasattr(b.tokens, "numpy") and not isinstance(b.tokens, np.ndarray) else b.tokens
        n += int(b.response_lengths.shape[0])
        tokens += int(t.shape[0])
        ids += int(t.astype(np.int64).sum())
    return {"samples": n, "tokens": tokens, "token_id_sum": ids}


def time_methods(out: str, methods: list[str], world_size: int, max_tokens: int | None, steps: list[int],
                 reps: int) -> dict:
    """Median wall and CPU seconds of consuming every batch, per method: one warm-up round,
    then `reps` rounds, the first method rotating."""
    runs: dict[str, list] = {m: [] for m in methods}
    for rnd in range(reps + 1):
        order = methods[rnd % len(methods):] + methods[:rnd % len(methods)]
        for m in order:
            method, _, off = m.partition("/no-")
            saved = os.environ.get(SWITCHES[off]) if off else None
            if off:
                os.environ[SWITCHES[off]] = "0"
            try:
                w0, c0 = time.perf_counter(), time.process_time()
                got = consume(streams(method, out, world_size, world_size, max_tokens, steps))
                w, c = time.perf_counter() - w0, time.process_time() - c0
            finally:
                if off:
                    if saved is None:
                        del os.environ[SWITCHES[off]]
                    else:
                        os.environ[SWITCHES[off]] = saved
            if rnd:
                runs[m].append({"wall_s": w, "cpu_s": c, **got})
    res = {}
    for m, rs in runs.items():
        wall = statistics.median(r["wall_s"] for r in rs)
        res[m] = {"wall_s": wall, "cpu_s": statistics.median(r["cpu_s"] for r in rs), "min_wall_s": min(r["wall_s"] for r in rs),
                  "tokens": rs[0]["tokens"], "bytes": rs[0]["bytes"], "batches": rs[0]["batches"],
                  "tokens_per_s": rs[0]["tokens"] / wall if wall else None,
                  "bytes_per_s": rs[0]["bytes"] / wall if wall else None, "runs": rs}
    base = res.get("load", {}).get("tokens_per_s")
    for m, r in res.items():
        r["ratio_to_load"] = (r["tokens_per_s"] / base) if base and r["tokens_per_s"] else None
    return res


# ------------------------------------------------------------------------------------------
# balance
# ------------------------------------------------------------------------------------------


def imbalance(tokens: list[int]) -> float:
    """max / mean tokens per rank (1.0 when nothing)."""
    total = sum(tokens)
    return max(tokens) / (total / len(tokens)) if total else 1.0


def slime_imbalance(lengths: list[int], world_size: int) -> tuple[float, int]:
    """(max/mean tokens per rank, zero-length entries padded) of slime's equal-size
    Karmarkar-Karp over the step's samples."""
    from rollout_cli.pipeline.schedule import balanced_equal_parts

    pad = (-len(lengths)) % world_size
    weights = list(lengths) + [0] * pad
    parts = balanced_equal_parts(weights, world_size)
    return imbalance([sum(weights[i] for i in p) for p in parts]), pad


def unit_bound(unit_tokens: list[int], world_size: int) -> float:
    """The lowest max/mean any split keeping each unit whole can reach, as its largest unit
    decides: max(1, largest / (total / W))."""
    total = sum(unit_tokens)
    return max(1.0, max(unit_tokens) / (total / world_size)) if total else 1.0


def step_rows(out: str, step: int) -> dict[str, np.ndarray]:
    """The step's samples from its shards, in rollout-position order: total length, rollout id,
    group index."""
    import pyarrow as pa

    from rollout_cli.output.model import open_output

    o = open_output(out)
    cols = ["rollout_position", "total_length", "rollout_id", "group_index"]
    t = pa.concat_tables(list(o.tables(step, columns=cols))).sort_by("rollout_position")
    return {c: t.column(c).to_numpy(zero_copy_only=False) for c in cols}


def balance(out: str, world_size: int, max_tokens: int | None, steps: list[int], keep_groups: bool) -> dict:
    """Per step: the repartition's max/mean tokens per rank, slime's, the largest unit's bound."""
    from rollout_cli.output.model import open_output

    o = open_output(out)
    per_rank = {s: [0] * world_size for s in steps}
    for r in range(world_size):
        for b in o.iter_batches(r, world_size=world_size, max_tokens=max_tokens, backend="numpy"):
            per_rank[int(b.step)][r] += int(b.tokens.shape[0])
    rows = []
    for s in steps:
        t = step_rows(out, s)
        key = t["group_index"] if keep_groups else t["rollout_id"]
        _, unit = np.unique(key, return_inverse=True)
        units = np.bincount(unit.reshape(-1), weights=t["total_length"].astype(np.float64)).astype(np.int64).tolist()
        ours = imbalance(per_rank[s])
        slime, pad = slime_imbalance(t["total_length"].astype(np.int64).tolist(), world_size)
        bound = unit_bound(units, world_size)
        rows.append({"step": s, "samples": int(len(t["total_length"])), "units": len(units),
                     "tokens": int(t["total_length"].sum()), "largest_unit": max(units) if units else 0,
                     "imbalance": ours, "slime_imbalance": slime, "slime_padded": pad, "bound": bound,
                     "limit": max(SLIME_SLACK * slime, bound), "ok": ours <= max(SLIME_SLACK * slime, bound) + 1e-12,
                     "tokens_per_rank": per_rank[s]})
    return {"steps": rows, "worst_imbalance": max(r["imbalance"] for r in rows),
            "worst_slime_imbalance": max(r["slime_imbalance"] for r in rows),
            "mean_imbalance": statistics.mean(r["imbalance"] for r in rows),
            "mean_slime_imbalance": statistics.mean(r["slime_imbalance"] for r in rows),
            "steps_ok": sum(r["ok"] for r in rows), "steps_total": len(rows)}


# ------------------------------------------------------------------------------------------
# GPU
# ------------------------------------------------------------------------------------------


def gpu(out: str, world_size: int, max_tokens: int | None, reps: int) -> dict | None:
    """Host-to-device of rank 0's micro-batches against a pinned copy of the same bytes;
    None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    from rollout_cli.loader import open_dataset

    batches = [b for b in open_dataset(out).iter_batches(0, world_size=world_size, max_tokens=max_tokens)
               if b.num_samples]
    pinned = [b.pin_memory() for b in batches]
    raw = [torch.empty(b.nbytes, dtype=torch.uint8, pin_memory=True) for b in batches]
    dev = torch.device("cuda")

    def unpinned():
        for b in batches:
            b.to(dev)
        torch.cuda.synchronize()

    def prepinned():
        for b in pinned:
            b.to(dev)
        torch.cuda.synchronize()

    def copy():
        for t in raw:
            t.to(dev, non_blocking=True)
        torch.cuda.synchronize()

    fns = {"batch_to_cuda": unpinned, "pinned_batch_to_cuda": prepinned, "pinned_tensor_to_cuda": copy}
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for rnd in range(reps + 1):
        for k in names[rnd % 3:] + names[:rnd % 3]:
            t0 = time.perf_counter()
            fns[k]()
            if rnd:
                times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    nbytes = sum(b.nbytes for b in batches)
    return {"device": torch.cuda.get_device_name(0), "batches": len(batches), "bytes": nbytes,
            "median_s": med, "gb_per_s": {k: nbytes / v / 1e9 for k, v in med.items()},
            "ratio": {k: med["pinned_tensor_to_cuda"] / med[k] for k in ("batch_to_cuda", "pinned_batch_to_cuda")},
            "target": TARGET_RATIO}


# ------------------------------------------------------------------------------------------


def print_table(res: dict) -> None:
    a = res["config"]
    print(f"\nloader: {a['steps']} steps, {a['shards']} shards -> world size {a['world_size']}, "
          f"budget {a['max_tokens']} tokens, {a['reps']} reps")
    print(f"{'method':<26} {'wall ms':>9} {'CPU ms':>9} {'Mtok/s':>9} {'GB/s':>7} {'batches':>8} {'x load':>7}")
    for m, r in res["throughput"].items():
        ratio = f"{r['ratio_to_load']:.2f}" if r["ratio_to_load"] is not None else "-"
        print(f"{m:<26} {r['wall_s'] * 1e3:>9.1f} {r['cpu_s'] * 1e3:>9.1f} {r['tokens_per_s'] / 1e6:>9.1f} "
              f"{r['bytes_per_s'] / 1e9:>7.2f} {r['batches']:>8} {ratio:>7}")
    b = res["balance"]
    print(f"\nmax/mean tokens per rank at world size {a['world_size']} "
          f"({b['steps_ok']}/{b['steps_total']} steps within max({SLIME_SLACK} x slime, bound))")
    print(f"{'step':>5} {'samples':>8} {'units':>6} {'ours':>7} {'slime':>7} {'bound':>7} {'ok':>4}")
    for r in b["steps"]:
        print(f"{r['step']:>5} {r['samples']:>8} {r['units']:>6} {r['imbalance']:>7.4f} {r['slime_imbalance']:>7.4f} "
              f"{r['bound']:>7.4f} {'yes' if r['ok'] else 'NO':>4}")
    g = res["gpu"]
    if g is None:
        print("\nGPU: no CUDA device, skipped")
    else:
        print(f"\nGPU {g['device']}: {g['batches']} micro-batches, {g['bytes'] / 1e6:.1f} MB")
        for k, v in g["median_s"].items():
            extra = f"  {g['ratio'][k]:.2f}x the pinned copy" if k in g["ratio"] else ""
            print(f"  {k:<22} {v * 1e3:8.2f} ms {g['gb_per_s'][k]:6.2f} GB/s{extra}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=16, help="steps of the generated run")
    ap.add_argument("--shards", type=int, default=4, help="--shards of the conversion")
    ap.add_argument("--world-size", type=int, default=6, help="the trainer's world size (other than --shards)")
    ap.add_argument("--max-tokens", type=int, default=16384, help="token budget per micro-batch (0: none)")
    ap.add_argument("--keep-groups", action="store_true", help="convert with --keep-groups")
    ap.add_argument("--reps", type=int, default=7, help="timed rounds (after one warm-up)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="tiny sizes and 1 rep: a smoke test, no figures")
    ap.add_argument("--no-gpu", action="store_true", help="leave out the GPU section")
    ap.add_argument("--switches", default="",
                    help=f"comma list of {', '.join(SWITCHES)}: each iterator method also timed with that fast path off")
    ap.add_argument("--generator", help="the step generator to run (default: the shared one, see above)")
    ap.add_argument("--data-dir", default=str(HERE / ".data"))
    ap.add_argument("--results", help="the JSON summary's path (default bench/results/loader-<S>[-quick].json)")
    a = ap.parse_args(argv)
    if a.quick:
        a.steps, a.shards, a.reps = min(a.steps, 3), 2, 1
        a.world_size = 3 if a.world_size == 6 else a.world_size
        a.max_tokens = 2048 if a.max_tokens == 16384 else a.max_tokens
    if a.world_size == a.shards:
        print(f"note: --world-size {a.world_size} is the shard count: nothing is repartitioned", file=sys.stderr)
    max_tokens = a.max_tokens or None
    switches = [x.strip() for x in a.switches.split(",") if x.strip()]
    if any(x not in SWITCHES for x in switches):
        ap.error(f"--switches: unknown {[x for x in switches if x not in SWITCHES]} (known: {', '.join(SWITCHES)})")
    gen = generator(a.generator)
    dumps, made = ensure_run(Path(a.data_dir), a.steps, a.seed, a.quick, gen)
    out = str(ensure_output(dumps, a.shards, a.keep_groups))
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    from rollout_cli.output.model import open_output

    steps = open_output(out).step_numbers()
    checks = {m: served(m, out, a.world_size, a.world_size, max_tokens, steps) for m in METHODS}
    same = all(c == checks["load"] for c in checks.values())
    res = {
        "bench": "loader",
        "config": {"steps": a.steps, "shards": a.shards, "world_size": a.world_size, "max_tokens": max_tokens,
                   "keep_groups": a.keep_groups, "reps": a.reps, "seed": a.seed, "quick": a.quick, **made},
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "served": checks, "same_samples": same,
        "throughput": time_methods(out, list(METHODS) + [f"{m}/no-{sw}" for sw in switches for m in SWITCHED],
                                   a.world_size, max_tokens, steps, a.reps),
        "balance": balance(out, a.world_size, max_tokens, steps, a.keep_groups),
        "gpu": None if a.no_gpu else gpu(out, a.world_size, max_tokens, a.reps),
        "target_ratio": TARGET_RATIO,
    }
    t = res["throughput"]
    res["ratio_iter_torch"], res["ratio_iter_numpy"] = t["iter-torch"]["ratio_to_load"], t["iter-numpy"]["ratio_to_load"]
    res["ratio_iter_per_rank"] = t["iter-per-rank"]["ratio_to_load"]
    res["ratio_copy_floor"] = t["copy-floor"]["ratio_to_load"]
    g = res["gpu"]
    res["meets"] = {  # each figure against its target
        "throughput_torch": res["ratio_iter_torch"] is not None and res["ratio_iter_torch"] >= TARGET_RATIO,
        "throughput_numpy": res["ratio_iter_numpy"] is not None and res["ratio_iter_numpy"] >= TARGET_RATIO,
        "throughput_per_rank": res["ratio_iter_per_rank"] is not None and res["ratio_iter_per_rank"] >= TARGET_RATIO,
        "balance": res["balance"]["steps_ok"] == res["balance"]["steps_total"],
        "gpu": None if g is None else g["ratio"]["batch_to_cuda"] >= TARGET_RATIO,
    }
    path = Path(a.results or HERE / "results" / f"loader-{a.steps}{'-quick' if a.quick else ''}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=1) + "\n")
    print_table(res)
    print("\ntargets: " + ", ".join(f"{k} {'-' if v is None else 'met' if v else 'MISSED'}" for k, v in res["meets"].items()))
    if a.quick:
        print("\n(--quick: tiny sizes, 1 rep: not figures to quote)")
    print(f"\nwrote {path}")
    if not same:
        print(f"error: the methods served different samples: {checks}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
