#!/usr/bin/env python3
"""NeMo-RL step log against slime-shaped JSONL of the same samples: `rollout-cli convert` time.

The same samples (groups of --group-size sharing a prompt; total tokens lognormal with mean
--mean-tokens clipped to 500..8000, as bench/gen_rollouts.py draws them; 0-spans in the mask
of multi-turn samples; float32 log-probs) are written twice, under bench/.data/:

- `nemo_rl/exp_001/train_data_step1.jsonl`, as NeMo-RL's logger writes its training batch
  (NVIDIA-NeMo/RL@7ea279ab: nemo_rl/utils/logger.py:1071-1098): every value a one-element
  list, `token_ids`, `token_loss_mask`, `generation_logprobs`, `prev_logprobs` and
  `advantages` right-padded to the batch's longest row rounded up to 8, `json.dumps` text;
- `slime/1.jsonl`: one slime sample per line (tokens, response_length, loss_mask,
  rollout_log_probs, reward, status, index, group_index), orjson text.

Each rep converts both, each as its own `rollout-cli convert` process (all cores), in
alternating order, with the input read once before the run so the page cache is warm. The
figure is the ratio of the medians and the median of the per-pair ratios of wall time, and
the ratio of the medians of the process tree's CPU time (bench/procmon.py: less swayed by a
shared machine's other load, whose CPU during each run is recorded as foreign_cpu_s). The two outputs are checked to hold the same rows.

    python bench/nemo_rl.py                       # 2000 samples
    python bench/nemo_rl.py --samples 4000 --reps 5

Results: a table on stdout and bench/results/nemo-rl-<samples>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np
import orjson

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import procmon  # noqa: E402
GEN_VERSION = 1


def draw(n: int, group: int, mean_tokens: int, seed: int):
    """Per sample: (prompt ids, response ids, response mask, response log-probs, reward)."""
    rng = np.random.default_rng(seed)
    sigma = 0.6
    mu = np.log(mean_tokens) - sigma**2 / 2
    out = []
    for g in range(-(-n // group)):
        prompt = rng.integers(100, 151936, int(rng.integers(64, 400)))
        for _ in range(min(group, n - g * group)):
            total = int(np.clip(rng.lognormal(mu, sigma), 500, 8000))
            rl = max(1, total - len(prompt))
            resp = rng.integers(100, 151936, rl)
            mask = np.ones(rl, dtype=np.int64)
            if rng.random() < 0.3:  # a tool turn inside the response
                a = int(rng.integers(0, rl))
                mask[a:a + int(rng.integers(1, 200))] = 0
                mask[0] = 1
            lp = (-rng.exponential(0.5, rl)).astype(np.float32) * mask
            out.append((prompt, resp, mask, lp, float(rng.choice([0.0, 1.0]))))
    return out


def write_slime(samples, path: str) -> None:
    groups: dict = {}
    with open(path, "wb") as f:
        for i, (prompt, resp, mask, lp, reward) in enumerate(samples):
            g = groups.setdefault(prompt.tobytes(), len(groups))
            f.write(orjson.dumps({
                "group_index": g, "index": i, "tokens": np.concatenate([prompt, resp]).tolist(),
                "response_length": len(resp), "reward": reward, "loss_mask": mask.tolist(),
                "rollout_log_probs": lp.astype(np.float64).tolist(), "status": "completed",
            }) + b"\n")


def write_nemo_rl(samples, path: str) -> None:
    lengths = [len(p) + len(r) for p, r, _, _, _ in samples]
    width = -(-max(lengths) // 8) * 8
    rewards = np.array([s[4] for s in samples], dtype=np.float32)
    with open(path, "w") as f:
        for i, (prompt, resp, mask, lp, reward) in enumerate(samples):
            n, p = lengths[i], len(prompt)
            ids = np.zeros(width, dtype=np.int64)
            ids[:p], ids[p:n] = prompt, resp
            m = np.zeros(width, dtype=np.int64)
            m[p:n] = mask
            gen = np.zeros(width, dtype=np.float32)
            gen[p:n] = lp
            prev = np.zeros(width, dtype=np.float32)
            prev[1:n] = gen[1:n] - np.float32(0.001)
            adv = np.full(width, np.float32(reward - rewards.mean()), dtype=np.float32)
            f.write(json.dumps({
                "content": [["question", "answer"]], "rewards": [reward], "input_lengths": [n],
                "token_ids": [ids.tolist()], "token_loss_mask": [m.tolist()], "sample_loss_mask": [1.0],
                "advantages": [adv.tolist()], "generation_logprobs": [gen.tolist()], "prev_logprobs": [prev.tolist()],
                "idx": i,
            }) + "\n")


def ensure_inputs(data: str, n: int, group: int, mean_tokens: int, seed: int) -> tuple[str, str]:
    root = os.path.join(data, f"nemo-rl-v{GEN_VERSION}-{n}-{group}-{mean_tokens}-{seed}")
    nemo = os.path.join(root, "nemo_rl", "exp_001", "train_data_step1.jsonl")
    slime = os.path.join(root, "slime", "1.jsonl")
    if not (os.path.exists(nemo) and os.path.exists(slime)):
        t = time.time()
        samples = draw(n, group, mean_tokens, seed)
        for path, write in ((slime, write_slime), (nemo, write_nemo_rl)):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write(samples, path + ".tmp")
            os.replace(path + ".tmp", path)
        print(f"generated in {time.time() - t:.1f}s", file=sys.stderr)
    return os.path.dirname(os.path.dirname(nemo)), os.path.dirname(slime)


def run(src: str, out: str, workers: int | None, idle_wait: float) -> dict:
    """One convert as a whole process tree (bench/procmon.py): wall, CPU and others' CPU."""
    for root, _, names in os.walk(src):
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                while f.read(8 << 20):
                    pass
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["rollout-cli", "convert", src, out, "-q"] + (["--workers", str(workers)] if workers else [])
    procmon.wait_for_idle(idle_wait)
    r = procmon.measure(cmd, pss=False)
    if r["rc"] != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r['output']}")
    return r


