#!/usr/bin/env python
"""Write small, realistic slime rollout dumps in three formats (.pt, JSONL, Parquet).

The same samples go into every format. The output is deterministic: a fixed seed, no clocks, no
uuid4() calls; JSONL and Parquet are byte-identical from run to run, and torch.save writes the same
bytes for the same file name and content.

Usage:
    python sample_data/make_sample_data.py [--out DIR]   # DIR defaults to this script's folder

Layout written under DIR (see README.md):
    pt/rollout_data/{1,2,3,eval_3}.pt            torch.save({"rollout_id": step, "samples": [...]})
    jsonl/rollout_data/{1,2,3,eval_3}.jsonl      one Sample.to_dict() per line
    parquet/rollout_data/{1,2,3,eval_3}.parquet  one row per sample
    parquet_json/rollout_data/{1,2,3,eval_3}.parquet  the same, every nested column as JSON text
    reward_dict/{pt,jsonl}/rollout_data/1.*      step 1 with dict rewards (needs --reward-key accuracy)
"""

from __future__ import annotations

import argparse
import copy
import random
import uuid
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

SEED = 20260821

# Keys of slime's Sample.to_dict(), in dataclass declaration order. Real dumps add "trace" after them.
SAMPLE_FIELDS = (
    "group_index",
    "index",
    "rollout_id",
    "prompt",
    "tokens",
    "multimodal_inputs",
    "multimodal_train_inputs",
    "multimodal_train_input_id",
    "apply_chat_template_kwargs",
    "response",
    "response_length",
    "label",
    "reward",
    "loss_mask",
    "weight_versions",
    "rollout_log_probs",
    "rollout_top_p_token_ids",
    "rollout_top_p_token_offsets",
    "rollout_routed_experts",
    "remove_sample",
    "teacher_log_probs",
    "status",
    "metadata",
    "generate_function_path",
    "custom_rm_path",
    "train_metadata",
    "session_id",
    "non_generation_time",
    "spec_info",
    "prefix_cache_info",
)
EXTRA_FIELDS = ("trace",)
ALL_FIELDS = SAMPLE_FIELDS + EXTRA_FIELDS

SPEC_INFO_KEYS = ("spec_accept_token_num", "spec_draft_token_num", "spec_verify_ct", "completion_token_num")
PREFIX_CACHE_KEYS = ("cached_tokens", "total_prompt_tokens")

# Fields slime may store as int32 tensors (decoded from SGLang); written as tensors in the .pt form.
TENSOR_FIELDS = ("rollout_top_p_token_ids", "rollout_top_p_token_offsets", "rollout_routed_experts")

NUM_LAYERS = 2
MOE_TOPK = 2
NUM_EXPERTS = 8
VOCAB = 50000

# Parquet: fields always stored as JSON text, and fields stored as JSON text only when a value in the
# file is not a plain string. A JSON-text column carries field metadata {"encoding": "json"}.
JSON_FIELDS = (
    "multimodal_inputs",
    "multimodal_train_inputs",
    "apply_chat_template_kwargs",
    "metadata",
    "train_metadata",
    "trace",
)
JSON_IF_NOT_STR_FIELDS = ("prompt", "label")
PARQUET_JSON_META = {b"encoding": b"json"}

_I64_LIST = pa.list_(pa.int64())
PARQUET_TYPES = {
    "group_index": pa.int64(),
    "index": pa.int64(),
    "rollout_id": pa.int64(),
    "prompt": pa.string(),
    "tokens": _I64_LIST,
    "multimodal_inputs": pa.string(),
    "multimodal_train_inputs": pa.string(),
    "multimodal_train_input_id": pa.string(),
    "apply_chat_template_kwargs": pa.string(),
    "response": pa.string(),
    "response_length": pa.int64(),
    "label": pa.string(),
    "reward": pa.float64(),
    "loss_mask": _I64_LIST,
    "weight_versions": pa.list_(pa.string()),
    "rollout_log_probs": pa.list_(pa.float64()),
    "rollout_top_p_token_ids": _I64_LIST,
    "rollout_top_p_token_offsets": _I64_LIST,
    "rollout_routed_experts": pa.list_(pa.list_(_I64_LIST)),
    "remove_sample": pa.bool_(),
    "teacher_log_probs": pa.list_(pa.float64()),
    "status": pa.string(),
    "metadata": pa.string(),
    "generate_function_path": pa.string(),
    "custom_rm_path": pa.string(),
    "train_metadata": pa.string(),
    "session_id": pa.string(),
    "non_generation_time": pa.float64(),
    "spec_info": pa.struct([(k, pa.int64()) for k in SPEC_INFO_KEYS]),
    "prefix_cache_info": pa.struct([(k, pa.int64()) for k in PREFIX_CACHE_KEYS]),
    "trace": pa.string(),
}
assert tuple(PARQUET_TYPES) == ALL_FIELDS


