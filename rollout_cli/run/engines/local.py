"""Local engines: inline (one process) and a process pool over the machine's cores. They run
whatever functions they are given; the caller names the modules the pool's workers preload."""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import sys
from typing import Any, Callable, Sequence

from ...core.no_pandas import refuse_pandas
from .fork_server import main_not_rerun, server_env, server_preload


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


def _worker_allocator() -> None:
    """Workers allocate and free large Arrow buffers (decoded batches, casts, encoder pages):
    they all come from one jemalloc pool (Arrow's own default too, where the fork server could
    set it: fork_server._server_environment), which keeps freed pages for a second before it
    returns them (its background thread), so the next batch reuses them. On this kind of machine a fresh
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
    allocator (core.no_pandas, _worker_allocator), and end the worker once the converter process
    is gone. A SIGKILLed converter otherwise leaves its workers (and the fork server) running,
    still writing into OUT/.staging."""
    import gc
    import threading
    import time

    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    refuse_pandas()
    _worker_allocator()
    gc.freeze()  # what the fork server imported (it collected nothing meanwhile: server_setup.py)
    gc.enable()

    def watch() -> None:
        while not _gone(parent):
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, name="rollout-cli-parent-watch", daemon=True).start()


class _Pool(cf.ProcessPoolExecutor):
    """A process pool that replaces a worker that ended (one task per worker) only while work
    is waiting; otherwise the next submit starts one. After the last task, the stock pool starts
    a fresh worker that its shutdown then waits for, only to stop it (~10 ms at the end of every
    run). Both callers hold the pool's lock, and submit records its work before it asks."""

    def _adjust_process_count(self):
        if getattr(self, "_pending_work_items", True):
            super()._adjust_process_count()


class PoolEngine:
    """A pool of worker processes started by a fork server that has the `preload` modules
    imported (forking a process that already runs Arrow threads is unsafe; spawning each is
    slow). Each task gets a fresh process, so the memory a task held is returned before the
    next one runs."""

    def __init__(self, workers: int, preload: Sequence[str] = ()):
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(server_preload(preload))
        self.workers = workers
        self._main = main_not_rerun()
        self._main.__enter__()
        self.pool = _Pool(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                          initargs=(os.getpid(), dict(os.environ)), max_tasks_per_child=1)
        from multiprocessing import forkserver

        with server_env():  # started here rather than at the first task
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
