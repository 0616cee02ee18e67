"""The switches of the fast paths: one place that reads them, so each can be measured on and off.
A fast path changes how fast the tool runs, never what it writes or serves. Each switch is an
environment variable, `0` for off and `1` for on; anything else, or unset, is the default
below. A fast path stays only while it buys >= 5% of the 16-step whole run on its one stated
metric (medians of >= 5 alternating runs; docs/design.md):

- `ROLLOUT_CLI_STEP_CACHE` (default on): the batch iterators of one opened output share its
  mapped shards and each step's plan (output/stepcache.py). Metric: CPU-s of an epoch served
  by one process to every rank (`bench/loader.py --switches step-cache`: 16 steps, 4 shards,
  world size 6, budget 16,384 tokens; 2026-12-06): 186 ms with it against 384 ms without
  (51%; the torch batches 221 against 428). One rank per process: 361 against 394 ms.
- `ROLLOUT_CLI_DIRECT_IO` (default on): shards and their IPC copies are written with O_DIRECT,
  past the page cache (core/storage.LocalWriter), and the loader asks for huge pages where it
  maps them (output/views.large_folios). Metric: CPU-s of convert + the trainer's first load
  (`bench/machinery.py --switches direct-io --reps 6`, 16 steps, quiet machine, 2026-12-06):
  JSONL 4.58 with it against 4.93 without (7.0%), Parquet 3.93 against 4.23 (7.1%); the
  conversion alone 13% and 16% of its CPU-s (on this kind of VM a page-cache write lands in
  cold pages, docs/performance.md).
- `ROLLOUT_CLI_FORK_WORKERS` (default on): the `rollout-cli` executable forks its pool's
  workers from itself once it has imported the stages, while it runs one thread
  (run/engines/local.fork_ready), instead of starting multiprocessing's fork server, whose
  workers each import them again. Metric: CPU-s of the conversion (`bench/machinery.py
  --switches fork-workers --reps 6`, quiet machine, 2026-12-06, `O_DIRECT` on): 16 steps JSONL
  2.90 against 3.21 (9.6%), Parquet 2.02 against 2.23 (9.3%); the wall 8.3% and 7.5%. At 64
  steps, where the saved imports weigh less: 4.2% and 5.4%.

Not taken, under the budget: each full O_DIRECT chunk written on a thread of the writer's own
while the encoder fills another (wall 0.5% and 2.6% lower, CPU 2.7% and 1.7% higher;
`bench/results/machinery-write-behind.json`). Gone under the budget: the early fork server
(Parquet 1.1% of the CPU-s, JSONL 8.1%, the wall worse on both;
`bench/results/machinery-direct-io-early-pool.json`), the loader's gather arena (186 against
185 CPU-ms on the epoch above) and, earlier, a held step's values cast into one buffer per
column. (Null masks and list lengths are read from Arrow's layout again, core/arrays.py: not a
second path, the only one, since nothing else in a plain conversion imports pyarrow.compute.)
"""
from __future__ import annotations

import os

STEP_CACHE = "ROLLOUT_CLI_STEP_CACHE"
DIRECT_IO = "ROLLOUT_CLI_DIRECT_IO"
FORK_WORKERS = "ROLLOUT_CLI_FORK_WORKERS"

SWITCHES = {STEP_CACHE: True, DIRECT_IO: True, FORK_WORKERS: True}


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


def direct_io() -> bool:
    return enabled(DIRECT_IO)


def fork_workers() -> bool:
    return enabled(FORK_WORKERS)
