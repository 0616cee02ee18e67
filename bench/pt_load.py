#!/usr/bin/env python
"""Benchmark rollout_cli.inputs.slime_pt.pt_pickle.load_pt against torch.load on a realistic slime dump.

The dump: {"rollout_id": 1, "samples": [...]} with N sample dicts (default 2,000), each holding
~2,000 token ids and 2,000 float log-probs as Python lists, an int32 routed-experts tensor of shape
[2000, 2, 4] and a few small scalar/string fields. Prints the median wall time of 3 runs of each
loader and the ratios.

Usage: python bench/pt_load.py [--samples N] [--tokens T] [--runs R] [--keep PATH]
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rollout_cli.inputs.slime_pt.pt_pickle import load_pt  # noqa: E402


def build_payload(n_samples: int, n_tokens: int):
    import torch

    rng = random.Random(1234)
    samples = []
    for i in range(n_samples):
        t = n_tokens + rng.randint(-50, 50)
        samples.append(
            {
                "group_index": i // 8,
                "index": i,
                "prompt": "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
                "tokens": [rng.randrange(150_000) for _ in range(t)],
                "response": "The answer is \\boxed{4}.",
                "response_length": n_tokens,
                "label": "4",
                "reward": rng.random(),
                "loss_mask": [1] * 64,
                "rollout_log_probs": [-rng.random() * 5 for _ in range(n_tokens)],
                "rollout_routed_experts": torch.randint(0, 64, (n_tokens, 2, 4), dtype=torch.int32),
                "status": "completed",
                "metadata": {},
            }
        )
    return {"rollout_id": 1, "samples": samples}


def median_time(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        del out
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", help="write the dump here (and keep it) instead of a temp file")
    args = ap.parse_args()

    import torch

    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or os.path.join(tmp, "1.pt")
        t0 = time.perf_counter()
        payload = build_payload(args.samples, args.tokens)
        torch.save(payload, path)
        del payload
        print(f"dump: {args.samples} samples x ~{args.tokens} tokens, {os.path.getsize(path) / 2**20:.1f} MiB "
              f"(built in {time.perf_counter() - t0:.1f}s); torch {torch.__version__}, python {sys.version.split()[0]}")

        results = {
            "load_pt": median_time(lambda: load_pt(path), args.runs),
            "torch.load(weights_only=True)": median_time(lambda: torch.load(path, weights_only=True), args.runs),
            "torch.load(weights_only=False)": median_time(lambda: torch.load(path, weights_only=False), args.runs),
        }
    base = results["load_pt"]
    print(f"median of {args.runs} runs:")
    for name, t in results.items():
        print(f"  {name:32s} {t:8.3f} s   {t / base:5.2f}x load_pt")


if __name__ == "__main__":
    main()
