"""Write the text-dump sample data, deterministically: a tiny tokenizer, verl's and TRL's text
dumps of a made-up run, and a token-level conversation dump with planted chat-template drift.

- `tokenizer/`: a byte-level BPE trained with the `tokenizers` library on the run's own text
  (`tokenizer.json`), and a `tokenizer_config.json` holding a ChatML-style chat template and
  the BOS/EOS tokens, as a Hugging Face tokenizer folder keeps them.
- `verl_text/{step}.jsonl`: verl's `trainer.rollout_data_dir` dump. `_dump_generations`
  (volcengine/verl@b178a3cd: verl/trainer/ppo/ray_trainer.py:396-422) writes one
  `json.dumps(entry, ensure_ascii=False)` per sample, keys `input`, `output`, `gts`, `score`,
  `step`, then each reward-extra list of the batch's length, lines joined by "\\n" with one at
  the end; `input`/`output` are the decoded prompt and response without special tokens.
- `trl/completions/completions_{step:05d}.parquet`: TRL's GRPO completion log
  (huggingface/trl@f2cd5771: trl/trainer/grpo_trainer.py:3310-3327): columns `step`, `prompt`,
  `completion`, one per reward function, `advantage`. TRL writes it with pandas; pyarrow writes
  the same columns here (no pandas index metadata, which readers ignore).
- `chat_drift/1.jsonl`: slime-shaped samples (`prompt` as a message list, `metadata.messages` the whole
  conversation, tokens, response_length, loss_mask) whose tokens are the template rendered through
  the tokenizer, except two planted drifts: sample 1 drops the newline after `<|im_end|>` at the
  boundary before the second user turn, sample 2 starts with the BOS token twice.

    python sample_data/make_text_dumps.py [--out DIR]      (default: sample_data/)

`build_tokenizer`, `render` and the writers are what the tests use as well.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

SPECIALS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
BOS, EOT = "<s>", "<|im_end|>"
# Qwen-style ChatML, with the BOS token first: what apply_chat_template renders
CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}"
                 "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SYSTEM = "You are a careful assistant. Think step by step."


def problems(rng: random.Random, n: int) -> list[tuple[str, int]]:
    out = []
    for _ in range(n):
        a, b = rng.randrange(2, 60), rng.randrange(2, 60)
        out.append((f"What is {a} plus {b}? Put the answer after 'Answer:'.", a + b))
    return out


def answer(rng: random.Random, a_plus_b: int) -> tuple[str, float]:
    right = rng.random() < 0.5
    got = a_plus_b if right else a_plus_b + rng.choice((-2, -1, 1, 3))
    return f"Adding the two numbers gives {got}.\nAnswer: {got}", float(got == a_plus_b)


def corpus() -> list[str]:
    """The text the tokenizer is trained on: the run's own prompts and answers."""
    rng = random.Random(0)
    lines = [SYSTEM]
    for q, s in problems(rng, 200):
        lines.append(q)
        lines.append(answer(rng, s)[0])
    return lines


def build_tokenizer(out: Path) -> Path:
    """tokenizer.json (a 400-entry byte-level BPE) and tokenizer_config.json in `out`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(tok.to_str(pretty=True) + "\n", encoding="utf-8")
    cfg = {"bos_token": BOS, "eos_token": EOT, "chat_template": CHAT_TEMPLATE}
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
    return out


def render(messages: list[dict], add_generation_prompt: bool) -> str:
    """The template rendered as apply_chat_template renders it (jinja2, trim/lstrip blocks)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(CHAT_TEMPLATE).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                                  bos_token=BOS, eos_token=EOT)


def run(rng: random.Random, steps: tuple[int, ...], prompts: int, n: int) -> dict[int, list[dict]]:
    """step -> its samples {prompt, response, score, gts}, n per prompt, prompts in order."""
    out = {}
    for step in steps:
        rows = []
        for q, s in problems(rng, prompts):
            for _ in range(n):
                text, score = answer(rng, s)
                rows.append({"prompt": q, "response": text, "score": score, "gts": str(s)})
        out[step] = rows
    return out


def chat_prompt_text(q: str) -> str:
    """A prompt as verl and TRL decode it: the rendered chat without special tokens."""
    return f"system\n{SYSTEM}\nuser\n{q}\nassistant\n"


