#!/usr/bin/env python
"""Write small NeMo-RL and miles dumps, shaped as each framework's writer shapes them.

Written from the writers at the commits docs/frameworks.md names (not copied from them):
- NeMo-RL (NVIDIA-NeMo/RL@7ea279ab): the GRPO loop's `log_data` (nemo_rl/algorithms/grpo.py:
  3632-3654) written by `Logger.log_batched_dict_as_jsonl` (nemo_rl/utils/logger.py:1071-1098):
  one batch slice of one row per line, so every value but `idx` is a one-element list; the
  padded rows are right-padded to the batch's longest row rounded up to a multiple of 8. The
  validation log (grpo.py:4016-4021) holds each conversation's role/content messages and reward.
- miles (radixark/miles@31f1ca96): `save_debug_rollout_data` (miles/ray/rollout/debug_data.py:
  103-117): `torch.save({"rollout_id", "metadata", "samples": [Sample.to_dict()]})`, the
  dashboard Parquet mirror (debug_data.py:36-72, polars, row groups of 8) and the trajectory
  JSONL of samples with `metadata["messages"]`. `adapter` and `reward_spec` are frozen
  dataclasses of `miles.utils.types`, pickled by class reference.

Deterministic: a fixed seed, no clocks. Usage:
    python sample_data/make_framework_data.py [--out DIR]   # DIR defaults to this folder

Written under DIR:
    nemo_rl/exp_001/train_data_step{1,2}.jsonl, nemo_rl/exp_001/val_data_step2.jsonl
    miles/rollout_data/{1,2,eval_2}.pt, miles/dashboard_columns/rollout_{1,2,eval_2}.parquet,
    miles/trajectory/2.jsonl
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SEED = 20261203
PAD_ID = 0
DIVISIBLE_BY = 8  # policy.make_sequence_length_divisible_by


@dataclass
class Turn:
    tokens: list[int]
    generated: bool  # an assistant message the policy generated (it carries generation log-probs)
    logprobs: list[float] | None = None


@dataclass
class Conversation:
    """One NeMo-RL row: the prompt turns, then the turns after it."""

    prompt: list[int]
    turns: list[Turn]
    reward: float
    keep: bool = True  # sample_loss_mask 1.0; 0.0 marks a removed row
    text: list[str] = field(default_factory=list)


def random_conversations(rng: random.Random, prompts: int, per_prompt: int, multi_turn: bool = False) -> list[Conversation]:
    """`prompts` groups of `per_prompt` rows; the rows of a prompt are consecutive (as
    `repeat_interleave` lays them out) and share its tokens."""
    out = []
    for p in range(prompts):
        prompt = [rng.randrange(1, 50000) for _ in range(rng.randint(4, 10))]
        for _ in range(per_prompt):
            turns = [_gen(rng, rng.randint(1, 8))]
            if multi_turn and rng.random() < 0.5:
                turns += [Turn([rng.randrange(1, 50000) for _ in range(rng.randint(1, 4))], False), _gen(rng, rng.randint(1, 5))]
            out.append(Conversation(prompt, turns, rng.choice([0.0, 1.0, 0.5]), rng.random() > 0.1,
                                    [f"question {p}", f"answer {len(out)}"]))
    return out


def _gen(rng: random.Random, n: int) -> Turn:
    lp = np.array([-rng.random() * 3 for _ in range(n)], dtype=np.float32)
    return Turn([rng.randrange(1, 50000) for _ in range(n)], True, lp.tolist())


def nemo_rl_batch(rows: list[Conversation], seed: int = 0) -> dict:
    """The batch the GRPO loop logs, as arrays: flattened message logs right-padded to the
    longest row rounded up to DIVISIBLE_BY; advantages (r - leave-one-out mean) broadcast over
    every position; trainer log-probs near the generation log-probs, on every position but 0."""
    rng = np.random.default_rng(seed)
    lengths = [len(r.prompt) + sum(len(t.tokens) for t in r.turns) for r in rows]
    width = -(-max(lengths) // DIVISIBLE_BY) * DIVISIBLE_BY
    b = len(rows)
    ids = np.full((b, width), PAD_ID, dtype=np.int64)
    mask = np.zeros((b, width), dtype=np.int64)
    gen = np.zeros((b, width), dtype=np.float32)
    for i, r in enumerate(rows):
        ids[i, :len(r.prompt)] = r.prompt
        pos = len(r.prompt)
        for t in r.turns:
            ids[i, pos:pos + len(t.tokens)] = t.tokens
            if t.generated:
                mask[i, pos:pos + len(t.tokens)] = 1
                gen[i, pos:pos + len(t.tokens)] = t.logprobs
            pos += len(t.tokens)
    rewards = np.array([r.reward for r in rows], dtype=np.float32)
    adv = np.zeros(b, dtype=np.float32)
    for i, r in enumerate(rows):
        mates = [j for j, s in enumerate(rows) if s.prompt == r.prompt and j != i]
        adv[i] = rewards[i] - (rewards[mates].mean() if mates else 0.0)
    prev = (gen + rng.normal(0, 0.01, gen.shape)).astype(np.float32) * (mask > 0)
    prev[:, 0] = 0.0
    return {
        "content": [r.text for r in rows],
        "rewards": rewards,
        "input_lengths": np.array(lengths, dtype=np.int64),
        "token_ids": ids,
        "token_loss_mask": mask,
        "sample_loss_mask": np.array([1.0 if r.keep else 0.0 for r in rows], dtype=np.float32),
        "advantages": np.repeat(adv[:, None], width, axis=1),
        "generation_logprobs": gen,
        "prev_logprobs": prev,
    }


def write_batched_jsonl(batch: dict, path: Path) -> None:
    """As the logger writes a batched dict: each row is the batch sliced to that one row, its
    arrays turned to lists, and `idx` added."""
    n = len(next(iter(batch.values())))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in range(n):
            sample = {k: v[i:i + 1] for k, v in batch.items()}
            sample = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in sample.items()}
            f.write(json.dumps({**sample, "idx": i}, default=str) + "\n")


def write_nemo_rl(root: Path) -> None:
    rng = random.Random(SEED)
    exp = root / "nemo_rl" / "exp_001"
    for step, (prompts, n, multi) in {1: (3, 4, False), 2: (2, 3, True)}.items():
        write_batched_jsonl(nemo_rl_batch(random_conversations(rng, prompts, n, multi), seed=step), exp / f"train_data_step{step}.jsonl")
    convs = random_conversations(rng, 2, 2)
    val = {"content": [[{"role": "user", "content": c.text[0]}, {"role": "assistant", "content": c.text[1]}] for c in convs],
           "rewards": [c.reward for c in convs]}
    write_batched_jsonl(val, exp / "val_data_step2.jsonl")


# --------------------------------------------------------------------------------------- miles


def miles_types() -> types.ModuleType:
    """Stand-ins for miles.utils.types' frozen dataclasses, registered under that module name so
    that pickle refers to them as miles does."""
    name = "miles.utils.types"
    if name in sys.modules:
        return sys.modules[name]
    mod = types.ModuleType(name)

    @dataclass(frozen=True)
    class AdapterRef:
        name: str
        slot: int

    @dataclass(frozen=True)
    class RewardSpec:
        rm_type: str | None = None
        custom_rm_path: str | None = None

    for cls in (AdapterRef, RewardSpec):
        cls.__module__ = name
        cls.__qualname__ = cls.__name__
        setattr(mod, cls.__name__, cls)
    for parent in ("miles", "miles.utils"):
        sys.modules.setdefault(parent, types.ModuleType(parent))
    sys.modules[name] = mod
    return mod


def miles_sample(rng: random.Random, group: int, index: int, adapter: bool) -> dict:
    """One `Sample.to_dict()` of miles: slime's fields plus its own (adapter, reward_spec,
    routing_key, opd_reverse_kl, rollout_indexer_topk), status as its value."""
    mt = miles_types()
    prompt = [rng.randrange(1, 50000) for _ in range(rng.randint(3, 6))]
    rl = rng.randint(1, 6)
    tokens = prompt + [rng.randrange(1, 50000) for _ in range(rl)]
    return {
        "group_index": group, "index": index, "rollout_id": None, "prompt": f"question {group}", "tokens": tokens,
        "multimodal_inputs": None, "multimodal_train_inputs": None, "response": f"answer {index}", "response_length": rl,
        "label": "42", "reward": rng.choice([0.0, 1.0]), "loss_mask": [1] * rl, "weight_versions": ["3"],
        "rollout_log_probs": np.array([-rng.random() for _ in range(rl)], dtype=np.float32).tolist(),
        "rollout_routed_experts": None, "rollout_indexer_topk": None, "remove_sample": False, "teacher_log_probs": None,
        "opd_reverse_kl": None, "status": rng.choice(["completed", "completed", "truncated"]),
        "metadata": {"messages": [{"role": "user", "content": f"question {group}"}]} if index % 3 == 0 else {},
        "generate_function_path": None, "train_metadata": None,
        "adapter": mt.AdapterRef("lora-a", group % 2) if adapter else None,
        "reward_spec": mt.RewardSpec("math", None) if adapter else None,
        "routing_key": f"k{group}", "non_generation_time": 0.0,
        "spec_info": {"spec_accept_token_num": 0, "spec_draft_token_num": 0, "spec_verify_ct": 0, "completion_token_num": rl},
        "prefix_cache_info": {"cached_tokens": 0, "total_prompt_tokens": len(prompt)},
    }


def write_miles_step(root: Path, rollout_id: int, samples: list[dict], evaluation: bool = False) -> None:
    """The three files of one step, as save_debug_rollout_data writes them."""
    import polars as pl
    import torch

    stem = ("eval_" if evaluation else "") + str(rollout_id)
    with_messages = [s for s in samples if s["metadata"].get("messages") is not None]
    if with_messages:
        (root / "trajectory").mkdir(parents=True, exist_ok=True)
        rows = [dict(sample_index=s["index"], group_index=s["group_index"], status=s["status"],
                     reward=s["reward"] if isinstance(s["reward"], (int, float)) else None, prompt=s["prompt"],
                     messages=s["metadata"]["messages"]) for s in with_messages]
        (root / "trajectory" / f"{stem}.jsonl").write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))
        for s in samples:
            s["metadata"].pop("messages", None)
    schema = dict(sample_index=pl.Int32, response_length=pl.Int32, total_length=pl.Int32, tokens=pl.List(pl.Int32),
                  loss_mask=pl.List(pl.Int8), rollout_log_probs=pl.List(pl.Float32))
    frame = pl.DataFrame([dict(sample_index=s["index"], response_length=s["response_length"], total_length=len(s["tokens"]),
                               tokens=list(s["tokens"]), loss_mask=s["loss_mask"], rollout_log_probs=s["rollout_log_probs"])
                          for s in samples], schema=schema)
    (root / "dashboard_columns").mkdir(parents=True, exist_ok=True)
    frame.write_parquet(root / "dashboard_columns" / f"rollout_{stem}.parquet", row_group_size=8)
    (root / "rollout_data").mkdir(parents=True, exist_ok=True)
    torch.save(dict(rollout_id=rollout_id, metadata={"num_samples": len(samples)}, samples=samples),
               root / "rollout_data" / f"{stem}.pt")


def write_miles(root: Path) -> None:
    rng = random.Random(SEED + 1)
    base = root / "miles"
    for step, adapter in ((1, False), (2, True)):
        samples = [miles_sample(rng, step * 10 + g, step * 100 + g * 3 + k, adapter) for g in range(3) for k in range(3)]
        write_miles_step(base, step, samples)
    write_miles_step(base, 2, [miles_sample(rng, 90 + g, 900 + g, True) for g in range(2)], evaluation=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = ap.parse_args(argv)
    write_nemo_rl(args.out)
    write_miles(args.out)


if __name__ == "__main__":
    main()