# ----------------------------------------------------------------------------------------------
# small helpers


def f32(x: float) -> float:
    """Round a Python float to the nearest float32 value (what SGLang's log-probs are)."""
    return float(np.float32(x))


def chat(user: str) -> str:
    return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


class Gen:
    """All randomness goes through one seeded generator per dump."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def ids(self, n: int) -> list[int]:
        return [self.rng.randrange(100, VOCAB) for _ in range(n)]

    def logprobs(self, mask: list[int]) -> list[float]:
        out = []
        for m in mask:
            if m:
                out.append(f32(-max(round(self.rng.expovariate(3.0), 4), 0.0001)))
            else:
                out.append(0.0)
        return out

    def uuid4(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def hex(self, nbytes: int) -> str:
        return f"{self.rng.getrandbits(8 * nbytes):0{2 * nbytes}x}"

    def trace(self, group_index, n_calls: int) -> dict:
        t = round(self.rng.uniform(0.0, 5.0), 3)
        events = []
        for call in range(n_calls):
            dur = round(self.rng.uniform(0.05, 1.5), 3)
            events.append({"name": "generate", "ts": t, "dur": dur, "call": call})
            t = round(t + dur, 3)
        events.append({"name": "reward", "ts": t, "dur": round(self.rng.uniform(0.001, 0.05), 3)})
        return {
            "version": 1,
            "trace_id": self.hex(16),
            "events": events,
            "sample_id": self.hex(8),
            "group_id": self.hex(8) if group_index is not None else None,
            "attempt": 0,
        }

    def top_p(self, response_ids: list[int]) -> tuple[list[int], list[int]]:
        """Ragged top-p nucleus per response token; the sampled token is always in it."""
        ids: list[int] = []
        offsets = [0]
        for tok in response_ids:
            nucleus = [tok] + [self.rng.randrange(100, VOCAB) for _ in range(self.rng.randrange(0, 3))]
            ids.extend(nucleus)
            offsets.append(len(ids))
        return ids, offsets

    def routed_experts(self, n_tokens: int) -> list[list[list[int]]]:
        """R3 capture: [n_tokens - 1, NUM_LAYERS, MOE_TOPK], distinct experts per layer."""
        return [
            [sorted(self.rng.sample(range(NUM_EXPERTS), MOE_TOPK)) for _ in range(NUM_LAYERS)]
            for _ in range(n_tokens - 1)
        ]


def new_sample(**kw) -> dict:
    """A Sample.to_dict() with slime's defaults, overridden by kw; "trace" last."""
    d = {
        "group_index": None,
        "index": None,
        "rollout_id": None,
        "prompt": "",
        "tokens": [],
        "multimodal_inputs": None,
        "multimodal_train_inputs": None,
        "multimodal_train_input_id": None,
        "apply_chat_template_kwargs": {},
        "response": "",
        "response_length": 0,
        "label": None,
        "reward": None,
        "loss_mask": None,
        "weight_versions": [],
        "rollout_log_probs": None,
        "rollout_top_p_token_ids": None,
        "rollout_top_p_token_offsets": None,
        "rollout_routed_experts": None,
        "remove_sample": False,
        "teacher_log_probs": None,
        "status": "pending",
        "metadata": {},
        "generate_function_path": None,
        "custom_rm_path": None,
        "train_metadata": None,
        "session_id": None,
        "non_generation_time": 0.0,
        "spec_info": dict.fromkeys(SPEC_INFO_KEYS, 0),
        "prefix_cache_info": dict.fromkeys(PREFIX_CACHE_KEYS, 0),
        "trace": None,
    }
    unknown = set(kw) - set(d)
    assert not unknown, unknown
    d.update(kw)
    assert tuple(d) == ALL_FIELDS
    return d


