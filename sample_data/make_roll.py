"""Write sample_data/roll/: a made-up ROLL agentic run's rollout mock dumps
(`rollout_mock: {enable: true, mode: dump, dump_dir: rollout_mock}`), deterministically.

Each step's batch is built as ROLL's env managers build their rows (alibaba/ROLL@8eb27cc2dc34):
`formulate_rollouts` of roll/pipeline/agentic/env_manager/traj_env_manager.py:307-392 (one row
per trajectory, every turn in it) and step_env_manager.py:67-148 (one row per turn): token ids
right-padded with the pad id to `sequence_length`, `attention_mask`, `response_mask` (1 on
generated tokens), `prompt_mask`, `position_ids`, `scores` (0 but the last real token, which
holds the episode's or the turn's reward), `infer_logprobs` (`[0] * prompt + logprobs`,
padded, then `[:, 1:]`), and the non-tensor columns as object arrays, with `traj_group_id` and
`traj_id` (traj_env_manager.py:133-136). The scheduler concatenates the step's rows and pickles
the `DataProto` (roll/distributed/scheduler/rollout_scheduler.py:684-695,
rollout_mock_mixin.py:133-157) to `{dump_dir}/{train,val}/step_{N:06d}.pkl`; the pickling is
`sample_data/pickled_writers.py`'s `write_roll`, byte-shaped as ROLL's own (numpy 1 paths, the
TensorDict not consolidated). Needs torch and tensordict (the test extra).

    python sample_data/make_roll.py [OUT_DIR]      (default: sample_data/roll)

`rollout(...)` and `agentic_batch(...)` are the generator the tests use as well.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PAD = 151643  # the pad id of the made-up tokenizer (Qwen's, also its end of text)


def _writers():
    """sample_data/pickled_writers.py, imported from beside this script."""
    if "pickled_writers" not in sys.modules:
        spec = importlib.util.spec_from_file_location("pickled_writers", Path(__file__).resolve().parent / "pickled_writers.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["pickled_writers"] = mod  # its dataclasses look their module up
        spec.loader.exec_module(mod)
    return sys.modules["pickled_writers"]


@dataclass
class Turn:
    prompt: list[int]  # the turn's prompt (the observation, or the whole first prompt)
    response: list[int]
    logprobs: list[float]  # one per response token
    reward: float = 0.0


@dataclass
class Rollout:
    tag: str
    group_id: int  # the env group (the prompt group's env config)
    env_id: int
    episode_id: int
    group_seed: int
    turns: list[Turn] = field(default_factory=list)

    @property
    def traj_group_id(self) -> str:
        return f"{self.tag}_{self.group_id}_{self.episode_id}_{self.group_seed}"

    @property
    def traj_id(self) -> str:
        return f"{self.traj_group_id}_{self.env_id}"


def rollout(rng: random.Random, tag: str, group_id: int, env_id: int, episode_id: int, turns: list[tuple[int, int]],
            rewards: list[float], group_seed: int = 1000) -> Rollout:
    """A rollout of `turns` [(prompt tokens, response tokens)], each turn's reward given."""
    r = Rollout(tag, group_id, env_id, episode_id, group_seed)
    for (n_prompt, n_resp), reward in zip(turns, rewards):
        r.turns.append(Turn([rng.randrange(10, 50000) for _ in range(n_prompt)], [rng.randrange(10, 50000) for _ in range(n_resp)],
                            [-round(rng.random() * 3, 4) for _ in range(n_resp)], reward))
    return r


