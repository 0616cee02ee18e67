"""The switches of the fast paths: one place that reads them, so each can be measured on and off
(`bench/machinery.py` runs the 16-step whole run with each one on and off). A fast path
changes how fast the tool runs, never what it writes: the shards are the same bytes either way
(tested). Each switch is an environment variable, `0` for off and `1` for on; anything else,
or unset, is the default below. Where a fast path lives, and what it was measured to buy:

- `ROLLOUT_CLI_EARLY_POOL` (default on): the executable's quick look at its command line and
  the early start of the pool's fork server (entry.py, run/preload.py,
  run/engines/fork_server.py). Claimed: 3% of the CPU of the 16-step JSONL run (4.44 against
  4.57 CPU-s, median of 5) and more of its wall time.
- `ROLLOUT_CLI_DIRECT_IO` (default DIRECT_IO_DEFAULT): shards written with O_DIRECT
  (core/storage.LocalWriter; the loader's huge-page advice, loader `views.large_folios`, exists
  because of it). Claimed: 9% of convert + first load CPU on the 16-step JSONL run (8.15 against
  8.95 CPU-s, medians of 4). It stays the default only while convert + first load gain >= 5%.
- `ROLLOUT_CLI_VALUE_ARENA` (default on): a step held in memory has its list values cast into
  one buffer per column (pipeline/arena.py), so the step combines without a copy; only a Parquet
  input gives the bound it needs (its footer's value count). Claimed: 0.13 s of two cores at 1 GB.
- `ROLLOUT_CLI_ARROW_BY_HAND` (default on): null masks and list lengths read from their Arrow
  buffers by hand (core/arrays.py) instead of through pyarrow.compute, whose import once cost a
  worker 50 ms at the start of every task; a worker now lives as long as the pool, so it would
  pay that import once per run (off: pyarrow.compute's is_null and list_value_length).
"""
from __future__ import annotations

import os

# O_DIRECT for shards unless ROLLOUT_CLI_DIRECT_IO says otherwise: flip it here after measuring
# (`bench/machinery.py --switches direct-io`: convert + first load)
DIRECT_IO_DEFAULT = True

EARLY_POOL = "ROLLOUT_CLI_EARLY_POOL"
DIRECT_IO = "ROLLOUT_CLI_DIRECT_IO"
VALUE_ARENA = "ROLLOUT_CLI_VALUE_ARENA"
ARROW_BY_HAND = "ROLLOUT_CLI_ARROW_BY_HAND"

SWITCHES = {EARLY_POOL: True, DIRECT_IO: DIRECT_IO_DEFAULT, VALUE_ARENA: True, ARROW_BY_HAND: True}


def enabled(name: str) -> bool:
    """Whether the fast path `name` (a key of SWITCHES) is on: its environment variable when it
    says `0` or `1`, its default otherwise."""
    value = os.environ.get(name, "").strip()
    if value == "0":
        return False
    if value == "1":
        return True
    return SWITCHES[name]


def early_pool() -> bool:
    return enabled(EARLY_POOL)


def direct_io() -> bool:
    return enabled(DIRECT_IO)


def value_arena() -> bool:
    return enabled(VALUE_ARENA)


def arrow_by_hand() -> bool:
    return enabled(ARROW_BY_HAND)
