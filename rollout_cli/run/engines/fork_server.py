"""The `rollout-cli` executable's early start of its pool's fork server: started before the
command line is parsed, the server imports the stage modules on another core while the CLI
imports its own (typer, rich), and every worker forked from it has them imported already.
Only the executable calls this: it sets the fork server's preload list and environment, which
are process-wide, so a library caller's process never runs it. Measured: 3% of the CPU of the
16-step JSONL run (4.44 against 4.57 CPU-s, median of 5) and more of its wall time; off with
`ROLLOUT_CLI_EARLY_POOL=0` (core/tuning.py)."""
from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Sequence

_started_early = False


def start_early(preload: Sequence[str]) -> None:
    """Start multiprocessing's fork server now, importing the `preload` modules (what the
    pool's tasks will run), with the workers' environment additions (worker_setup); a no-op
    where the platform has no fork server (the pool then spawns its workers)."""
    global _started_early
    if "forkserver" not in mp.get_all_start_methods():
        return
    from multiprocessing import forkserver

    from .worker_setup import worker_environment

    os.environ.update(worker_environment())  # this executable's own environment: its workers inherit it
    mp.get_context("forkserver").set_forkserver_preload(list(preload))
    forkserver.ensure_running()
    _started_early = True


def started_early() -> bool:
    """Whether start_early ran in this process (its fork server has the stages imported)."""
    return _started_early
