#!/usr/bin/env python3
"""Tokenizing a text dump: rollout-cli's text-dump reader (a verl `rollout_data_dir` step file read
through `--tokenizer`: lines parsed, prompts and responses encoded, rows handed on) against the
`tokenizers` library's own `encode_batch` over the same texts (the prompts encoded as texts by
default, the responses without special tokens: the floor), alternating runs in one process.

    python bench/text_tokenize.py --mb 50 [--repeat 3] [--out bench/results/text-tokenize-50mb.json]

The dump is generated (bench/.data/, deterministic): GRPO-shaped, 8 responses per prompt, prompts
of ~1.5 KB and responses of ~3 KB of English-like text, tokenized with the sample tokenizer
(sample_data/tokenizer/, a small byte-level BPE: more tokens per byte than a production one, so
both sides do more work per byte). The reader encodes each distinct prompt once (a prompt group
repeats it); `--distinct` makes every prompt distinct, which takes that advantage away.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

WORDS = ("the of and to in is that for it as with was on be by this are from at or an which have not "
         "number sum answer compute step first then we add multiply result equation value total check "
         "problem given so therefore because each two three four five six seven eight nine ten").split()


def _text(rng: random.Random, chars: int) -> str:
    out, n = [], 0
    while n < chars:
        w = rng.choice(WORDS) if rng.random() < 0.9 else str(rng.randrange(1000))
        out.append(w)
        n += len(w) + 1
    return " ".join(out)


def generate(path: str, mb: int, n: int, distinct: bool) -> None:
    if os.path.exists(path):
        return
    rng = random.Random(1)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    target, size = mb << 20, 0
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        while size < target:
            prompt = _text(rng, 1500)
            for k in range(n):
                p = prompt + (f" #{k}" if distinct else "")
                line = json.dumps({"input": p, "output": _text(rng, 3000), "gts": "1", "score": float(k % 2),
                                   "step": 1}, ensure_ascii=False) + "\n"
                f.write(line)
                size += len(line.encode())
    os.replace(path + ".tmp", path)


def run_reader(path: str, tok_path: str) -> tuple[float, int]:
    from rollout_cli.inputs.discover import discover
    from rollout_cli.inputs.registry import read_input
    from rollout_cli.core.options import RuleOptions

    (inp,), _, _ = discover([path], options=RuleOptions(tokenizer=tok_path))
    t0 = time.perf_counter()
    rows = 0
    for chunk in read_input(inp, tokenizer=tok_path):
        rows += len(chunk)
    return time.perf_counter() - t0, rows


def run_floor(prompts: list[str], responses: list[str], tok) -> float:
    t0 = time.perf_counter()
    tok.encode_batch(prompts, add_special_tokens=True)
    tok.encode_batch(responses, add_special_tokens=False)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=500)
    ap.add_argument("--n", type=int, default=8, help="responses per prompt")
    ap.add_argument("--distinct", action="store_true", help="every prompt distinct (no repeated prompt to reuse)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    import tokenizers

    tok_path = os.path.join(ROOT, "sample_data", "tokenizer", "tokenizer.json")
    path = os.path.join(HERE, ".data", "text_tokenize", f"{a.mb}mb-n{a.n}{'-distinct' if a.distinct else ''}", "1.jsonl")
    generate(path, a.mb, a.n, a.distinct)
    lines = [json.loads(x) for x in open(path, encoding="utf-8")]
    prompts, responses = [x["input"] for x in lines], [x["output"] for x in lines]
    del lines
    tok = tokenizers.Tokenizer.from_file(tok_path)
    reader, floor = [], []
    for _ in range(a.repeat):  # alternating
        floor.append(run_floor(prompts, responses, tok))
        s, rows = run_reader(path, tok_path)
        reader.append(s)
    mb = os.path.getsize(path) / (1 << 20)
    best_r, best_f = min(reader), min(floor)
    res = {
        "benchmark": "text-tokenize",
        "measured_with": "bench/text_tokenize.py",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "args": vars(a),
        "input_mb": round(mb, 1),
        "rows": rows,
        "cpus": os.cpu_count(),
        "tokenizers": tokenizers.__version__,
        "reader_s": [round(x, 3) for x in reader],
        "encode_batch_s": [round(x, 3) for x in floor],
        "reader_mb_per_s": round(mb / best_r, 2),
        "encode_batch_mb_per_s": round(mb / best_f, 2),
        "ratio": round(best_f / best_r, 3),  # reader throughput over encode_batch's (target >= 0.7)
    }
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