def check_sample(s: dict) -> None:
    toks, rl = s["tokens"], s["response_length"]
    assert 12 <= len(toks) <= 60, (s["index"], len(toks))
    assert all(0 <= t < VOCAB for t in toks)
    assert 0 < rl <= len(toks)
    assert len(s["loss_mask"]) == rl
    assert len(s["rollout_log_probs"]) == rl
    assert all(lp == 0.0 for lp, m in zip(s["rollout_log_probs"], s["loss_mask"]) if m == 0)
    if s["rollout_top_p_token_offsets"] is not None:
        off, ids = s["rollout_top_p_token_offsets"], s["rollout_top_p_token_ids"]
        assert len(off) == rl + 1 and off[0] == 0 and off[-1] == len(ids)
        assert all(a <= b for a, b in zip(off, off[1:]))
    if s["rollout_routed_experts"] is not None:
        arr = np.asarray(s["rollout_routed_experts"])
        assert arr.shape == (len(toks) - 1, NUM_LAYERS, MOE_TOPK)


# ----------------------------------------------------------------------------------------------
# step 1: default GRPO, 4 prompts x n_samples_per_prompt=4, rollout_id None everywhere

STEP1_PROMPTS = [
    # question, answer, wrong answer, metadata, rewards per sample, statuses per sample
    ("What is 17 * 23?", "391", "381", {"source_name": "gsm8k"},
     [1.0, 0.0, 1.0, 1.0], ["completed", "truncated", "completed", "completed"]),
    ("Solve for x: 3x + 7 = 22.", "5", "15/3", {"source_name": "gsm8k"},
     [1.0, 1.0, 1.0, 1.0], ["completed"] * 4),
    ("How many primes are less than 20?", "8", "7", {},
     [0.0, 0.0, 0.0, 0.0], ["completed", "completed", "truncated", "completed"]),
    ("Simplify 48/64.", "3/4", "6/8", {"source_name": "math", "level": 2},
     [0.0, 1.0, 0.0, 1.0], ["completed", "completed", "truncated", "completed"]),
]
STEP1_REMOVED_INDEX = 10  # a truncated sample a rollout filter flagged


def build_step1() -> list[dict]:
    g = Gen(SEED + 1)
    samples = []
    index = 0
    for group_index, (q, ans, wrong, meta, rewards, statuses) in enumerate(STEP1_PROMPTS):
        prompt_ids = g.ids(g.rng.randrange(8, 16))
        for k in range(4):
            status, reward = statuses[k], rewards[k]
            if status == "truncated":
                n_resp = 40
                text = f"Let me work through this carefully. First, note that {q.lower()} We need to"
            else:
                n_resp = g.rng.randrange(6, 30)
                shown = ans if reward == 1.0 else wrong
                text = f"Working it out step by step gives {shown}. The answer is \\boxed{{{shown}}}."
            resp_ids = g.ids(n_resp)
            mask = [1] * n_resp
            samples.append(
                new_sample(
                    group_index=group_index,
                    index=index,
                    rollout_id=None,
                    prompt=chat(q),
                    tokens=prompt_ids + resp_ids,
                    response=text,
                    response_length=n_resp,
                    label=ans,
                    reward=reward,
                    loss_mask=mask,
                    weight_versions=["1"],
                    rollout_log_probs=g.logprobs(mask),
                    remove_sample=index == STEP1_REMOVED_INDEX,
                    status=status,
                    metadata=dict(meta),
                    session_id=g.uuid4(),
                    prefix_cache_info={
                        "cached_tokens": 0 if k == 0 else len(prompt_ids),
                        "total_prompt_tokens": len(prompt_ids),
                    },
                    trace=g.trace(group_index, 1),
                )
            )
            index += 1
    return samples


def build_step1_reward_dict(step1: list[dict]) -> list[dict]:
    """Step 1 with a multi-score reward model: reward is a dict; needs --reward-key accuracy."""
    out = copy.deepcopy(step1)
    for s in out:
        fmt = 0.5 if s["status"] == "truncated" else 1.0
        s["reward"] = {"accuracy": s["reward"], "format": fmt}
        s["metadata"].pop("raw_reward", None)
    return out


# ----------------------------------------------------------------------------------------------
# step 2: compact / subagent. Each prompt runs n_samples_per_prompt=2 executions; an execution
# fans out into 1-3 sibling samples that share rollout_id = the index of its first (parent) sample.

