"""NeMo-RL's per-step train logs: `{log_dir}/exp_NNN/train_data_step{N}.jsonl`.

NeMo-RL's logger writes the GRPO/PPO training batch one row per line, each line a batch slice
of one row, so every value but `idx` is a one-element list (NVIDIA-NeMo/RL@7ea279ab:
nemo_rl/utils/logger.py:1071-1098, nemo_rl/algorithms/grpo.py:3632-3654). The padded rows
(`token_ids`, `token_loss_mask`, `generation_logprobs`, `prev_logprobs`, `advantages`) come out
of the simdjson path as arrays and are cut to slime's sample fields in nemo_rl_map.py; the
mapping is in docs/frameworks.md.

This module is what discovery and part planning import: no numpy or pyarrow here.
"""
from __future__ import annotations

import os
import re
from typing import Iterator

_NAME = re.compile(r"^(train|val)_data_step(\d+)\.jsonl(\.gz|\.zst)?$")
# a list-wrapped value in the first line: slime's samples hold these as scalars
_WRAPPED_KEY = re.compile(rb'"(rewards|input_lengths|token_ids)"\s*:\s*\[')
_HEAD_BYTES = 1 << 20


def _head(path: str) -> bytes | None:
    from .jsonl import open_binary

    try:
        with open_binary(path) as f:
            return f.read(_HEAD_BYTES)
    except Exception:  # unreadable or corrupt: the extension's reader words it
        return None


def claims(path: str) -> bool:
    """A NeMo-RL step log: named `train_data_step{N}.jsonl` / `val_data_step{N}.jsonl` and its
    first line holds list-wrapped values (an empty file is claimed by its name)."""
    if path == "-" or not _NAME.match(os.path.basename(path)):
        return False
    head = _head(path)
    if head is None:
        return False
    first = head.split(b"\n", 1)[0]
    return not first.strip() or _WRAPPED_KEY.search(first) is not None


def step_and_split(path: str) -> tuple[int, str] | None:
    """The step from the file name; `val_data_step{N}` is the eval split."""
    m = _NAME.match(os.path.basename(path))
    if m is None:
        return None
    return int(m.group(2)), "train" if m.group(1) == "train" else "eval"


def skip_note(path: str, options=None, named: bool = False) -> str | None:
    """Why a claimed file is not read: a log without token ids holds text only (NeMo-RL's
    validation log writes each conversation's role/content messages and its reward,
    grpo.py:4016-4021; the distillation log writes content and input_lengths)."""
    from .jsonl import peek_first_record

    rec = peek_first_record(path)
    if rec is None or "token_ids" in rec:
        return None
    kind = "validation" if os.path.basename(path).startswith("val_") else "train"
    return f"{path}: NeMo-RL {kind} log without token_ids (text and rewards only): no train data, skipped"


def read(inp, request, info) -> Iterator:
    """The registry's entry: a step log, or its byte range [request.start, request.end)."""
    from .jsonl import read_jsonl
    from .nemo_rl_map import parser, shape_chunk

    from .jsonl import CHUNK_BYTES

    stats: dict = {}
    extra = {} if request.chunk_records is None else {"chunk_records": request.chunk_records}
    # a record keeps its unpadded rows only (a fraction of its line): chunks may span more JSON
    yield from read_jsonl(inp.path, inp.display, start=request.start, end=request.end, stats=stats,
                          parser=parser(), shape=shape_chunk,
                          chunk_bytes=CHUNK_BYTES * 8, **extra)
    info.lines = stats.get("lines", 0)


def split(inp, parts: int) -> list[tuple[int, int | None]]:
    """Newline-aligned byte ranges, as for any JSONL file."""
    from .jsonl import split as split_jsonl

    return split_jsonl(inp, parts)


def train_payload(inp) -> dict:
    """The step as slime's train-side dump payload (`{"format_version": 2, "rollout_id": step,
    "rank": 0, "samples": [...]}`, numpy arrays), with NeMo-RL's trainer log-probs
    (`prev_logprobs`) as `log_probs` and its `advantages`, both over the response span.
    `inp`: an InputFile or a path. Bad input raises InvalidInputError naming file, line, field."""
    from .nemo_rl_map import train_payload as payload

    return payload(inp)


def read_train(inp, trust_pickle: bool = False):
    """The registry's train entry (`audit --train`): train_payload as the trainer used it,
    checked as slime's train dumps are (inputs/train_pt.py). The mask it trained on is the
    token mask times the sample mask (NVIDIA-NeMo/RL@7ea279ab: nemo_rl/algorithms/grpo.py:2545),
    and the logged rewards are the raw ones (the trainer computes its advantages from them), so
    they are the payload's `raw_reward`, not post-processed `rewards`."""
    import numpy as np

    from .train_pt import from_payload

    p = train_payload(inp)
    raw = []
    for s in p["samples"]:
        if s.pop("sample_mask", 1) == 0 and s.get("loss_masks") is not None:
            s["loss_masks"] = np.zeros_like(s["loss_masks"])
        raw.append(s.pop("rewards", None))
    p["raw_reward"] = raw  # by rollout_position: the lines in order
    return from_payload(p, inp.display)
