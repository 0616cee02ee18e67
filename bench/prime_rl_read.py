#!/usr/bin/env python3
"""prime-rl traces reader throughput: one generated `traces.jsonl` step, read three ways.

* `orjson`: orjson.loads of every line, nothing else (the parse floor);
* `reader`: the registry's prime_rl reader over the whole file (parse, branch walk, numpy
  arrays per sample, columnar chunks), in this process;
* `convert`: `rollout-cli convert` of the run folder with --workers 1 and with the default
  workers (byte ranges in parallel), as a process.

Wall time and, where it can be counted, CPU time (less sensitive to other work on the machine);
each the best of --reps.

Episodes are agentic: 3-8 turns (tool results between sampled answers), ~15% forked into two
branches, prompt 200-1500 tokens, answers 50-600, compact logprobs as floats (most of the bytes),
advantages on sampled tokens as `effective` has them. Written with the generator of
sample_data/make_prime_rl.py, which follows verifiers' `Episode.to_record()`.

    python bench/prime_rl_read.py --size-mb 300
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _gen():
    spec = importlib.util.spec_from_file_location("make_prime_rl", os.path.join(ROOT, "sample_data", "make_prime_rl.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def generate(path: str, size_mb: int, seed: int = 1) -> int:
    import random

    gen = _gen()
    rng, npr = random.Random(seed), np.random.default_rng(seed)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    written = episodes = 0
    with open(path, "wb") as f:
        while written < size_mb << 20:
            task, gid = gen.task_record(episodes // 8), gen.group_uuid(rng)
            for _ in range(8):
                def toks(n):
                    return npr.integers(100, 151936, n).tolist()

                nodes = [gen.node("user", "q", toks(int(npr.integers(200, 1500))))]
                parent = 0
                fork = npr.random() < 0.15
                for turn in range(int(npr.integers(3, 9))):
                    n = int(npr.integers(50, 600))
                    lp = np.round(-npr.exponential(0.3, n), 6).tolist()
                    nodes.append(gen.node("assistant", "a", toks(n + 3), parent=parent, sampled=True,
                                          mask=[False] * 3 + [True] * n, logprobs=lp, advantages=[0.25] * n))
                    parent = len(nodes) - 1
                    if fork and turn == 1:
                        nodes.append(gen.node("assistant", "b", toks(n + 3), parent=parent - 1, sampled=True,
                                              mask=[False] * 3 + [True] * n, logprobs=lp, advantages=[0.25] * n))
                    nodes.append(gen.node("tool", "r", toks(int(npr.integers(20, 300))), parent=parent))
                    parent = len(nodes) - 1
                nodes.pop()  # end on an answer
                tr = gen.trace(rng, task, nodes, rewards={"r": {"score": float(npr.integers(0, 2)), "weight": 1.0}})
                line = gen.dumps([gen.episode(rng, task, gid, 1, [tr])])
                f.write(line)
                written += len(line)
                episodes += 1
    return episodes


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and its finished children)."""
    import resource

    def cpu():
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    t, c = time.perf_counter(), cpu()
    fn()
    return time.perf_counter() - t, cpu() - c


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=300)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    data = os.path.join(HERE, ".data", f"prime-rl-{args.size_mb}mb")
    path = os.path.join(data, "run", "rollouts", "step_1", "train", "effective", "traces.jsonl")
    if not os.path.exists(path):
        generate(path, args.size_mb)
    size = os.path.getsize(path)
    sys.path.insert(0, ROOT)
    import orjson

    from rollout_cli.inputs.discover import discover
    from rollout_cli.inputs.registry import read_input

    def parse_only():
        with open(path, "rb") as f:
            for line in f:
                orjson.loads(line)

    samples = []

    def reader():
        (inp,), _, _ = discover([path])
        samples.append(sum(len(c) for c in read_input(inp)))

    def convert(workers):
        out = os.path.join(data, "out")
        shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-m", "rollout_cli", "convert", os.path.join(data, "run"), out, "-q"]
        if workers:
            cmd += ["--workers", str(workers)]
        subprocess.run(cmd, check=True, env=dict(os.environ, PYTHONPATH=ROOT))

    res = {"bytes": size, "lines": sum(1 for _ in open(path, "rb")), "cores": os.cpu_count(),
           "load_before": os.getloadavg()[0]}
    for name, fn in (("orjson", parse_only), ("reader", reader), ("convert --workers 1", lambda: convert(1)),
                     ("convert", lambda: convert(None))):
        runs = [timed(fn) for _ in range(args.reps)]
        best, cpu = min(r[0] for r in runs), min(r[1] for r in runs)
        res[name] = {"seconds": round(best, 3), "mb_per_s": round(size / 1e6 / best, 1)}
        line = f"{name:22s} {best:7.2f} s  {size / 1e6 / best:7.1f} MB/s"
        if name != "convert":  # a pool's workers are no children this process waits for: their CPU is not counted
            res[name].update(cpu_seconds=round(cpu, 3), mb_per_cpu_s=round(size / 1e6 / cpu, 1))
            line += f"   cpu {cpu:7.2f} s  {size / 1e6 / cpu:7.1f} MB/cpu-s"
        print(line, flush=True)
    res["samples"] = samples[-1]
    res["load_after"] = os.getloadavg()[0]  # other work on the machine: figures are best-of-reps
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"prime-rl-read-{args.size_mb}mb.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
