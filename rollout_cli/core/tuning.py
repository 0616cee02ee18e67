"""The switches of the fast paths: one place that reads them, so each can be measured on and off
(`bench/machinery.py` runs the 16-step whole run with each one on and off, in alternating
runs). A fast path changes how fast the tool runs, never what it writes: the shards are the same
bytes either way (tested). Each switch is an environment variable, `0` for off and `1` for on;
anything else, or unset, is the default below. A fast path stays only while it buys >= 5% on the
whole run. Measured 2026-12-04, 2 cores, medians of 5 alternating runs, whole process trees,
16 steps (676 MiB of JSONL; the same samples as Parquet):

- `ROLLOUT_CLI_EARLY_POOL` (default on): the executable's quick look at its command line and
  the early start of the pool's fork server (entry.py, run/preload.py,
  run/engines/fork_server.py). Parquet: 3.34 -> 3.06 CPU-s (8.2%), 1.90 -> 1.71 s wall (10%);
  JSONL: 4.25 -> 4.08 CPU-s (4.0%), 2.32 -> 2.23 s (3.9%). Kept: it buys over 5% on the
  Parquet run, and 4% on JSONL.
- `ROLLOUT_CLI_DIRECT_IO` (default off): shards written with O_DIRECT, past the page cache
  (core/storage.LocalWriter; with it, the loader's huge-page advice, output/views.large_folios).
  The conversion alone costs 8-9% less CPU with it (JSONL 4.49 -> 4.13 CPU-s, Parquet 3.48 ->
  3.20), but convert + the trainer's first load costs more (JSONL 6.25 -> 6.41 CPU-s, -2.6%;
  Parquet 5.33 -> 5.51, -3.4%): the first load then reads every shard from the disk. Opt-in.

Two earlier fast paths went under this budget: a step's list values cast into one buffer per
column so a held step combined without a copy (Parquet +2.4%, JSONL -1.1%), and null masks and
list lengths read from Arrow buffers by hand instead of through pyarrow.compute (+2.7-2.9%).
"""
from __future__ import annotations

import os

STEP_CACHE = "ROLLOUT_CLI_STEP_CACHE"
GATHER_ARENA = "ROLLOUT_CLI_GATHER_ARENA"

SWITCHES = {STEP_CACHE: True, GATHER_ARENA: True}


def enabled(name: str) -> bool:
    """Whether the fast path `name` (a key of SWITCHES) is on: its environment variable when it
    says `0` or `1`, its default otherwise."""
    value = os.environ.get(name, "").strip()
    if value == "0":
        return False
    if value == "1":
        return True
    return SWITCHES[name]


def step_cache() -> bool:
    return enabled(STEP_CACHE)


def gather_arena() -> bool:
    return enabled(GATHER_ARENA)
