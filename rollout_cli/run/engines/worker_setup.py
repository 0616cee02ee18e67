"""The process settings of rollout-cli's own worker processes (pool workers, and the
executable's fork server they are forked from). Nothing here runs in a library caller's
process."""
from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
import time
from typing import Sequence

from ...core.no_pandas import refuse_pandas


@functools.lru_cache(maxsize=None)
def arrow_has_jemalloc() -> bool:
    """Whether the installed pyarrow was built with jemalloc, read from the build's config
    header without importing pyarrow (that would fix this process's Arrow allocator)."""
    import importlib.util

    spec = importlib.util.find_spec("pyarrow")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(os.path.join(folder, "include", "arrow", "util", "config.h")) as f:
                return any(line.split() == ["#define", "ARROW_JEMALLOC"] for line in f)
        except OSError:
            continue
    return False


# jemalloc's decay off: Arrow's jemalloc hands every freed page back to the OS at once (its decay
# is 0), so each step's decode and encode buffers were faulted in afresh, zeroed by the kernel;
# kept, the next step reuses them (16-step run, 2 workers, median of 3: Parquet 3.17 against
# 3.42 CPU-s, JSONL 4.30 against 4.53). A worker's memory stays at its own peak, a few steps.
# With nothing to purge, jemalloc's background thread has no work: off, so that importing
# pyarrow starts no thread and the executable can fork its workers (local.fork_ready).
JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1,background_thread:false"


# numpy's OpenBLAS starts a thread per extra core when numpy is imported, and each spins for
# about 0.1 CPU-s waiting for work that never comes (nothing here calls BLAS): the executable
# and its fork server each paid it, on the cores the workers need (16-step run, 2 workers,
# alternating runs, medians: Parquet 2.36 -> 2.26 CPU-s, 1.39 -> 1.33 s (11); JSONL 3.03 -> 2.96
# CPU-s, 1.72 -> 1.69 s (9)).
BLAS_THREADS = "1"


# The C library's malloc (numpy's arrays, Python's large objects) keeps what a step frees for the
# next, as Arrow's jemalloc does (JEMALLOC_CONF): a buffer up to MMAP_THRESHOLD bytes comes from
# its heap instead of a mapping of its own, and up to TRIM_THRESHOLD bytes of free heap stay
# mapped. With its defaults (a threshold that adapts, a heap cut back as soon as twice that lies
# free) a chunk's concatenated lists kept landing in fresh pages, each faulted in and zeroed by
# the kernel (16-step whole run, 8 alternating runs, 2026-12-06: JSONL 3.08 -> 2.96 CPU-s,
# 1.81 -> 1.75 s; Parquet 2.21 -> 2.15 CPU-s, 1.38 -> 1.35 s; bench/results/machinery-malloc.json).
MMAP_THRESHOLD = 64 << 20
TRIM_THRESHOLD = 256 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (glibc's malloc.h)
_MALLOC_TUNED = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES")


def keep_freed_memory() -> None:
    """Set the C library's malloc as above (mallopt), unless the environment tunes malloc
    itself; nothing where the C library has no mallopt (not Linux)."""
    from ...core.libc import libc

    if any(k in os.environ for k in _MALLOC_TUNED):
        return
    lib = libc()
    mallopt = getattr(lib, "mallopt", None) if lib is not None else None
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)


def worker_environment() -> dict[str, str]:
    """What a worker's environment adds, where the caller has not set it:
    OPENBLAS_NUM_THREADS (BLAS_THREADS, read when numpy loads),
    ARROW_DEFAULT_MEMORY_POOL=jemalloc where pyarrow has it, and jemalloc's configuration
    (JE_ARROW_MALLOC_CONF, read when pyarrow loads: JEMALLOC_CONF). Arrow picks its default
    pool when pyarrow is imported, and the Parquet writer takes its page buffers from that pool
    whatever pool it is handed; the wheels' mimalloc kept 70-110 MB resident after a 75 MB
    step's shard was encoded, where one jemalloc pool reuses freed buffers for the next batch."""
    env = {}
    if "OPENBLAS_NUM_THREADS" not in os.environ:
        env["OPENBLAS_NUM_THREADS"] = BLAS_THREADS
    if sys.platform.startswith("linux") and arrow_has_jemalloc():
        if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
            env["ARROW_DEFAULT_MEMORY_POOL"] = "jemalloc"
        if "JE_ARROW_MALLOC_CONF" not in os.environ:
            env["JE_ARROW_MALLOC_CONF"] = JEMALLOC_CONF
    return env


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # killed, not yet reaped by its parent
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def _allocator() -> None:
    """Arrow's buffers come from one jemalloc pool (worker_environment), which keeps freed
    pages for the next batch; numpy's from the C library's malloc, set by keep_freed_memory
    (fixing its threshold at 1 MiB instead, each large buffer a mapping of its own returned
    when freed, cost a worker that converts step after step 8% more CPU in page faults:
    16-step JSONL run, 4.44 against 4.08 CPU-s, sys 0.99 against 0.69, median of 5)."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    import pyarrow as pa

    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:  # a pyarrow built without jemalloc keeps its default
        pass


def worker_init(parent: int, preload: Sequence[str], environ: dict[str, str]) -> None:
    """Pool-worker initializer: take the caller's current environment (a fork server may
    predate it: storage credentials and endpoints live there) plus worker_environment's,
    refuse pandas (core.no_pandas), import the stage modules, set the allocator, and end the
    worker once the converting process is gone (a SIGKILLed converter otherwise leaves its
    workers running, still writing into OUT/.staging)."""
    os.environ.clear()
    os.environ.update(environ)
    if "pyarrow" not in sys.modules:
        os.environ.update(worker_environment())
    keep_freed_memory()
    refuse_pandas()
    for name in preload:
        importlib.import_module(name)
    _allocator()

    def watch() -> None:
        while not _gone(parent):
            time.sleep(0.2)
        os._exit(1)  # this worker's own exit: its parent, which would collect it, is gone

    threading.Thread(target=watch, name="rollout-cli-parent-watch", daemon=True).start()
