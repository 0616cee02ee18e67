"""The local pool's fork server: what it imports, the environment it starts with, and an
early start. The executable starts it before it parses its command line, so this module imports
little beyond multiprocessing (each millisecond here delays the first worker)."""
from __future__ import annotations

import contextlib
import importlib.machinery
import os
import sys
from collections.abc import Iterator, Sequence


@contextlib.contextmanager
def main_not_rerun() -> Iterator[None]:
    """While workers may start, mark the caller's __main__ (a script, a notebook, `python -m
    mod`) as one multiprocessing must not re-run: it would import it in every new worker,
    running an unguarded script's top level again, and the stage functions need only this
    package. Worker processes are also started by the pool's own thread (a fresh one after a
    task, while work waits), so the mark stays for the pool's life; it is a `__spec__` named `__main__`, which
    multiprocessing skips, and the old value comes back afterwards."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    missing = object()
    old = main.__dict__.get("__spec__", missing)
    main.__spec__ = importlib.machinery.ModuleSpec("__main__", None)
    try:
        yield
    finally:
        if old is missing:
            del main.__spec__
        else:
            main.__spec__ = old


def _arrow_has_jemalloc() -> bool:
    """Whether the installed pyarrow was built with jemalloc, read from the build's config
    header (importing pyarrow here would fix this process's Arrow allocator, and cost 0.1 s)."""
    import importlib.util

    spec = importlib.util.find_spec("pyarrow")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(os.path.join(folder, "include", "arrow", "util", "config.h")) as f:
                return any(line.split() == ["#define", "ARROW_JEMALLOC"] for line in f)
        except OSError:
            continue
    return False


def _server_environment() -> dict[str, str]:
    """What the fork server's environment adds to the caller's while it starts (each only where
    the caller has not set it):

    - OPENBLAS_NUM_THREADS=1: the server imports numpy, whose OpenBLAS would start a thread per
      core that spins for a while (a fifth of a CPU-second per conversion on two cores), and no
      stage does linear algebra.
    - ARROW_DEFAULT_MEMORY_POOL=jemalloc, where pyarrow has it: Arrow's own default pool
      (mimalloc in the wheels) is chosen when the server imports pyarrow, and the Parquet
      writer takes its page buffers from it whatever pool it is handed; mimalloc kept 70-110 MB
      of those resident after a 75 MB step's shard was encoded. With every Arrow allocation in
      one jemalloc pool, freed buffers are reused by the next batch (see _worker_allocator).

    The workers it forks take the caller's own environment back (_worker_init)."""
    env = {}
    if "OPENBLAS_NUM_THREADS" not in os.environ:
        env["OPENBLAS_NUM_THREADS"] = "1"
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ and sys.platform.startswith("linux") and _arrow_has_jemalloc():
        env["ARROW_DEFAULT_MEMORY_POOL"] = "jemalloc"
    return env


@contextlib.contextmanager
def server_env() -> Iterator[None]:
    """The caller's environment with _server_environment's additions, while the server starts."""
    added = _server_environment()
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


_started_early = False
_ENGINES = __name__.rsplit(".", 1)[0]
_SERVER_SETUP = _ENGINES + ".server_setup"  # imported by the fork server alone
# What every worker imports after its fork, whatever its tasks: the pool's side of
# multiprocessing and the worker's initializer. Imported once in the server instead, they do
# not cost each worker ~10 ms after its fork.
_WORKER_SIDE = ("concurrent.futures.process", "multiprocessing.queues", "multiprocessing.synchronize",
                "multiprocessing.popen_forkserver", _ENGINES + ".local", _ENGINES.split(".", 1)[0] + ".core.libc")


def server_preload(preload: Sequence[str]) -> list[str]:
    """What the fork server imports: its own settings (server_setup.py) first, the worker side
    of the pool, then `preload`."""
    first = [_SERVER_SETUP, *_WORKER_SIDE]
    return first + [m for m in preload if m not in first]


def start_early(preload: Sequence[str]) -> None:
    """Start the fork server now, importing the modules `preload` names (what the pool's tasks
    will run), so that it imports them while the caller is still importing its own modules (on
    another core): the pool's first workers then start at once."""
    global _started_early
    import multiprocessing as mp
    from multiprocessing import forkserver

    mp.get_context("forkserver").set_forkserver_preload(server_preload(preload))
    # main_not_rerun: the server would import the caller's __main__ too
    with main_not_rerun(), server_env(), _tracker_later():
        forkserver.ensure_running()
    _started_early = True


@contextlib.contextmanager
def _tracker_later() -> Iterator[None]:
    """While the fork server is started early, leave multiprocessing's resource tracker (another
    interpreter) for later: the pool starts it when it makes its queues, once the caller has
    parsed its command line and waits. Started first, as multiprocessing does, it took a third
    of a core from the server's imports on a two-core machine. The server itself never talks to
    the tracker; each worker it forks is handed the tracker's descriptor by the caller."""
    from multiprocessing import resource_tracker

    start = resource_tracker.ensure_running
    resource_tracker.ensure_running = lambda: None
    try:
        yield
    finally:
        resource_tracker.ensure_running = start


def started_early() -> bool:
    """Whether start_early ran in this process (its fork server has the stages imported)."""
    return _started_early
