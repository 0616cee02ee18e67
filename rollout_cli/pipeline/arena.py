"""A step's list values in one buffer per column, handed out batch by batch as the batches are
validated, so that a step held in memory combines into one chunk per column without a copy
(core.arrays.concat_adjacent): the validated batch's cast writes its values straight to their
place in the step. Without it, every value is copied once more when the step is combined (at
1 GB, 0.13 s of two cores between the parse and the write).

This module is the arena's one boundary: the task that holds a step makes one (`for_step`,
None when `ROLLOUT_CLI_VALUE_ARENA=0`, core/tuning.py) and validates each chunk `placing` it;
the column engine asks `take` for room. The validator's API does not carry it, and the shards
are the same bytes with or without it (only where the values lie in memory differs)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from ..core import pages
from ..core.tuning import value_arena

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


# the arena of the chunk being validated in this thread (placing), or None
_placing: ContextVar[ValueArena | None] = ContextVar("rollout_cli_value_arena", default=None)


def for_step(bound: int | None) -> ValueArena | None:
    """An arena for a held step of at most `bound` values per column; None when the bound is
    unknown or the fast path is off (ROLLOUT_CLI_VALUE_ARENA=0)."""
    if bound is None or not value_arena():
        return None
    return ValueArena(bound)


@contextmanager
def placing(arena: ValueArena | None) -> Iterator[None]:
    """Within: the column engine casts the valid rows' long lists into `arena` (take); with None,
    each batch keeps arrays of its own."""
    token = _placing.set(arena)
    try:
        yield
    finally:
        _placing.reset(token)


def take(name: str, n: int) -> np.ndarray | None:
    """The next `n` slots of column `name` in the arena being placed into, or None (no arena,
    not such a column, or no room left)."""
    arena = _placing.get()
    return None if arena is None else arena.take(name, n)