def _row(turns: list[Turn], score: float, seq_len: int) -> dict[str, np.ndarray]:
    tokens = [t for tr in turns for t in tr.prompt + tr.response]
    resp = [m for tr in turns for m in [0] * len(tr.prompt) + [1] * len(tr.response)]
    lps = [v for tr in turns for v in [0.0] * len(tr.prompt) + tr.logprobs]
    n = len(tokens)
    first = resp.index(1)

    def pad(values, value):
        return (values + [value] * seq_len)[:seq_len]

    scores = [0.0] * n
    scores[-1] = score
    return {"input_ids": np.array(pad(tokens, PAD), np.int64), "attention_mask": np.array(pad([1] * n, 0), np.int64),
            "position_ids": np.array(pad(list(range(n)), 0), np.int64), "response_mask": np.array(pad(resp, 0), bool),
            "prompt_mask": np.array(pad([1] * first + [0] * (n - first), 0), bool),
            "scores": np.array(pad(scores, 0.0), np.float32), "infer_logprobs": np.array(pad(lps, 0.0)[1:], np.float32)}


def _objects(values: list) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        arr[i] = v
    return arr


def agentic_batch(rollouts: list[Rollout], seq_len: int, step_wise: bool = False,
                  logprobs: bool = True) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(batch, non_tensor_batch) of a step: a row per rollout (TrajEnvManager) or, `step_wise`,
    a row per turn (StepEnvManager), in order."""
    rows, nt = [], {k: [] for k in ("env_ids", "group_ids", "tags", "step_scores", "episode_scores")}
    if step_wise:
        nt.update(state_hash=[], step=[])
    nt.update(traj_group_id=[], traj_id=[])
    for r in rollouts:
        episode = sum(t.reward for t in r.turns)
        parts = [(k, [t], t.reward) for k, t in enumerate(r.turns)] if step_wise else [(None, r.turns, episode)]
        for k, turns, score in parts:
            rows.append(_row(turns, score, seq_len))
            nt["env_ids"].append(r.env_id)
            nt["group_ids"].append(r.group_id)
            nt["tags"].append(r.tag)
            # a trajectory row's step scores: an object array (np.array([scores], dtype=object)'s row)
            nt["step_scores"].append(turns[0].reward if step_wise else _objects([t.reward for t in r.turns]))
            nt["episode_scores"].append(episode)
            if step_wise:
                nt["state_hash"].append(hashlib.md5(np.array(turns[0].prompt, np.int64).tobytes()).hexdigest())
                nt["step"].append(k)
            nt["traj_group_id"].append(r.traj_group_id)
            nt["traj_id"].append(r.traj_id)
    batch = {k: np.stack([row[k] for row in rows]) for k in rows[0]}
    if not logprobs:
        del batch["infer_logprobs"]
    return batch, {k: _objects(v) for k, v in nt.items()}


def write(dump_dir: Path, step: int, rollouts: list[Rollout], seq_len: int, mode: str = "train", **kw) -> Path:
    batch, nt = agentic_batch(rollouts, seq_len, **kw)
    return _writers().write_roll(dump_dir, step, batch, nt, {"metrics": {"env/response_length": 4.0}}, mode=mode)


def build(out: Path) -> None:
    """Steps 1 and 2 of a training run (2 prompt groups x 3 rollouts; step 2 step-wise) and the
    validation at step 2."""
    rng = random.Random(20251205)
    dump = out / "rollout_mock"
    step1 = [rollout(rng, "sokoban", g, g * 3 + e, 0, [(6, 3), (2, 2)] if e != 1 else [(6, 4)],
                     [0.0, float(e == 0)] if e != 1 else [0.5]) for g in range(2) for e in range(3)]
    write(dump, 1, step1, 24)
    step2 = [rollout(rng, "sokoban", g, g * 3 + e, 1, [(5, 2), (2, 3)], [0.25, float(e % 2)]) for g in range(2) for e in range(3)]
    write(dump, 2, step2, 16, step_wise=True)
    val = [rollout(rng, "sokoban_val", 0, e, 0, [(6, 3)], [float(e == 1)], group_seed=7) for e in range(3)]
    write(dump, 2, val, 16, mode="val")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path(__file__).resolve().parent / "roll",
                        help="the folder to write (default: sample_data/roll/)")
    args = parser.parse_args()
    build(args.out)
