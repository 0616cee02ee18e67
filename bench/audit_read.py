#!/usr/bin/env python
"""`rollout-cli audit` of one step against `torch.load(weights_only=False)` of its two dumps.

The step: a slime rollout dump (`{"rollout_id", "samples": [Sample.to_dict()]}`, token ids,
loss mask and log-probs as Python lists, as slime writes them) and the trainer's dump of the
same samples (`--save-debug-train-data` layout, format_version 2: per-sample int64 tokens,
int32 loss mask and float32 rollout_log_probs, log_probs, ref_log_probs, advantages and
entropy tensors; dp 2 gathered in one file), N samples (default 2,000) of ~T tokens (default
2,000, three quarters of them response). The pair is clean: audit finds no divergence.

Both sides are whole processes measured by bench/procmon.py (wall time, peak RSS of the tree),
interleaved run by run so that the shared machine's noise falls on both alike:
  audit:  python -m rollout_cli audit ROLLOUT.pt --train TRAIN.pt -q   (exit 0: no divergence)
  torch:  python -c "torch.load(ROLLOUT, weights_only=False); torch.load(TRAIN, weights_only=False)"
          (both payloads held at once, as audit holds them)
Prints the medians and the ratios audit / torch; --out writes them as JSON.

Usage: python bench/audit_read.py [--samples N] [--tokens T] [--runs R] [--out bench/results/audit-read.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from procmon import measure  # noqa: E402

GROUP = 8


def build(path_rollout: str, path_train: str, n: int, tokens: int, seed: int = 7) -> dict:
    """Write the step's two dumps; return their sizes."""
    import torch

    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.normal(tokens, tokens / 10, n).astype(np.int64), 16, None)
    rls = lengths * 3 // 4
    rewards = rng.integers(0, 2, n).astype(np.float64)
    samples, trained = [], []
    for i in range(n):
        t, rl = int(lengths[i]), int(rls[i])
        toks = rng.integers(100, 151_936, t)
        mask = np.ones(rl, dtype=np.int32)
        if i % 3 == 0:  # a multi-turn sample: a tool span the trainer does not train on
            mask[rl // 3: rl // 3 + rl // 10] = 0
        lp = -rng.exponential(0.8, rl).astype(np.float32)
        samples.append({
            "group_index": i // GROUP, "index": i, "rollout_id": None,
            "prompt": "<|im_start|>user\nSolve the problem.<|im_end|>\n<|im_start|>assistant\n",
            "tokens": toks.tolist(), "response": "The answer is \\boxed{4}.", "response_length": rl, "label": "4",
            "reward": float(rewards[i]), "loss_mask": mask.tolist(), "rollout_log_probs": lp.astype(np.float64).tolist(),
            "status": "completed", "metadata": {}, "remove_sample": False,
        })
        trained.append((toks, mask, lp))
    # convert's default rule for these rows: grpo, mean-centred and std-scaled per prompt group
    r = rewards.astype(np.float32).reshape(-1, GROUP)
    norm = ((r - r.mean(axis=1, keepdims=True)) / (r.std(axis=1, ddof=1, keepdims=True) + 1e-6)).reshape(-1)
    masks = np.array([int(m.sum()) for _, m, _ in trained])
    train_samples = []
    for i, (toks, mask, lp) in enumerate(trained):
        m = torch.from_numpy(mask.astype(np.float32))
        noise = torch.from_numpy(rng.normal(0, 0.03, len(lp)).astype(np.float32))
        rlp = torch.from_numpy(lp)
        train_samples.append({
            "data_parallel_rank": i % 2, "rollout_position": i, "sample_index": i,
            "tokens": torch.from_numpy(toks), "response_lengths": int(rls[i]), "rewards": float(norm[i]),
            "truncated": 0, "rollout_ids": i, "loss_masks": torch.from_numpy(mask), "rollout_mask_sums": torch.tensor(float(masks[i])),
            "rollout_log_probs": rlp, "source_names": "unknown", "log_probs": (rlp + noise) * m,
            "ref_log_probs": (rlp + 2 * noise) * m, "advantages": torch.full((len(lp),), float(norm[i])) * m,
            "entropy": torch.from_numpy(rng.uniform(0.1, 2.0, len(lp)).astype(np.float32)) * m,
        })
    parts = [[i for i in range(n) if i % 2 == r] for r in range(2)]
    payload = {"format_version": 2, "rollout_id": 1, "rank": 0, "samples": train_samples,
               "dp_shards": [{"rank": r, "data_parallel_rank": r, "partition": p, "sample_indices": p,
                              "micro_batch_indices": [[[k, k + 1] for k in range(len(p))]], "num_microbatches": [len(p)],
                              "global_batch_sizes": [n]} for r, p in enumerate(parts)],
               "raw_reward": rewards.tolist()}
    torch.save({"rollout_id": 1, "samples": samples}, path_rollout)
    torch.save(payload, path_train)
    return {"rollout_mib": os.path.getsize(path_rollout) / 2**20, "train_mib": os.path.getsize(path_train) / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", help="write the result JSON here")
    args = ap.parse_args()
    args.samples = max(GROUP, args.samples // GROUP * GROUP)  # whole prompt groups
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        ro, tr = os.path.join(tmp, "rollout_data", "1.pt"), os.path.join(tmp, "train_data", "1.pt")
        os.makedirs(os.path.dirname(ro))
        os.makedirs(os.path.dirname(tr))
        t0 = time.perf_counter()
        sizes = build(ro, tr, args.samples, args.tokens)
        print(f"step: {args.samples} samples x ~{args.tokens} tokens; rollout dump {sizes['rollout_mib']:.1f} MiB, "
              f"train dump {sizes['train_mib']:.1f} MiB (built in {time.perf_counter() - t0:.1f}s)", flush=True)
        cmds = {
            "audit": [sys.executable, "-m", "rollout_cli", "audit", ro, "--train", tr, "-q"],
            "torch": [sys.executable, "-c", "import sys, torch; a = torch.load(sys.argv[1], weights_only=False); "
                      "b = torch.load(sys.argv[2], weights_only=False)", ro, tr],
        }
        runs: dict[str, list[dict]] = {k: [] for k in cmds}
        for rep in range(args.runs):
            for name, cmd in cmds.items():
                r = measure(cmd, interval=0.02, pss=False, env=env)
                if r["rc"] != 0:  # audit: 4 would mean divergences, and the pair is clean
                    sys.exit(f"{name} failed (rc {r['rc']}): {r['output']}")
                r.pop("output")
                runs[name].append(r)
                print(f"  run {rep + 1} {name:5s} {r['wall_s']:7.2f} s  {r['max_rss_mib']:8.1f} MiB", flush=True)
    med = {k: {"wall_s": statistics.median(x["wall_s"] for x in v), "max_rss_mib": statistics.median(x["max_rss_mib"] for x in v)}
           for k, v in runs.items()}
    ratio = {"wall": med["audit"]["wall_s"] / med["torch"]["wall_s"],
             "max_rss": med["audit"]["max_rss_mib"] / med["torch"]["max_rss_mib"]}
    print(f"median of {args.runs} interleaved runs: audit {med['audit']['wall_s']:.2f} s, {med['audit']['max_rss_mib']:.0f} MiB; "
          f"torch.load x2 {med['torch']['wall_s']:.2f} s, {med['torch']['max_rss_mib']:.0f} MiB; "
          f"ratio wall {ratio['wall']:.2f}x, peak memory {ratio['max_rss']:.2f}x")
    if args.out:
        Path(args.out).write_text(json.dumps({"samples": args.samples, "tokens": args.tokens, "sizes": sizes, "median": med,
                                              "ratio": ratio, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
