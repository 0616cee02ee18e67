"""Local engines: inline (one process) and a process pool over the machine's cores. They run
whatever functions they are given; the caller names the modules the pool's workers preload."""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import importlib.machinery
import multiprocessing as mp
import os
import sys
from typing import Any, Callable, Iterator, Sequence


class _Done:
    def __init__(self, value: Any = None, error: BaseException | None = None):
        self.value, self.error = value, error


class InlineEngine:
    """Runs each task when it is submitted, in this process."""

    def slots(self) -> int:
        return 1

    def submit(self, fn: Callable, *args: Any, label: str = "", here: bool = False) -> _Done:
        try:
            return _Done(fn(*args))
        except Exception as e:  # delivered by result(), as a pool would
            return _Done(error=e)

    def wait(self, handles: list) -> list:
        return list(handles)

    def result(self, handle: _Done) -> Any:
        if handle.error is not None:
            raise handle.error
        return handle.value

    def shutdown(self) -> None:
        pass


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


class _NoPandas:
    """Import finder that refuses pandas. `pa.array` imports pandas (when it is installed) to
    check its argument for pandas types, which costs each fresh worker ~0.3 s; no stage ever
    handles a pandas object, and pyarrow works without it."""

    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("pandas is not used by rollout-cli's pipeline workers", name=name)
        return None


def _worker_allocator() -> None:
    """Workers allocate and free large Arrow buffers (decoded batches, casts, encoder pages):
    they all come from one jemalloc pool (Arrow's own default too, where the fork server could
    set it: _server_environment), which keeps freed pages for a second before it returns them
    (its background thread), so the next batch reuses them. On this kind of machine a fresh
    page costs more than the work done in it: returning freed pages at once (a decay of 0)
    made a 1 GB Parquet step 0.9 s slower (2.8 -> 3.7 s), for 120 MB less peak memory.
    ARROW_DEFAULT_MEMORY_POOL, when set, decides instead. numpy's buffers come from the C
    library's malloc, which after the first large free serves blocks of up to 32 MB from its
    heap and keeps them when freed: a fixed threshold of 1 MiB gives each large buffer its own
    mapping, returned to the system when it is freed."""
    _malloc_threshold(1 << 20)
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    import pyarrow as pa

    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:  # a pyarrow built without jemalloc keeps its default
        pass


def _malloc_threshold(nbytes: int) -> None:
    from ...core.libc import libc

    mallopt = getattr(libc(), "mallopt", None)
    if mallopt is not None:  # glibc's; another C library keeps its own policy
        mallopt(-3, nbytes)  # M_MMAP_THRESHOLD


def _worker_init(parent: int, environ: dict | None = None) -> None:
    """Pool-worker initializer: take the caller's current environment (the fork server may
    predate it: storage credentials and endpoints live there), refuse pandas and set the
    allocator (see _NoPandas, _worker_allocator), and end the worker once the converter process
    is gone. A SIGKILLed converter otherwise leaves its workers (and the fork server) running,
    still writing into OUT/.staging."""
    import threading
    import time

    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    if "pandas" not in sys.modules:
        sys.meta_path.insert(0, _NoPandas())
    _worker_allocator()

    def watch() -> None:
        while not _gone(parent):
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, name="rollout-cli-parent-watch", daemon=True).start()


@contextlib.contextmanager
def _main_not_rerun() -> Iterator[None]:
    """While workers may start, mark the caller's __main__ (a script, a notebook, `python -m
    mod`) as one multiprocessing must not re-run: it would import it in every new worker,
    running an unguarded script's top level again, and the stage functions need only this
    package. Worker processes are also started by the pool's own thread (a fresh one after each
    task), so the mark stays for the pool's life; it is a `__spec__` named `__main__`, which
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
def _server_env() -> Iterator[None]:
    """The caller's environment with _server_environment's additions, while the server starts."""
    added = _server_environment()
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


_started_early = False
_SERVER_MODULE = __name__.rsplit(".", 1)[0] + ".server"  # imported by the fork server alone


def _server_preload(preload: Sequence[str]) -> list[str]:
    return [_SERVER_MODULE, *(m for m in preload if m != _SERVER_MODULE)]


def start_early(preload: Sequence[str]) -> None:
    """Start the fork server now, importing the modules `preload` names (what the pool's tasks
    will run), so that it imports them while the caller is still importing its own modules (on
    another core): the pool's first workers then start at once."""
    global _started_early
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_server_preload(preload))
    from multiprocessing import forkserver

    with _main_not_rerun(), _server_env():  # the server would import the caller's __main__ too
        forkserver.ensure_running()
    _started_early = True


def started_early() -> bool:
    """Whether start_early ran in this process (its fork server has the stages imported)."""
    return _started_early


class PoolEngine:
    """A pool of worker processes started by a fork server that has the `preload` modules
    imported (forking a process that already runs Arrow threads is unsafe; spawning each is
    slow). Each task gets a fresh process, so the memory a task held is returned before the
    next one runs."""

    def __init__(self, workers: int, preload: Sequence[str] = ()):
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(_server_preload(preload))
        self.workers = workers
        self._main = _main_not_rerun()
        self._main.__enter__()
        self.pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                                           initargs=(os.getpid(), dict(os.environ)), max_tasks_per_child=1)
        from multiprocessing import forkserver

        with _server_env():  # started here rather than at the first task
            forkserver.ensure_running()

    def slots(self) -> int:
        return self.workers

    def submit(self, fn: Callable, *args: Any, label: str = "", here: bool = False) -> cf.Future:
        if not here:
            return self.pool.submit(fn, *args)
        done: cf.Future = cf.Future()
        try:
            done.set_result(fn(*args))
        except Exception as e:  # delivered by result(), as a worker's error would be
            done.set_exception(e)
        return done

    def wait(self, handles: list) -> list:
        done, _ = cf.wait(handles, return_when=cf.FIRST_COMPLETED)
        return list(done)

    def result(self, handle: cf.Future) -> Any:
        return handle.result()

    def shutdown(self) -> None:
        try:
            self.pool.shutdown(wait=True, cancel_futures=True)
        finally:
            self._main.__exit__(None, None, None)
