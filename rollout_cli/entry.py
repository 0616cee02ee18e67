"""The `rollout-cli` executable. Before the command line is parsed (typer and rich take a
while to import), a `convert` that will use the local process pool starts the pool's fork
server, so that it imports the pipeline on another core meanwhile. The guess is only an
early start: `convert` itself starts the fork server when it is not running. OpenBLAS is
kept to one thread (OPENBLAS_NUM_THREADS, unless set) and pandas is refused (core.no_pandas):
nothing here uses either. The objects its imports create are frozen rather than traversed by
the garbage collector again and again while they are made."""
from __future__ import annotations

import gc
import os
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
    # numpy's OpenBLAS starts a thread per core at import that spins for a while, on the core
    # the fork server's imports need; no command does linear algebra
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from .core.no_pandas import refuse_pandas

    refuse_pandas()  # a step converted here (--workers 1, a one-core machine) would import it
    gc.disable()  # the imports below create objects that live as long as the process
    if _pool_convert(sys.argv[1:]):
        from .run.preload import start_pool_early

        start_pool_early()
    from .cli.app import main as cli_main

    gc.freeze()  # never traversed again; the command's own objects are collected as usual
    gc.enable()

    try:
        cli_main()
    except SystemExit as e:
        _leave(e.code)
    _leave(0)


def _leave(code) -> None:
    """Exit at once with `code` (as SystemExit reads it), skipping the interpreter's teardown:
    the command has closed and synced its files and shut its workers and Ray down, and freeing
    every imported module's objects would take longer than a small conversion's commit."""
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said
            pass
    os._exit(code)
