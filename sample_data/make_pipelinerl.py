"""Write sample_data/pipelinerl/: a small made-up PipelineRL run folder, deterministically.

The lines follow PipelineRL's writer (ServiceNow/PipelineRL@58d39345): the actor appends each
finished prompt group to `streams/actor/0/0/0.jsonl` (`streams/actor_test/...` in its eval loop)
as one `orjson.dumps` line, the list of its rollouts' `TrainingText.model_dump()`s
(pipelinerl/actor.py:647-652, streams.py:238-277): fields in declaration order
(pipelinerl/rollouts.py:35-47), `labels` -100 on the prompt and the sampled ids on the completion,
one log-prob per completion token (async_llm.py:317-345), `ref_logprobs` empty, and the actor's
`metadata` keys `model_version`, `rollout_index`, `step_index` (actor.py:214-219). A rollout
of a multi-call agent is several texts (one per LLM call). Group ids are `{scheduler}_{n}`
(actor.py:212), restarting at 0 in each eval pass; the rollouts of a group are shuffled
(actor.py:223). The stats streams (`stats`, `stats_test`) hold metrics dicts, not samples.

Train run: 6 groups of 3 rollouts under weights versions 0, 0, 0 (one rollout of group 2 under
version 12: an in-flight update), 12, 12, 24; group 4 is a two-call agent (two texts per
rollout). Eval: one pass at version 12, two groups of 2 rollouts.

    python sample_data/make_pipelinerl.py [OUT_DIR]      (default: sample_data/pipelinerl)

`training_text` and `group_line` are the generator the tests use as well.
"""
from __future__ import annotations

import argparse
import random
from pathlib import Path

import orjson

MASKED = -100


def training_text(rng: random.Random, *, group_id: str, model_version: int, rollout_index: int, step_index: int = 0,
                  prompt_len: int | None = None, out_len: int | None = None, reward: float = 0.0,
                  finished: bool = True, logprobs: list[float] | None = None) -> dict:
    """One TrainingText.model_dump(), as make_training_text builds it."""
    p = prompt_len if prompt_len is not None else rng.randint(4, 9)
    o = out_len if out_len is not None else rng.randint(2, 7)
    prompt = [rng.randrange(1, 50000) for _ in range(p)]
    out = [rng.randrange(1, 50000) for _ in range(o)]
    lps = logprobs if logprobs is not None else [round(-rng.random() * 3, 4) for _ in range(o)]
    words = " ".join(f"w{t}" for t in out)
    text = "<user> " + " ".join(f"w{t}" for t in prompt) + " <assistant> " + words
    return {
        "text": text,
        "n_predicted": len(words),
        "reward": reward,
        "logprobs": lps,
        "ref_logprobs": [],
        "input_ids": prompt + out,
        "labels": [MASKED] * p + out,
        "group_id": group_id,
        "finished": finished,
        "prompt_tokens": p,
        "output_tokens": o,
        "visual_features": None,
        "metadata": {"model_version": model_version, "rollout_index": rollout_index, "step_index": step_index},
    }


def group_line(texts: list[dict]) -> bytes:
    return orjson.dumps(texts, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def _group(rng: random.Random, gid: str, versions: list[int], calls: int = 1) -> list[dict]:
    texts = []
    rollouts = []
    for r, version in enumerate(versions):
        reward = float(rng.random() < 0.5)
        one = [training_text(rng, group_id=gid, model_version=version, rollout_index=r, step_index=k, reward=reward,
                             finished=rng.random() > 0.2) for k in range(calls)]
        rollouts.append(one)
    rng.shuffle(rollouts)  # actor.py:223
    for one in rollouts:
        texts.extend(one)
    return texts


def write(out: Path) -> None:
    rng = random.Random(40)
    streams = out / "streams"
    train = [([0, 0, 0], 1), ([0, 0, 0], 1), ([0, 12, 0], 1), ([12, 12, 12], 1), ([12, 12, 12], 2), ([24, 24, 24], 1)]
    lines = [group_line(_group(rng, f"train_{n}", versions, calls)) for n, (versions, calls) in enumerate(train)]
    # group 2 (versions 0 and 12) finishes after group 3 began under 12: written after it
    lines[2], lines[3] = lines[3], lines[2]
    f = streams / "actor" / "0" / "0" / "0.jsonl"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"".join(lines))
    f = streams / "actor_test" / "0" / "0" / "0.jsonl"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"".join(group_line(_group(rng, f"test_{n}", [12, 12])) for n in range(2)))
    for topic, version in (("stats", 24), ("stats_test", 12)):
        f = streams / topic / "0" / "0" / "0.jsonl"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(orjson.dumps({"reward_mean": 0.5, "trainer_model_version": version, "time": 1.0}) + b"\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path(__file__).parent / "pipelinerl",
                        help="the folder to write (default: sample_data/pipelinerl/)")
    args = parser.parse_args()
    write(args.out)
