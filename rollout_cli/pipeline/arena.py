"""A step's list values in one buffer per column, handed out batch by batch as the batches are
validated, so that a step held in memory combines into one chunk per column without a copy
(core.arrays.concat_adjacent): the validated batch's cast writes its values straight to their
place in the step. Without it, every value is copied once more when the step is combined (at
1 GB, 0.13 s of two cores between the parse and the write)."""
from __future__ import annotations

import mmap

import numpy as np

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
            # an anonymous mapping, not np.empty: numpy asks for transparent huge pages on
            # large arrays, and on this kind of machine faulting them in (zeroing 2 MiB at a
            # time, compacting memory for them) made a 1 GB step 0.3 s slower and its time
            # erratic. Private: a shared one (mmap's default) is backed by shmem, whose pages
            # cost more to fault in (35 MB cast into place: 20-27 against 17-19 ms)
            try:
                size = max(1, self.bound * np.dtype(dtype).itemsize)
                private = getattr(mmap, "MAP_PRIVATE", None)  # fd -1 adds MAP_ANONYMOUS
                room = mmap.mmap(-1, size) if private is None else mmap.mmap(-1, size, flags=private)
                buf = np.frombuffer(room, dtype, count=self.bound)
            except (OSError, MemoryError, OverflowError):  # no address space for the bound given
                buf = np.zeros(0, dtype)
            self._bufs[name] = buf
            self._used[name] = 0
        used = self._used[name]
        if used + n > len(buf):
            return None
        self._used[name] = used + n
        return buf[used:used + n]
