#!/usr/bin/env python
"""One step's pickled batch of SkyRL, verl and ROLL: the restricted unpickler
(rollout_cli.inputs.pickled.load_pickle), and the whole reader (``read_input`` over the file,
every chunk consumed: unpickling plus the mapping onto samples), each against the frameworks'
own way back, a plain
``pickle.load`` with stand-in classes whose ``__setstate__`` ``torch.load``s the embedded tensor
bytes (tensordict from PyPI imported), as sample_data/pickled_writers.py's
``load_with_standins`` does.

Each file is written by sample_data/pickled_writers.py: B rows of a prompt of P and a response
of R tokens (int64 ids and masks, float32 log-probs and advantages; SkyRL also a bfloat16
tensor; verl and ROLL object arrays in ``non_tensor_batch``: strings, dicts, message lists, and
ROLL's object arrays of object arrays), in each framework's own layout (ROLL: prompt and
response in one right-padded sequence, a full-width ``response_mask`` 0 on the prompt, and
``infer_logprobs`` one narrower, shifted by one). Runs alternate (ours, theirs, ours, ...)
from a warm page cache; prints, per framework, the median wall time of each for the unpickler ("unpickle") and
the whole reader ("reader"), and the speed ratio (theirs / ours: 1.0 is as fast, the target is
>= 0.8).

Usage: python bench/pickled.py [--rows B] [--prompt P] [--response R] [--runs N] [--quick] [--out FILE]
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "sample_data"))

import pickled_writers as W  # noqa: E402

from rollout_cli.inputs.discover import discover  # noqa: E402
from rollout_cli.inputs.pickled import load_pickle  # noqa: E402
from rollout_cli.inputs.registry import read_input  # noqa: E402


def _arrays(rng, b: int, p: int, r: int) -> dict[str, np.ndarray]:
    s = p + r
    return {
        "input_ids": rng.integers(0, 150_000, (b, s)),
        "attention_mask": np.ones((b, s), np.int64),
        "position_ids": np.tile(np.arange(s), (b, 1)),
        "response_mask": np.ones((b, r), np.int64),
        "log_probs": rng.standard_normal((b, r)).astype(np.float32),
        "advantages": rng.standard_normal((b, r)).astype(np.float32),
    }


def write_files(d: Path, b: int, p: int, r: int) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    arr = _arrays(rng, b, p, r)
    skyrl = W.write_skyrl(d / "skyrl", 1, {"sequences": arr["input_ids"], "attention_mask": arr["attention_mask"],
                                           "response_mask": arr["response_mask"], "loss_mask": arr["response_mask"].astype(np.float32),
                                           "rollout_logprobs": arr["log_probs"], "advantages": arr["advantages"],
                                           "action_log_probs": arr["log_probs"]},
                          {"policy_prompt_boundaries": [(i, i + 8) for i in range(0, b, 8)], "pad_size": 0, "response_length": r},
                          bf16=["action_log_probs"])
    verl_nt = {"data_source": ["openai/gsm8k"] * b,
               "reward_model": [{"ground_truth": str(i), "style": "rule"} for i in range(b)],
               "raw_prompt": [[{"role": "user", "content": f"question {i // 8} " * 20}] for i in range(b)],
               "uid": [f"{i // 8:08x}-uid" for i in range(b)], "index": np.arange(b)}
    verl = W.write_verl(d / "verl", 1, {"prompts": arr["input_ids"][:, :p], "responses": arr["input_ids"][:, p:],
                                       **arr, "rm_scores": np.zeros((b, r), np.float32)},
                        verl_nt, {"global_steps": 0}, gbs=b // 8, n=8, prompt_length=p, response_length=r)
    roll_nt = {"traj_group_id": [f"g{i // 8}" for i in range(b)], "traj_id": [f"t{i}" for i in range(b)],
               "messages": [np.array([np.array([{"role": "user", "content": "hi " * 20}], dtype=object),
                                      np.array(["tool", 3], dtype=object)], dtype=object) for _ in range(b)],
               "env_ids": np.arange(b)}
    s = p + r
    roll = W.write_roll(d / "roll", 1, {"input_ids": arr["input_ids"], "attention_mask": arr["attention_mask"],
                                       "position_ids": arr["position_ids"],
                                       "response_mask": np.concatenate([np.zeros((b, p), np.int64), arr["response_mask"]], 1),
                                       "infer_logprobs": rng.standard_normal((b, s - 1)).astype(np.float32),
                                       "scores": rng.standard_normal((b, s)).astype(np.float32)},
                        roll_nt, {"global_step": 1})
    return {"skyrl": skyrl, "verl": verl, "roll": roll}


def _time(fn) -> float:
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    del out
    return dt


def read_all(inp) -> int:
    """The whole reader: every chunk of the file consumed; the rows mapped (a row that is a
    problem not counted)."""
    return sum(len(chunk) - len(chunk.problems) for chunk in read_input(inp))


def _pair(ours_fn, theirs_fn, runs: int) -> dict:
    ours, theirs = [], []
    for _ in range(runs):
        ours.append(_time(ours_fn))
        theirs.append(_time(theirs_fn))
    o, t = statistics.median(ours), statistics.median(theirs)
    return {"ours_s": o, "theirs_s": t, "speed_ratio": round(t / o, 3)}


def measure(path: Path, runs: int) -> dict:
    """The unpickler's figures (top level) and the whole reader's ("reader"), against the same
    baseline."""
    (inp,), _, _ = discover([str(path)])
    load_pickle(path), W.load_with_standins(path)  # warm: page cache, imports (torch, tensordict)
    rows = read_all(inp)
    out = {"bytes": path.stat().st_size, **_pair(lambda: load_pickle(path), lambda: W.load_with_standins(path), runs)}
    out["reader"] = {"rows": rows, **_pair(lambda: read_all(inp), lambda: W.load_with_standins(path), runs)}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--response", type=int, default=3072)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="a smoke test: 32 rows of 64 + 192 tokens, 2 runs")
    ap.add_argument("--out", help="also write the results as JSON here")
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.prompt, args.response, args.runs = 32, 64, 192, 2
    with tempfile.TemporaryDirectory() as tmp:
        files = write_files(Path(tmp), args.rows, args.prompt, args.response)
        results = {name: measure(path, args.runs) for name, path in files.items()}
    report = {"rows": args.rows, "prompt": args.prompt, "response": args.response, "runs": args.runs, "results": results}
    for name, r in results.items():
        for what, x in (("unpickle", r), ("reader", r["reader"])):
            print(f"{name:6s} {what:8s} {r['bytes'] / 2**20:8.1f} MiB  ours {x['ours_s'] * 1e3:8.1f} ms  "
                  f"pickle.load+torch.load {x['theirs_s'] * 1e3:8.1f} ms  speed ratio {x['speed_ratio']:.2f}x")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