STEP2_PROMPTS = [
    # task, label, [(fan-out, reward, raw_reward or None, multi-turn flags per sibling), ...]
    ("Write a function `is_palindrome(s)` that ignores case and spaces.",
     {"answer": "def is_palindrome", "tests": 4},
     [(3, 1.0, None, [False, True, False]), (2, 0.0, None, [True, False])]),
    ("Find the number of trailing zeros of 100!.",
     {"answer": "24", "tests": 1},
     [(1, 1.0, None, [True]), (2, 0.5, None, [False, True])]),
    ("Fix the off-by-one error in the given binary search.",
     {"answer": "lo <= hi", "tests": 6},
     [(2, 0.9, 1.0, [True, False]), (3, 0.0, 0.0, [False, True, True])]),
    ("Sum of all even Fibonacci numbers below 100?",
     {"answer": "44", "tests": 1},
     [(1, 1.0, None, [False]), (1, 1.0, None, [True])]),
]
AGENT_ROLES = ("solver", "critic", "rewriter")


def build_step2(first_group: int, first_index: int) -> list[dict]:
    g = Gen(SEED + 2)
    samples = []
    index = first_index
    for gi, (task, label, executions) in enumerate(STEP2_PROMPTS):
        group_index = first_group + gi
        messages = [
            {"role": "system", "content": "You are a helpful agent. Use the python tool when needed."},
            {"role": "user", "content": task},
        ]
        prompt_ids = g.ids(g.rng.randrange(8, 12))
        for fanout, reward, raw_reward, multi_turn in executions:
            parent_index = index
            session = g.uuid4()
            prev_resp: list[int] = []
            for k in range(fanout):
                if multi_turn[k]:
                    a1, tool, a2 = g.rng.randrange(3, 7), g.rng.randrange(3, 6), g.rng.randrange(3, 7)
                    mask = [1] * a1 + [0] * tool + [1] * a2
                    text = (
                        "<tool_call>{\"name\": \"python\", \"arguments\": {\"code\": \"...\"}}</tool_call>"
                        "<tool_response>ok</tool_response>"
                        f"Verified with the tool; the {AGENT_ROLES[k]} answer is {label['answer']}."
                    )
                    calls = 2
                else:
                    n = g.rng.randrange(5, 13)
                    mask = [1] * n
                    text = f"As {AGENT_ROLES[k]}: the result is {label['answer']}."
                    calls = 1
                resp_ids = g.ids(len(mask))
                context = prompt_ids + prev_resp  # a later agent sees the previous agent's output
                meta = {"round_number": k, "agent": AGENT_ROLES[k]}
                if raw_reward is not None:
                    meta["raw_reward"] = raw_reward
                samples.append(
                    new_sample(
                        group_index=group_index,
                        index=index,
                        rollout_id=parent_index,
                        prompt=copy.deepcopy(messages),
                        tokens=context + resp_ids,
                        apply_chat_template_kwargs={"enable_thinking": False},
                        response=text,
                        response_length=len(mask),
                        label=dict(label),
                        reward=reward,
                        loss_mask=mask,
                        weight_versions=["2"] * calls,
                        rollout_log_probs=g.logprobs(mask),
                        status="completed",
                        metadata=meta,
                        generate_function_path="agents.multi_agent.generate",
                        custom_rm_path="agents.multi_agent.reward",
                        train_metadata={"agent": AGENT_ROLES[k], "turns": calls},
                        session_id=session,
                        non_generation_time=round(g.rng.uniform(0.05, 0.8), 4) if multi_turn[k] else 0.0,
                        prefix_cache_info={
                            "cached_tokens": len(prompt_ids) if k else 0,
                            "total_prompt_tokens": len(context),
                        },
                        trace=g.trace(group_index, calls),
                    )
                )
                prev_resp = resp_ids
                index += 1
    return samples


# ----------------------------------------------------------------------------------------------
# step 3: mixed. Default groups (rollout_id None, n=4) next to compact groups whose generator
# stamps small explicit ids {0, 2, 7} that collide with the "smallest unused integer" fill.

STEP3_GROUPS = [
    # (question, answer, kind, per-sample (rollout_id, reward, status))
    ("What is the remainder of 2^10 divided by 7?", "2", "default",
     [(None, 1.0, "completed"), (None, 0.0, "completed"), (None, 0.0, "aborted"), (None, 1.0, "completed")]),
    ("Compute the derivative of x^3 at x = 2.", "12", "compact",
     [(2, 1.0, "completed"), (2, 1.0, "completed"), (0, 0.0, "truncated"), (0, 0.0, "completed")]),
    ("What is the area of a circle with radius 3, in terms of pi?", "9\\pi", "default",
     [(None, 0.0, "completed"), (None, 0.0, "truncated"), (None, 1.0, "completed"), (None, 0.0, "completed")]),
    ("How many ways can 3 books be arranged on a shelf?", "6", "compact",
     [(7, 1.0, "completed"), (7, 1.0, "completed"), (7, 1.0, "completed")]),
]


