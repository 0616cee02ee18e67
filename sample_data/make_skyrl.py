"""Write sample_data/skyrl/: a small made-up SkyRL export folder, deterministically.

SkyRL's trainer with `trainer.dump_data_batch=true` pickles each step's training batch, after
the advantages are computed and the rewards and uids popped, to
`{export_path}/dumped_data/global_step_{N}_training_input.pkl` (NovaSky-AI/SkyRL@a9564572eb8e:
skyrl/train/trainer.py:421-446, 1236-1242). The batch is built here as the trainer builds it:
`convert_prompts_responses_to_batch_tensors` (skyrl/train/dataset/preprocess.py:90-283: left-padded
sequences, right-aligned response tensors), the metadata of `convert_to_training_input`
(trainer.py:940-982: mini-batch and prompt boundaries, response_length, avg_response_length) and
`pad_training_input_batch` (skyrl/backends/skyrl_train/training_batch.py:504-570: `pad_size`
trailing copies of row 0, their loss mask zero); the pickling is the writer's own
(`sample_data/pickled_writers.py`, TensorBatch.__reduce__/__getstate__).

    python sample_data/make_skyrl.py [OUT_DIR]      (default: sample_data/skyrl)

`layout(groups, ...)` is the generator the tests use as well: `groups` is a list of prompt
groups, each `(prompt_ids, [(response_ids, loss_mask, rollout_logprobs), ...])`.
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np

EOS = 2  # the tokenizer's end-of-sequence id, which is also its pad id here (as Qwen's is)


def layout(groups: list, pad_id: int = EOS, dp_size: int = 1, mini_batch: int | None = None) -> tuple[dict, dict]:
    """(tensors, metadata) of the training input batch of these prompt groups."""
    prompts = [list(p) for p, rollouts in groups for _ in rollouts]
    responses = [list(r) for _, rollouts in groups for r, _, _ in rollouts]
    masks = [list(m) for _, rollouts in groups for _, m, _ in rollouts]
    logprobs = [list(lp) for _, rollouts in groups for _, _, lp in rollouts]
    n = len(prompts)
    plen = np.array([len(p) for p in prompts], np.int64)
    rlen = np.array([len(r) for r in responses], np.int64)
    total = int((plen + rlen).max())
    width = int(rlen.max())
    pad = total - (plen + rlen)
    seq = np.full((n, total), pad_id, np.int64)
    for i in range(n):
        seq[i, pad[i]:pad[i] + plen[i]] = prompts[i]
        seq[i, pad[i] + plen[i]:] = responses[i]
    cols = np.arange(total)
    attention = (cols[None, :] >= pad[:, None]).astype(np.int64)
    rcols = np.arange(width)
    response_mask = (rcols[None, :] >= (width - rlen)[:, None]).astype(np.int64)

    def right(rows, dtype):
        out = np.zeros((n, width), dtype)
        for i, v in enumerate(rows):
            out[i, width - len(v):] = v
        return out

    loss = right(masks, np.float32)
    lp = right(logprobs, np.float32)
    # what the forward passes and the advantage estimator add (trainer.py:1307-1410, 1124-1235):
    # numbers of the right shape, not read as rollout data
    rng = np.random.default_rng(n)
    action = (lp + rng.normal(0, 0.01, lp.shape).astype(np.float32)) * response_mask
    adv = np.repeat(rng.normal(0, 1, (n, 1)).astype(np.float32), width, axis=1) * response_mask
    tensors = {
        "sequences": seq, "attention_mask": attention, "response_mask": response_mask, "loss_mask": loss,
        "rollout_logprobs": lp, "rollout_expert_indices": None, "router_padding_mask": None,
        "pixel_values": None, "image_grid_thw": None,
        "base_action_log_probs": action.copy(), "action_log_probs": action, "values": None,
        "advantages": adv, "returns": adv.copy(),
    }
    bounds, at = [], 0
    for _, rollouts in groups:
        bounds.append((at, at + len(rollouts)))
        at += len(rollouts)
    per = mini_batch or len(groups)
    mini = [(bounds[k][0], bounds[min(k + per, len(bounds)) - 1][1]) for k in range(0, len(bounds), per)]
    meta = {
        "policy_mini_batch_boundaries": mini,
        "policy_prompt_boundaries": bounds,
        "response_length": width,
        "avg_response_length": float(rlen.sum() / n),
    }
    pad_size = -(-n // dp_size) * dp_size - n
    if pad_size:
        for k, v in tensors.items():
            if v is None:
                continue
            extra = np.zeros((pad_size,) + v.shape[1:], v.dtype) if k == "loss_mask" else v[[0] * pad_size]
            tensors[k] = np.concatenate([v, extra])
    meta["pad_size"] = pad_size
    return tensors, meta


def _groups(rng: random.Random, count: int, per: int, turns: bool) -> list:
    out = []
    for _ in range(count):
        prompt = [rng.randrange(3, 5000) for _ in range(rng.randint(3, 9))]
        rollouts = []
        for _ in range(per):
            spans = [(1, rng.randint(2, 7))]
            if turns and rng.random() < 0.5:  # a tool turn (loss mask 0) and a second generated turn
                spans += [(0, rng.randint(2, 4)), (1, rng.randint(1, 5))]
            resp, mask, lps = [], [], []
            for m, k in spans:
                resp += [rng.randrange(3, 5000) for _ in range(k)]
                mask += [m] * k
                lps += [round(-rng.random() * 2, 3) if m else 0.0 for _ in range(k)]
            resp.append(EOS)
            mask.append(1)
            lps.append(-0.001)
            rollouts.append((resp, mask, lps))
        out.append((prompt, rollouts))
    return out


def steps() -> dict[int, tuple[dict, dict]]:
    """The made-up run: step 1, 3 prompts x 4 rollouts on 1 rank (no pad rows); step 2, 2 prompts
    x 3 rollouts with tool turns on 4 data-parallel ranks (6 rows + 2 pad rows)."""
    rng = random.Random(7)
    return {1: layout(_groups(rng, 3, 4, False)), 2: layout(_groups(rng, 2, 3, True), dp_size=4)}


def build(out: Path) -> list[Path]:
    from pickled_writers import write_skyrl  # noqa: E402  (sample_data/ is on the path)

    return [write_skyrl(out, step, tensors, meta) for step, (tensors, meta) in steps().items()]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path(__file__).resolve().parent / "skyrl",
                        help="the folder to write (default: sample_data/skyrl/)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    build(args.out)
