"""miles' side files of a `--dump-details DIR` folder (radixark/miles@31f1ca96:
miles/ray/rollout/debug_data.py:36-117).

miles writes each step three ways: `DIR/rollout_data/{id}.pt` (slime's payload plus a
`metadata` key; read by the `.pt` reader, inputs/slime_pt/reader.py), a per-token Parquet mirror
`DIR/dashboard_columns/rollout_{id}.parquet` (sample_index, response_length, total_length,
tokens, loss_mask, rollout_log_probs: no reward, status or group_index) and
`DIR/trajectory/{id}.jsonl` (the conversations of samples that recorded them, as text).
Eval steps are named `eval_{id}`. This module claims the two side files: the trajectory is
always left out with a note (text only), the Parquet mirror when the step's `.pt` is there;
a mirror alone is refused, since train rows need the reward and prompt groups it lacks.

No numpy or pyarrow here (discovery imports this module).
"""
from __future__ import annotations

import os
import re
from typing import Iterator

from ...core.errors import InvalidInputError

_MIRROR = re.compile(r"^rollout_((?:eval_)?(\d+))\.parquet$")
_TRAJECTORY = re.compile(r"^((?:eval_)?(\d+))\.jsonl$")


def _match(path: str):
    parent = os.path.basename(os.path.dirname(os.path.normpath(path)))
    name = os.path.basename(path)
    if parent == "dashboard_columns":
        return "mirror", _MIRROR.match(name)
    if parent == "trajectory":
        return "trajectory", _TRAJECTORY.match(name)
    return None, None


def claims(path: str) -> bool:
    """`.../dashboard_columns/rollout_{id}.parquet` or `.../trajectory/{id}.jsonl`."""
    kind, m = _match(path)
    return m is not None


def step_and_split(path: str) -> tuple[int, str] | None:
    kind, m = _match(path)
    if m is None:
        return None
    return int(m.group(2)), "eval" if m.group(1).startswith("eval_") else "train"


def _dump_of(path: str) -> str:
    kind, m = _match(path)
    return os.path.join(os.path.dirname(os.path.dirname(os.path.normpath(path))), "rollout_data", f"{m.group(1)}.pt")


def skip_note(path: str, options=None, named: bool = False) -> str | None:
    kind, m = _match(path)
    if m is None:
        return None
    if kind == "trajectory":
        return f"{path}: miles trajectory sidecar (conversation text of the step's samples), skipped"
    if os.path.exists(_dump_of(path)):
        return f"{path}: miles dashboard mirror of {_dump_of(path)} (read instead), skipped"
    return None


def read(inp, request, info) -> Iterator:
    """A dashboard mirror without its step's `.pt`: refused, naming what it lacks."""
    raise InvalidInputError(
        f"{inp.display}: reward, status, group_index: missing: miles' dashboard Parquet mirror holds only sample_index, "
        "tokens, response_length, loss_mask and rollout_log_probs; convert the step's rollout_data .pt dump instead"
    )
    yield  # pragma: no cover
