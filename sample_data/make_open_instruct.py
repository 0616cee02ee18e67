"""Write sample_data/open_instruct/: a small made-up open-instruct `--save_traces` folder, deterministically.

The records follow open-instruct's writer (allenai/open-instruct@e6c3044a): per training step,
`save_rollouts_to_disk` appends one `json.dumps(asdict(RolloutRecord(...)))` line per sample
(fields in declaration order, open_instruct/rl_utils.py:29-43, 88-128) to
`{run}_rollouts_{total_samples_written // ROLLOUT_SHARD_SIZE:06d}.jsonl`, and the run's
`{run}_metadata.jsonl` (rl_utils.py:46-64) is written once. Groups whose rewards are all equal
were filtered before saving, so a step holds whole groups of 4 but not always the same number.
An empty completion that stopped is the end-of-sequence token with a `NaN` log-prob
(data_loader.py:802-806); a tool call's output tokens have log-prob 0.0.

The shard size here is 12 records (the writer's is 10000), so that this small run spans shards:
steps 1-2 go to shard 0, steps 3-4 to shard 1; the run is then resumed from its step-2
checkpoint, and the new session, counting from 0 again, appends steps 3-4 to shard 0 once more
(those are the copies read).

    python sample_data/make_open_instruct.py [OUT_DIR]      (default: sample_data/open_instruct)

`record` and `record_line` are the generator the tests use as well.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

RUN = "grpo_demo"
SHARD_SIZE = 12
EOS = 2


def record(rng: random.Random, *, step: int, sample_idx: int, prompt_idx: int, prompt: list[int],
           response: list[int] | None = None, reward: float = 0.0, advantage: float = 0.0,
           finish_reason: str = "stop", logprobs: list[float] | None = None, num_calls: int = 0) -> dict:
    """One asdict(RolloutRecord), as _save_rollouts builds it."""
    resp = response if response is not None else [rng.randrange(3, 50000) for _ in range(rng.randint(2, 6))] + [EOS]
    lps = logprobs if logprobs is not None else [round(-rng.random() * 2, 4) for _ in resp]
    return {
        "step": step, "sample_idx": sample_idx, "prompt_idx": prompt_idx, "prompt_tokens": prompt,
        "response_tokens": resp, "reward": reward, "advantage": advantage, "finish_reason": finish_reason,
        "dataset": "gsm8k", "ground_truth": [rng.randrange(0, 100)],
        "request_info": {"num_calls": num_calls, "timeouts": 0, "tool_errors": "", "tool_outputs": "",
                         "tool_runtimes": 0.0, "tool_calleds": num_calls > 0, "tool_call_stats": [],
                         "rollout_state": {}},
        "logprobs": lps,
    }


def record_line(rec: dict) -> str:
    return json.dumps(rec) + "\n"  # Python's json: NaN written literally


def _step(rng: random.Random, step: int, groups: int) -> list[dict]:
    recs = []
    for g in range(groups):
        prompt = [rng.randrange(3, 50000) for _ in range(rng.randint(4, 8))]
        rewards = [0.0, 1.0, float(rng.random() < 0.5), 1.0]
        mean = sum(rewards) / 4
        std = (sum((r - mean) ** 2 for r in rewards) / 4) ** 0.5
        for k, r in enumerate(rewards):
            i = g * 4 + k
            kw = {}
            if step == 1 and i == 1:  # an empty completion that stopped
                kw = {"response": [EOS], "logprobs": [float("nan")]}
            elif step == 2 and i == 2:  # a tool call: its output tokens have log-prob 0.0
                resp = [rng.randrange(3, 50000) for _ in range(6)] + [EOS]
                kw = {"response": resp, "logprobs": [-0.3, -0.2, 0.0, 0.0, 0.0, -0.5, -0.1], "num_calls": 1}
            elif step == 3 and i == 3:
                kw = {"finish_reason": "length"}
            recs.append(record(rng, step=step, sample_idx=i, prompt_idx=g, prompt=prompt, reward=r,
                               advantage=round((r - mean) / (std + 1e-8), 6), **kw))
    return recs


def write(out: Path) -> None:
    rng = random.Random(6)
    out.mkdir(parents=True, exist_ok=True)
    for f in out.glob(f"{RUN}_*.jsonl"):
        f.unlink()
    (out / f"{RUN}_metadata.jsonl").write_text(json.dumps(
        {"run_name": RUN, "git_commit": "e6c3044aa620", "model_name": "Qwen/Qwen3-0.6B",
         "timestamp": "2026-12-04T00:00:00+00:00"}) + "\n")
    # steps 2 and 4 lost a group to the equal-reward filter
    plan = {1: 2, 2: 1, 3: 2, 4: 1}
    steps = {s: _step(rng, s, g) for s, g in plan.items()}
    resumed = {s: _step(rng, s, plan[s]) for s in (3, 4)}

    def session(order: list[int], data: dict) -> None:
        written = 0
        for s in order:
            shard = written // SHARD_SIZE
            with open(out / f"{RUN}_rollouts_{shard:06d}.jsonl", "a") as f:
                f.writelines(record_line(r) for r in data[s])
            written += len(data[s])

    session([1, 2, 3, 4], steps)
    session([3, 4], resumed)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path(__file__).parent / "open_instruct",
                        help="the folder to write (default: sample_data/open_instruct/)")
    args = parser.parse_args()
    write(args.out)