def build_step3(first_group: int, first_index: int) -> list[dict]:
    g = Gen(SEED + 3)
    samples = []
    index = first_index
    for gi, (q, ans, kind, rows) in enumerate(STEP3_GROUPS):
        group_index = first_group + gi
        prompt_ids = g.ids(g.rng.randrange(8, 14))
        session = None
        last_rid = object()
        for k, (rid, reward, status) in enumerate(rows):
            if status == "aborted":
                n_resp = 3 + g.rng.randrange(2, 5)
                text = "Let me think about 2^10 ="
            elif status == "truncated":
                n_resp = 36
                text = f"We start by restating the problem: {q.lower()} Then we"
            else:
                n_resp = g.rng.randrange(5, 24)
                shown = ans if reward == 1.0 else "unknown"
                text = f"The answer is \\boxed{{{shown}}}."
            resp_ids = g.ids(n_resp)
            tokens = prompt_ids + resp_ids
            mask = [1] * n_resp
            tp_ids, tp_off = g.top_p(resp_ids)
            if kind == "default" or rid != last_rid:
                session = g.uuid4()
            last_rid = rid
            draft = n_resp + g.rng.randrange(0, 8)
            samples.append(
                new_sample(
                    group_index=group_index,
                    index=index,
                    rollout_id=rid,
                    prompt=chat(q),
                    tokens=tokens,
                    response=text,
                    response_length=n_resp,
                    label=ans,
                    reward=reward,
                    loss_mask=mask,
                    weight_versions=["3"],
                    rollout_log_probs=g.logprobs(mask),
                    rollout_top_p_token_ids=tp_ids,
                    rollout_top_p_token_offsets=tp_off,
                    rollout_routed_experts=g.routed_experts(len(tokens)),
                    status=status,
                    metadata={"source_name": "math"} if kind == "default" else {"source_name": "agent"},
                    session_id=session,
                    spec_info={
                        "spec_accept_token_num": max(n_resp - 1 - g.rng.randrange(0, 3), 0),
                        "spec_draft_token_num": draft,
                        "spec_verify_ct": (n_resp + 2) // 3,
                        "completion_token_num": n_resp,
                    },
                    prefix_cache_info={
                        "cached_tokens": len(prompt_ids) if k else 0,
                        "total_prompt_tokens": len(prompt_ids),
                    },
                    trace=g.trace(group_index, 1),
                )
            )
            index += 1
    return samples


# ----------------------------------------------------------------------------------------------
# eval_3: two eval datasets concatenated; index restarts at 0 per dataset; n=1; rollout_id None.

EVAL_DATASETS = [
    # name, group_index mode, [(question, answer, reward, status)]
    ("aime24", None, [
        ("Find the number of positive divisors of 2024.", "12", 1.0, "completed"),
        ("What is the sum of the digits of 2^15?", "26", 0.0, "completed"),
        ("How many 3-digit multiples of 7 are there?", "128", 0.0, "truncated"),
    ]),
    ("math500", "per_dataset", [
        ("Evaluate 7! / 5!.", "42", 1.0, "completed"),
        ("What is gcd(84, 126)?", "42", 1.0, "completed"),
        ("Convert 0.375 to a fraction.", "3/8", 1.0, "completed"),
        ("What is the 10th triangular number?", "55", 0.0, "completed"),
    ]),
]


def build_eval3() -> list[dict]:
    g = Gen(SEED + 103)
    samples = []
    for _name, gmode, rows in EVAL_DATASETS:
        for i, (q, ans, reward, status) in enumerate(rows):
            group_index = i if gmode == "per_dataset" else None
            prompt_ids = g.ids(g.rng.randrange(8, 16))
            if status == "truncated":
                n_resp = 40
                text = "Counting the multiples one by one: 105, 112, 119, 126,"
            else:
                n_resp = g.rng.randrange(5, 25)
                shown = ans if reward == 1.0 else "0"
                text = f"Therefore the answer is \\boxed{{{shown}}}."
            resp_ids = g.ids(n_resp)
            mask = [1] * n_resp
            samples.append(
                new_sample(
                    group_index=group_index,
                    index=i,
                    rollout_id=None,
                    prompt=chat(q),
                    tokens=prompt_ids + resp_ids,
                    response=text,
                    response_length=n_resp,
                    label=ans,
                    reward=reward,
                    loss_mask=mask,
                    weight_versions=["3"],
                    rollout_log_probs=g.logprobs(mask),
                    status=status,
                    metadata={},
                    session_id=g.uuid4(),
                    prefix_cache_info={"cached_tokens": 0, "total_prompt_tokens": len(prompt_ids)},
                    trace=g.trace(group_index, 1),
                )
            )
    return samples


