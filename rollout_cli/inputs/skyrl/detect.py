"""SkyRL's training-batch dumps: `{export_path}/dumped_data/global_step_{N}_training_input.pkl`.

Written by `trainer.dump_data_batch=true` (NovaSky-AI/SkyRL@a9564572eb8e:
skyrl/train/trainer.py:441-446, 1236-1242), one file per train step, the step in its name.
This module tells them (`claims`, `step_and_split`): what discovery imports, so no numpy here.
"""
from __future__ import annotations

import os
import re

from ...core import storage

_NAME = re.compile(r"^global_step_(\d+)_training_input\.pkl$")
# the global a TensorBatch pickle opens with (its __reduce__, training_batch.py:244-253): the
# module and function names sit in the first frame of a protocol-4 pickle
_REBUILD = b"_rebuild_tensor_batch"
_SKYRL = b"skyrl"
_HEAD_BYTES = 4096


def _head(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(_HEAD_BYTES)
    except OSError:  # unreadable here: the reader reports it
        return b""


def claims(path: str) -> bool:
    """A SkyRL dump: named `global_step_{N}_training_input.pkl`, or any `.pkl` whose first bytes
    are a pickle that rebuilds a SkyRL TensorBatch."""
    if path == "-":
        return False
    name = os.path.basename(path)
    if _NAME.match(name):
        return True
    if storage.is_uri(path) or not name.lower().endswith(".pkl"):
        return False
    head = _head(path)
    return head[:1] == b"\x80" and _REBUILD in head and _SKYRL in head


def step_and_split(path: str) -> tuple[int, str] | None:
    """(N, "train") from `global_step_{N}_training_input.pkl`: SkyRL dumps only the batch it
    trains on (evaluation writes none)."""
    m = _NAME.match(os.path.basename(path))
    return (int(m.group(1)), "train") if m else None
