"""NeMo-RL's per-step train logs: `{log_dir}/exp_NNN/train_data_step{N}.jsonl`.

NeMo-RL's logger writes the GRPO/PPO training batch one row per line, each line a batch slice
of one row, so every value but `idx` is a one-element list (NVIDIA-NeMo/RL@7ea279ab:
nemo_rl/utils/logger.py:1071-1098, nemo_rl/algorithms/grpo.py:3632-3654). The padded rows
(`token_ids`, `token_loss_mask`, `generation_logprobs`, `prev_logprobs`, `advantages`) come out
of the simdjson path as arrays and are cut to slime's sample fields in mapping.py; the
mapping is in docs/frameworks.md.

This module tells the step logs (`claims`, `step_and_split`, `skip_note`): what discovery
imports, so no numpy or pyarrow here. Reading them is reader.py's job, the field mapping
mapping.py's.
"""
from __future__ import annotations

import os
import re

_NAME = re.compile(r"^(train|val)_data_step(\d+)\.jsonl(\.gz|\.zst)?$")
# a list-wrapped value in the first line: slime's samples hold these as scalars
_WRAPPED_KEY = re.compile(rb'"(rewards|input_lengths|token_ids)"\s*:\s*\[')
_HEAD_BYTES = 1 << 20


def _head(path: str) -> bytes | None:
    from ..jsonl.reader import open_binary

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
    from ..jsonl.reader import peek_first_record

    rec = peek_first_record(path)
    if rec is None or "token_ids" in rec:
        return None
    kind = "validation" if os.path.basename(path).startswith("val_") else "train"
    return f"{path}: NeMo-RL {kind} log without token_ids (text and rewards only): no train data, skipped"