def build_all() -> dict[str, list[dict]]:
    """Return {file stem: samples}; stems are "1", "2", "3", "eval_3"."""
    s1 = build_step1()
    s2 = build_step2(first_group=s1[-1]["group_index"] + 1, first_index=s1[-1]["index"] + 1)
    s3 = build_step3(first_group=s2[-1]["group_index"] + 1, first_index=s2[-1]["index"] + 1)
    ev = build_eval3()
    dumps = {"1": s1, "2": s2, "3": s3, "eval_3": ev}
    for samples in dumps.values():
        for s in samples:
            check_sample(s)
    return dumps


def step_of(stem: str) -> int:
    return int(stem.rsplit("_", 1)[-1])


# ----------------------------------------------------------------------------------------------
# writers


def to_pt_sample(s: dict):
    import torch

    out = dict(s)
    for key in TENSOR_FIELDS:
        if out[key] is not None:
            out[key] = torch.tensor(out[key], dtype=torch.int32)
    return out


def write_pt(path: Path, step: int, samples: list[dict]) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"rollout_id": step, "samples": [to_pt_sample(s) for s in samples]}, str(path))


def write_jsonl(path: Path, samples: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in samples))


def _json_text(v):
    return None if v is None else orjson.dumps(v).decode()


def parquet_table(samples: list[dict]) -> pa.Table:
    fields, arrays = [], []
    for name in ALL_FIELDS:
        values = [s[name] for s in samples]
        if any(isinstance(v, dict) for v in values) and name == "reward":
            raise ValueError("dict rewards are not written to Parquet")
        json_col = name in JSON_FIELDS or (
            name in JSON_IF_NOT_STR_FIELDS and any(v is not None and not isinstance(v, str) for v in values)
        )
        if json_col:
            values = [_json_text(v) for v in values]
        typ = PARQUET_TYPES[name]
        fields.append(pa.field(name, typ, nullable=True, metadata=PARQUET_JSON_META if json_col else None))
        arrays.append(pa.array(values, type=typ))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def parquet_json_table(samples: list[dict]) -> pa.Table:
    """Every list or dict column as JSON text without field metadata, as some writers produce;
    a text field holding other data is named in the schema metadata key json_columns."""
    arrays, names, listed = [], [], []
    for name in ALL_FIELDS:
        values = [s[name] for s in samples]
        if any(isinstance(v, (list, dict)) for v in values):
            if name in ("prompt", "response", "label"):
                listed.append(name)
            arrays.append(pa.array([_json_text(v) for v in values], pa.string()))
        else:
            arrays.append(pa.array(values, type=PARQUET_TYPES[name]))
        names.append(name)
    table = pa.Table.from_arrays(arrays, names=names)
    return table.replace_schema_metadata({"json_columns": orjson.dumps(listed).decode()} if listed else None)


def write_parquet(path: Path, samples: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(parquet_table(samples), str(path), compression="zstd")


def write_all(out: Path) -> None:
    dumps = build_all()
    for stem, samples in dumps.items():
        write_pt(out / "pt" / "rollout_data" / f"{stem}.pt", step_of(stem), samples)
        write_jsonl(out / "jsonl" / "rollout_data" / f"{stem}.jsonl", samples)
        write_parquet(out / "parquet" / "rollout_data" / f"{stem}.parquet", samples)
        path = out / "parquet_json" / "rollout_data" / f"{stem}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(parquet_json_table(samples), str(path), compression="zstd")
    rd = build_step1_reward_dict(dumps["1"])
    write_pt(out / "reward_dict" / "pt" / "rollout_data" / "1.pt", 1, rd)
    write_jsonl(out / "reward_dict" / "jsonl" / "rollout_data" / "1.jsonl", rd)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                    help="output folder (default: the folder this script is in)")
    args = ap.parse_args(argv)
    write_all(args.out)


if __name__ == "__main__":
    main()
