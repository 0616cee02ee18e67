"""Telling ROLL's rollout mock dumps: `{dump_dir}/{train,val}/step_{NNNNNN}.pkl`.

ROLL's `RolloutMockMixin._dump_batch` (alibaba/ROLL@8eb27cc2dc34:
roll/distributed/scheduler/rollout_mock_mixin.py:133-157) pickles the step's `DataProto` to
`os.path.join(dump_dir, mode, f"step_{global_step:06d}.pkl")`, `mode` the scheduler's `train`
or `val` (rollout_mock_mixin.py:57-70), with `pickle.HIGHEST_PROTOCOL`. The first opcodes name
the class, `roll.distributed.scheduler.protocol.DataProto`: a file at that path whose first bytes
name it is claimed. Discovery imports this module in the converting process: no numpy here.
"""
from __future__ import annotations

import os
import re

_PATH = re.compile(r"(?:^|/)(train|val)/step_(\d+)\.pkl$")
MODULE = b"roll.distributed.scheduler.protocol"
_HEAD_BYTES = 4096


def _posix(path: str) -> str:
    return path.replace(os.sep, "/") if os.sep != "/" else path


def claims(path: str) -> bool:
    """A ROLL mock dump: at ROLL's path, and its first bytes name ROLL's DataProto."""
    if path == "-" or _PATH.search(_posix(path)) is None:
        return False
    from ...core import storage

    if storage.is_uri(path):  # by its path alone: the converting process opens no remote file to plan
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD_BYTES)
    except Exception:  # unreadable: nothing else reads a .pkl file either
        return False
    return MODULE in head


def step_and_split(path: str) -> tuple[int, str] | None:
    """The step from `step_{N}.pkl`; `val/` is the eval split (ROLL's validation scheduler)."""
    m = _PATH.search(_posix(path))
    if m is None:
        return None
    return int(m.group(2)), "train" if m.group(1) == "train" else "eval"
