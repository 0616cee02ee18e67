"""Memory in a mapping of its own: page-aligned, zero-filled, and
never backed by transparent huge pages (numpy asks for them on large arrays; on this kind of
machine faulting them in, zeroing 2 MiB at a time and compacting memory for them, made a 1 GB
step 0.3 s slower and its time erratic). Private to the process: a shared anonymous mapping,
mmap's default, is backed by shmem, whose pages cost more to fault in (35 MB cast into place:
20-27 against 17-19 ms)."""
from __future__ import annotations

import mmap


def anonymous(nbytes: int) -> mmap.mmap:
    """`nbytes` (at least 1) of fresh memory; pages never written are never touched."""
    size = max(1, nbytes)
    private = getattr(mmap, "MAP_PRIVATE", None)  # fd -1 adds MAP_ANONYMOUS
    return mmap.mmap(-1, size) if private is None else mmap.mmap(-1, size, flags=private)
