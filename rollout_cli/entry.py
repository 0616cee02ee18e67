"""The `rollout-cli` executable. Before the command line is parsed (typer and rich take a
while to import), a `convert` that will use the local process pool starts the pool's fork
server, so that it imports the pipeline on another core meanwhile (run/engines/fork_server.py).
The guess is only an early start: without it the pool's workers import the stages themselves.
A `convert` takes its workers' Arrow allocator (run/engines/worker_setup.py) in this process too,
and pandas is refused here (core.no_pandas): a step converted here (`--workers 1`, a one-core
machine) would otherwise import it through `pa.array`.

The quick look at the command line and the early start are one fast path, off with
`ROLLOUT_CLI_EARLY_POOL=0` (core/tuning.py, which says what it was measured to buy)."""
from __future__ import annotations

import sys


def _pool_convert(argv: list[str]) -> bool:
    """`convert` with the default local engine and more than one worker, by a quick look."""
    if not argv or argv[0] != "convert" or "-h" in argv or "--help" in argv:
        return False
    workers_given = False
    for i, a in enumerate(argv):
        value = argv[i + 1] if i + 1 < len(argv) else ""
        if a == "--engine" and value != "local" or a.startswith("--engine=") and a != "--engine=local":
            return False
        if a == "--workers" and value == "1" or a == "--workers=1":
            return False
        workers_given = workers_given or a == "--workers" or a.startswith("--workers=")
    if workers_given:
        return True
    from .core.cores import usable_cores

    return usable_cores() > 1


def main() -> None:
    from .core.no_pandas import refuse_pandas

    refuse_pandas()
    if sys.argv[1:2] == ["convert"]:
        import os

        from .run.engines.worker_setup import worker_environment

        os.environ.update(worker_environment())  # this executable's own environment, before pyarrow loads
    from .core.tuning import early_pool

    if early_pool() and _pool_convert(sys.argv[1:]):
        from .run.preload import start_pool_early

        start_pool_early()
    from .cli.app import main as cli_main

    cli_main()
