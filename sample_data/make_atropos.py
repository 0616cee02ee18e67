"""Write sample_data/atropos/: the files a made-up Atropos environment leaves with
`data_path_to_save_groups: data/gsm8k.jsonl`, deterministically.

The groups follow Atropos' writer (NousResearch/atropos@296a0bc5): a `ScoredDataGroup`
(atroposlib/envs/base.py:57-72) as the environment built it (`tokens`, `masks`, `scores`,
`inference_logprobs`, in that order), then the keys `handle_send_to_api` adds when absent
(`ref_logprobs`, `overrides`, `group_overrides`, `distill_token_ids`, `distill_logprobs`,
base.py:892-896) and, in process mode, `messages` (base.py:915-925); each written as one line
by `jsonlines` (`json.dumps`, base.py:928-929). Tokens and masks are what ManagedServer tracks
(atroposlib/envs/server_handling/managed_server.py:345-374): -100 on prompt positions and
the token id on generated ones, log-probs 1.0 on prompt positions; a second turn extends the
first, so its end-of-turn token appears twice at the boundary (generated and trained, then
re-rendered by the chat template and masked). A second start of the environment with the same
path writes `gsm8k_1.jsonl` (base.py:277-291); `generate_html` leaves `gsm8k.html` and
`gsm8k_1.html` beside them (frontend/jsonl2html.py:138-139; the page here is a small stand-in,
not Atropos' template). `evals/` is an evaluation's `metrics.json` and text `samples.jsonl`
(base.py:718-790).

    python sample_data/make_atropos.py [OUT_DIR]      (default: sample_data/atropos)

The functions (`sequence`, `group`, `dumps`) are the generator the tests use as well.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

IGNORE = -100
EOT = 7  # the end-of-turn token id of the made-up tokenizer


def sequence(rng: random.Random, turns: list[tuple[int, int]]) -> tuple[list[int], list[int], list[float]]:
    """(tokens, masks, inference_logprobs) of one rollout: `turns` is [(prompt tokens, generated
    tokens)], each generated turn ending with EOT; a later turn's prompt starts with EOT again
    (the re-rendered end of the previous turn), masked as prompt."""
    tokens: list[int] = []
    masks: list[int] = []
    lps: list[float] = []
    for k, (n_prompt, n_gen) in enumerate(turns):
        prompt = [rng.randrange(10, 50000) for _ in range(n_prompt)]
        if k:
            prompt = [EOT] + prompt
        gen = [rng.randrange(10, 50000) for _ in range(n_gen - 1)] + [EOT]
        tokens += prompt + gen
        masks += [IGNORE] * len(prompt) + gen
        lps += [1.0] * len(prompt) + [-round(rng.random() * 4, 4) for _ in gen]
    return tokens, masks, lps


def group(rng: random.Random, shapes: list[list[tuple[int, int]]], scores: list[float], *,
          logprobs: bool = True, messages: bool = True, overrides: list | None = None,
          group_overrides: dict | None = None) -> dict:
    """A ScoredDataGroup as handle_send_to_api writes it."""
    seqs = [sequence(rng, turns) for turns in shapes]
    g: dict = {"tokens": [s[0] for s in seqs], "masks": [s[1] for s in seqs], "scores": list(scores)}
    if logprobs:
        g["inference_logprobs"] = [s[2] for s in seqs]
    g["ref_logprobs"] = None
    g["overrides"] = overrides
    g["group_overrides"] = group_overrides
    g["distill_token_ids"] = None
    g["distill_logprobs"] = None
    if messages:
        g["messages"] = [[{"role": "user", "content": f"decoded text of sequence {i}"}] for i in range(len(seqs))]
    return g


def dumps(groups: list[dict]) -> bytes:
    """jsonlines' Writer.write: json.dumps and a newline per group."""
    return "".join(json.dumps(g) + "\n" for g in groups).encode()


def viewer(name: str, groups: list[dict]) -> bytes:
    rows = "".join(f"<details><summary>Group {i}</summary><p>{len(g['tokens'])} sequences</p></details>\n"
                   for i, g in enumerate(groups))
    return f"<!DOCTYPE html>\n<html><head><title>{name}</title></head><body>\n{rows}</body></html>\n".encode()


def build(out: Path) -> None:
    """Two starts of one environment (group size 4) and an evaluation."""
    rng = random.Random(20251205)
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    first = [
        group(rng, [[(6, 5)], [(6, 4)], [(6, 6)], [(6, 3)]], [1.0, 0.0, 1.0, 0.0]),
        # multi-turn: a tool turn between two generated turns, its EOT twice at each boundary
        group(rng, [[(5, 4), (3, 3)], [(5, 3), (2, 4)], [(5, 5)], [(5, 2), (3, 2)]], [1.0, 0.5, 0.0, 0.0]),
        group(rng, [[(4, 3)], [(4, 5)], [(4, 4)], [(4, 4)]], [0.0, 1.0, 0.0, 0.0],
              overrides=[{}, {"set_advantage_to_zero": True}, {}, {}], group_overrides={"temperature": 0.7}),
    ]
    second = [
        group(rng, [[(7, 4)], [(7, 3)], [(7, 5)], [(7, 4)]], [0.0, 1.0, 1.0, 1.0], logprobs=False),
        group(rng, [[(5, 3), (2, 3)], [(5, 4)], [(5, 3)], [(5, 6)]], [1.0, 0.0, 0.0, 1.0]),
    ]
    for name, groups in (("gsm8k", first), ("gsm8k_1", second)):
        (data / f"{name}.jsonl").write_bytes(dumps(groups))
        (data / f"{name}.html").write_bytes(viewer(name, groups))
    evals = out / "evals"
    evals.mkdir(exist_ok=True)
    metrics = {"config_general": {"model_name": "made-up", "total_evaluation_time_seconds": "12.5",
                                  "generation_parameters": {"max_new_tokens": 64}},
               "results": {"atropos|gsm8k_eval|0": {"eval/accuracy": 0.5}, "all": {"eval/accuracy": 0.5}}}
    (evals / "metrics.json").write_text(json.dumps(metrics, indent=2))
    (evals / "samples.jsonl").write_bytes(dumps([{"question": "q1", "response": "r1", "score": 1.0},
                                                 {"question": "q2", "response": "r2", "score": 0.0}]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path(__file__).resolve().parent / "atropos",
                        help="the folder to write (default: sample_data/atropos/)")
    args = parser.parse_args()
    build(args.out)
