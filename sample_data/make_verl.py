"""Write sample_data/verl/: a small made-up verl rollout-skip cache, deterministically.

With `skip.rollout.enable=true` and `skip.rollout.steps=[...]`, verl's `RolloutSkip.prepare_data`
pickles the agent loop's output for each listed step to
`{dump_dir}/{experiment}_{project}/GBS{gbs}_N{n}_in{P}_out{R}/{step}/gen_batch.dp` and writes
`meta.json` = `{"global_steps": step}` beside it (verl-project/verl@1dda039b9c63:
verl/utils/skip/rollout_skip.py:95-122). The batch is built here as the agent loop builds it
(verl/experimental/agent_loop/agent_loop.py:700-830, 1026-1118): prompts left-padded to P,
responses right-padded to R, `response_mask` 1 on generated tokens and 0 on tool tokens and
padding, `rollout_log_probs` 0-padded, the non-tensor `__num_turns__` and the extra fields
(`turn_scores`, `tool_rewards`, `min_global_steps`, `max_global_steps`, `extras`, and the rollout
server's `global_steps`: the weights' version, step - 1 in this synchronous run). With reward-loop
workers (verl's default) there is no `uid` and no `rm_scores`: step 2 is written so; step 4 was
scored in the agent loop (`rm_scores`) without reward-loop workers, so its input's non-tensor
batch (`uid`, `data_source`, ...) is there too. The pickling is the writer's own
(`sample_data/pickled_writers.py`: DataProto.__getstate__ with a consolidated TensorDict).

    python sample_data/make_verl.py [OUT_DIR]      (default: sample_data/verl)

`layout(groups, ...)` is the generator the tests use as well: `groups` is a list of prompt
groups, each `(prompt_ids, [(response_ids, response_mask, rollout_log_probs, score), ...])`.
"""
from __future__ import annotations

import argparse
import random
import sys
import uuid
from pathlib import Path

import numpy as np

PAD = 0  # verl pads with the tokenizer's pad id (agent_loop.py:706-709)
EOS = 2


def layout(groups: list, prompt_len: int, response_len: int, step: int, *, uids: bool = False,
           scores: bool = False, seed: int = 0) -> tuple[dict, dict, dict]:
    """(tensors, non_tensor, meta_info) of the agent loop's output for these prompt groups."""
    rows = [(p, r) for p, rollouts in groups for r in rollouts]
    n = len(rows)
    P, R = prompt_len, response_len
    prompts = np.full((n, P), PAD, np.int64)
    responses = np.full((n, R), PAD, np.int64)
    attention = np.zeros((n, P + R), np.int64)
    rmask = np.zeros((n, R), np.int64)
    lp = np.zeros((n, R), np.float32)
    rm = np.zeros((n, R), np.float32)
    for i, (p, (resp, mask, lps, score)) in enumerate(rows):
        prompts[i, P - len(p):] = p
        responses[i, :len(resp)] = resp
        attention[i, P - len(p):P + len(resp)] = 1
        rmask[i, :len(mask)] = mask
        lp[i, :len(lps)] = lps
        rm[i, len(resp) - 1] = score
    position = np.clip(np.cumsum(attention, axis=1) - 1, 0, None)
    tensors = {"prompts": prompts, "responses": responses, "response_mask": rmask,
               "input_ids": np.concatenate([prompts, responses], axis=1), "attention_mask": attention,
               "position_ids": position, "rollout_log_probs": lp}
    if scores:
        tensors["rm_scores"] = rm

    def objects(values):
        a = np.empty(n, dtype=object)
        a[:] = values
        return a

    version = step - 1  # the weights the rollout server holds at step N of a synchronous run
    non_tensor = {"__num_turns__": np.array([2 + 2 * int(0 in m) for _, (_, m, _, _) in rows], np.int32)}
    if uids:  # the input batch's own non-tensor keys, kept without reward-loop workers
        rng = random.Random(seed)
        ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in groups]
        per = [ids[g] for g, (_, rollouts) in enumerate(groups) for _ in rollouts]
        non_tensor.update(data_source=objects(["openai/gsm8k"] * n), uid=objects(per),
                          index=objects([g for g, (_, rollouts) in enumerate(groups) for _ in rollouts]),
                          agent_name=objects(["single_turn_agent"] * n))
    non_tensor.update(
        turn_scores=objects([[] for _ in rows]), tool_rewards=objects([[] for _ in rows]),
        global_steps=objects([version] * n), min_global_steps=objects([version] * n),
        max_global_steps=objects([version] * n), extras=objects([None] * n),
    )
    meta_info = {"timing": {"agent_loop/generate_sequences/mean": 0.25, "agent_loop/tool_calls/mean": 0.0}}
    if scores:
        meta_info["reward_extra_keys"] = []
    return tensors, non_tensor, meta_info


def _groups(rng: random.Random, count: int, per: int, P: int, R: int, turns: bool) -> list:
    out = []
    for _ in range(count):
        prompt = [rng.randrange(3, 5000) for _ in range(rng.randint(3, P))]
        rollouts = []
        for k in range(per):
            if k == 0:  # one response fills the width: cut off at max_response_length
                resp = [rng.randrange(3, 5000) for _ in range(R)]
                mask = [1] * R
            else:
                resp, mask = [], []
                spans = [(1, rng.randint(2, 5))] + ([(0, 2), (1, rng.randint(1, 3))] if turns and k % 2 else [])
                for m, w in spans:
                    resp += [rng.randrange(3, 5000) for _ in range(w)]
                    mask += [m] * w
                resp.append(EOS)
                mask.append(1)
            lps = [round(-rng.random() * 2, 3) if m else 0.0 for m in mask]
            rollouts.append((resp, mask, lps, float(rng.random() < 0.5)))
        out.append((prompt, rollouts))
    return out


GBS, N, P, R = 2, 4, 10, 12
EXPERIMENT, PROJECT = "qwen2_7b_function_rm", "verl_grpo_example_gsm8k"  # verl's GRPO example's names


def steps() -> dict[int, tuple[dict, dict, dict]]:
    """Steps 2 and 4 of a run with 2 prompts x 4 rollouts per step (skip.rollout.steps=[2, 4])."""
    rng = random.Random(11)
    return {2: layout(_groups(rng, GBS, N, P, R, True), P, R, 2),
            4: layout(_groups(rng, GBS, N, P, R, False), P, R, 4, uids=True, scores=True, seed=4)}


def build(out: Path) -> list[Path]:
    from pickled_writers import write_verl  # noqa: E402  (sample_data/ is on the path)

    written = []
    for step, (tensors, non_tensor, meta_info) in steps().items():
        path = write_verl(out, step, tensors, non_tensor, meta_info, gbs=GBS, n=N, prompt_length=P, response_length=R,
                          experiment_name=EXPERIMENT, project_name=PROJECT)
        written += [path, path.parent / "meta.json"]
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path(__file__).resolve().parent / "verl",
                        help="the folder to write (default: sample_data/verl/)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    build(args.out)
