"""A step's list values in one buffer per column, handed out batch by batch as the batches are
validated, so that a step held in memory combines into one chunk per column without a copy
(core.arrays.concat_adjacent): the validated batch's cast writes its values straight to their
place in the step. Without it, every value is copied once more when the step is combined (at
1 GB, 0.13 s of two cores between the parse and the write)."""
from __future__ import annotations

import numpy as np

from ..core import pages

# the list columns whose values are cast into place, by their type in a validated batch
COLUMNS = {"tokens": np.int32, "loss_mask": np.uint8, "rollout_log_probs": np.float32, "teacher_log_probs": np.float32}


class ValueArena:
    """Room for `bound` values of each column of COLUMNS. `bound` must be at least the step's
    token count (every other column's list is as long as the response, or absent): pages never
    written are never touched, so the room costs no memory. A batch that does not fit gets an
    array of its own, and that column is then combined by copying, as without an arena."""

    def __init__(self, bound: int):
        self.bound = bound
        self._bufs: dict[str, np.ndarray] = {}
        self._used: dict[str, int] = {}

    def take(self, name: str, n: int) -> np.ndarray | None:
        """The next `n` slots of column `name`, or None (not such a column, or no room left)."""
        dtype = COLUMNS.get(name)
        if dtype is None:
            return None
        buf = self._bufs.get(name)
        if buf is None:
            try:  # a mapping of its own, not np.empty (core/pages.py says why)
                buf = np.frombuffer(pages.anonymous(self.bound * np.dtype(dtype).itemsize), dtype, count=self.bound)
            except (OSError, MemoryError, OverflowError):  # no address space for the bound given
                buf = np.zeros(0, dtype)
            self._bufs[name] = buf
            self._used[name] = 0
        used = self._used[name]
        if used + n > len(buf):
            return None
        self._used[name] = used + n
        return buf[used:used + n]