def rows_of(out: str) -> dict:
    m = json.load(open(os.path.join(out, "manifest.json")))
    return {k: m["counts"][k] for k in sorted(m["counts"])}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--mean-tokens", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--idle-wait", type=float, default=10.0, help="wait up to this long for a quiet machine before a run")
    ap.add_argument("--data-dir", default=os.path.join(HERE, ".data"))
    a = ap.parse_args(argv)
    nemo, slime = ensure_inputs(a.data_dir, a.samples, a.group_size, a.mean_tokens, a.seed)
    sizes = {k: sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(p) for f in fs)
             for k, p in (("nemo_rl", nemo), ("slime", slime))}
    outs = {k: os.path.join(a.data_dir, f"out-{k}") for k in sizes}
    times: dict[str, list[float]] = {"nemo_rl": [], "slime": []}
    cpu: dict[str, list[float]] = {"nemo_rl": [], "slime": []}
    foreign: dict[str, list[float]] = {"nemo_rl": [], "slime": []}
    for rep in range(a.reps):
        order = ("nemo_rl", "slime") if rep % 2 == 0 else ("slime", "nemo_rl")
        for k in order:
            r = run(nemo if k == "nemo_rl" else slime, outs[k], a.workers, a.idle_wait)
            times[k].append(r["wall_s"])
            cpu[k].append(r["cpu_s"])
            foreign[k].append(r["foreign_cpu_s"])
    same = rows_of(outs["nemo_rl"]) == rows_of(outs["slime"])
    med = {k: statistics.median(v) for k, v in times.items()}
    pair = [x / y for x, y in zip(times["nemo_rl"], times["slime"])]
    result = {
        "samples": a.samples, "group_size": a.group_size, "mean_tokens": a.mean_tokens, "reps": a.reps,
        "workers": a.workers or os.cpu_count(), "bytes": sizes, "seconds": times, "median_s": med,
        "ratio_of_medians": med["nemo_rl"] / med["slime"], "median_pair_ratio": statistics.median(pair),
        "cpu_s": cpu, "foreign_cpu_s": foreign, "cpu_ratio_of_medians": statistics.median(cpu["nemo_rl"]) / statistics.median(cpu["slime"]),
        "same_counts": same, "counts": rows_of(outs["slime"]),
    }
    print(f"{'input':8} {'MB':>8} {'median s':>9} {'CPU s':>7}  runs (wall s)")
    for k in ("nemo_rl", "slime"):
        print(f"{k:8} {sizes[k] / 1e6:8.1f} {med[k]:9.3f} {statistics.median(cpu[k]):7.3f}  "
              f"{' '.join(f'{t:.3f}' for t in times[k])}")
    print(f"ratio nemo_rl/slime: {result['ratio_of_medians']:.3f} (medians), {result['median_pair_ratio']:.3f} "
          f"(median of pairs), CPU {result['cpu_ratio_of_medians']:.3f}; same counts: {same}")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"nemo-rl-{a.samples}.json"), "w") as f:
        json.dump(result, f, indent=1)
    for out in outs.values():
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
