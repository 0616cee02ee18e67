"""What the batch iterators of one opened output share (output/batches.py): the shards of the
steps being served, mapped and unpacked once, and each step's plan (every rank's
micro-batches) made once. A single controller that serves every data-parallel rank from one
process (`zip(*(out.iter_batches(r, world_size=W) for r in range(W)))`, as slime's rollout
manager splits a step over its ranks) thus maps each shard and plans each step once, not once
per rank. A trainer running one rank per process shares nothing and loses nothing.

Bounded: the pieces of the last `STEPS_KEPT` step (their mappings and views; a batch handed
out keeps its own alive) and the last `PLANS_KEPT` plans (row indices: kilobytes a step).
Pickles empty, so an output handed to a spawned DataLoader worker starts it afresh.
"""
from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from typing import Any, Callable

from ..core import tuning

__all__ = ["StepCache", "of", "STEPS_KEPT", "PLANS_KEPT"]

# one, as an iterator held its own before: a controller's iterators gather a step's rows as
# they enter it (the batches keep what they need), so the next step may evict it; an output
# on an object store holds its shards in memory, where a second step would double it
STEPS_KEPT = 1
# plans are small; enough that iterators consumed one after another (rank 0's whole run, then
# rank 1's ...) still plan each step once on runs of a few hundred steps
PLANS_KEPT = 1024


class StepCache:
    """Pieces by (split, step, source) -> {shard: piece}, plans by key; both least recently
    used first out. Thread-safe: the lock covers lookups and insertions, not the reads, so
    two threads may read the same shard once each (the first stored wins)."""

    def __init__(self):
        self._lock = threading.Lock()
        _LIVE.add(self)
        self._pieces: OrderedDict[tuple, dict[int, Any]] = OrderedDict()
        self._plans: OrderedDict[tuple, Any] = OrderedDict()
        self._verified: set[tuple] = set()

    def __reduce__(self):
        return (StepCache, ())

    def piece(self, key: tuple, shard: int, read: Callable[[], Any], fresh: bool = False) -> Any:
        """The piece of `shard` under step key `key`, read with `read()` when not held (or
        when `fresh`: read again and replace, as a digest check needs)."""
        with self._lock:
            held = self._pieces.get(key)
            if held is not None:
                self._pieces.move_to_end(key)
                if shard in held and not fresh:
                    return held[shard]
        got = read()
        with self._lock:
            held = self._pieces.setdefault(key, {})
            self._pieces.move_to_end(key)
            if fresh or shard not in held:
                held[shard] = got
            while len(self._pieces) > STEPS_KEPT:
                self._pieces.popitem(last=False)
            return held[shard]

    def verified(self, key: tuple) -> bool:
        """Whether the shard under `key` had its digest checked in this process."""
        return key in self._verified

    def mark_verified(self, key: tuple) -> None:
        with self._lock:
            self._verified.add(key)

    def plan(self, key: tuple, make: Callable[[], Any]) -> Any:
        """The plan under `key`, made with `make()` when not held."""
        with self._lock:
            if key in self._plans:
                self._plans.move_to_end(key)
                return self._plans[key]
        got = make()
        with self._lock:
            got = self._plans.setdefault(key, got)
            self._plans.move_to_end(key)
            while len(self._plans) > PLANS_KEPT:
                self._plans.popitem(last=False)
            return got


# a DataLoader worker forked while another thread held a cache's lock would wait forever on it:
# the child starts every cache's lock afresh (what it holds stays valid: private mappings)
_LIVE: "weakref.WeakSet[StepCache]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for cache in list(_LIVE):
        cache._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def of(output) -> StepCache:
    """The cache of an opened output (output/model.py's Output), made on first use; with the
    switch off (core/tuning.py), one of the caller's own, shared with no other iterator."""
    if not tuning.step_cache():
        return StepCache()
    slot = output._shared
    cache = slot.get("steps")
    if cache is None:
        cache = slot.setdefault("steps", StepCache())
    return cache