def write_verl_text(out: Path, samples: dict[int, list[dict]]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for step, rows in samples.items():
        lines = []
        for r in rows:
            entry = {"input": chat_prompt_text(r["prompt"]), "output": r["response"], "gts": r["gts"],
                     "score": r["score"], "step": step, "acc": r["score"] == 1.0}
            lines.append(json.dumps(entry, ensure_ascii=False))
        path = out / f"{step}.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        written.append(path)
    return written


def write_trl(out: Path, samples: dict[int, list[dict]], n: int) -> list[Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = out / "completions"
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for step, rows in samples.items():
        scores = [r["score"] for r in rows]
        fmt = [1.0 if "Answer:" in r["response"] else 0.0 for r in rows]
        total = [a + b for a, b in zip(scores, fmt)]
        adv = []
        for g in range(0, len(rows), n):
            grp = total[g:g + n]
            mean = sum(grp) / n
            std = (sum((x - mean) ** 2 for x in grp) / (n - 1)) ** 0.5 if n > 1 else 0.0
            adv += [(x - mean) / (std + 1e-4) for x in grp]
        table = pa.table({"step": [step] * len(rows), "prompt": [chat_prompt_text(r["prompt"]) for r in rows],
                          "completion": [r["response"] for r in rows], "accuracy_reward": scores,
                          "format_reward": fmt, "advantage": adv})
        path = folder / f"completions_{step:05d}.parquet"
        pq.write_table(table, path)
        written.append(path)
    return written


def conversation(rng: random.Random, k: int) -> list[dict]:
    """A two-round conversation: system, user, assistant, user, assistant."""
    (q1, s1), (q2, s2) = problems(rng, 2)
    a1, a2 = answer(rng, s1)[0], answer(rng, s2)[0]
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q1},
            {"role": "assistant", "content": a1}, {"role": "user", "content": q2},
            {"role": "assistant", "content": a2}]


def write_chat_drift(out: Path, tokenizer_dir: Path, samples: int = 4) -> Path:
    """slime-shaped samples of multi-turn conversations: the prompt is the first user turn, the
    response every turn after it (assistant turns trained, the user turn between masked)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    rng = random.Random(5)
    recs = []
    for i in range(samples):
        msgs = conversation(rng, i)
        prompt = msgs[:2]
        head = tok.encode(render(prompt, True)).ids
        full_text = render(msgs, False)
        full = tok.encode(full_text).ids
        # the mask: 1 on assistant turns' tokens (their content and <|im_end|>), 0 elsewhere
        mid = tok.encode(render(msgs[:3], False)).ids
        mid_gen = tok.encode(render(msgs[:4], True)).ids
        mask = [1] * (len(mid) - len(head)) + [0] * (len(mid_gen) - len(mid)) + [1] * (len(full) - len(mid_gen))
        tokens = list(full)
        if i == 1:  # a dropped newline at the turn boundary before the second user turn
            nl = tok.encode("\n", add_special_tokens=False).ids
            cut = len(mid) - len(nl)
            assert tokens[cut:len(mid)] == nl
            del tokens[cut:len(mid)]
            del mask[cut - len(head):len(mid) - len(head)]
        if i == 2:  # a duplicated BOS
            tokens.insert(0, tok.token_to_id(BOS))
        rl = len(mask)
        recs.append({"index": i, "group_index": 0, "prompt": prompt, "metadata": {"messages": msgs},
                     "response": tok.decode(tokens[len(tokens) - rl:], skip_special_tokens=False),
                     "tokens": tokens, "response_length": rl, "loss_mask": mask, "reward": float(i % 2),
                     "status": "completed"})
    out.mkdir(parents=True, exist_ok=True)
    path = out / "1.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return path


def build(root: Path) -> list[Path]:
    tk = build_tokenizer(root / "tokenizer")
    samples = run(random.Random(7), (1, 2), prompts=3, n=4)
    return ([tk / "tokenizer.json", tk / "tokenizer_config.json"] + write_verl_text(root / "verl_text", samples)
            + write_trl(root / "trl", samples, 4) + [write_chat_drift(root / "chat_drift", tk)])


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="where to write (default: sample_data/)")
    for p in build(ap.parse_args().out):
        print(p)
