"""Local engines: inline (one process) and a process pool over the machine's cores. They run
whatever functions they are given; the caller names the modules the pool's workers import.

The pool uses only public multiprocessing API and changes nothing in the calling process: no
start method is set, no environment variable, import hook or `__main__` is touched. Its
workers are processes of their own, and only they take rollout-cli's process settings
(worker_setup.py)."""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
from typing import Any, Callable, Sequence

from .worker_setup import worker_init


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


def start_method() -> str:
    """How pool workers start: from multiprocessing's fork server where the platform has one
    (a worker is forked from that small server process, never from the caller, which may be
    running Arrow's threads), else spawned (Windows)."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


class PoolEngine:
    """A pool of `workers` processes that live as long as the engine: each imports the
    `preload` modules once and then runs task after task. As with any multiprocessing code, a script that
    starts one must guard its entry point (`if __name__ == "__main__":`): a spawned or
    fork-server worker imports the caller's main module."""

    def __init__(self, workers: int, preload: Sequence[str] = (), method: str | None = None):
        self.workers = workers
        self.method = method or start_method()
        self.pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context(self.method),
                                           initializer=worker_init,
                                           initargs=(os.getpid(), tuple(preload), dict(os.environ)))

    def slots(self) -> int:
        return self.workers

    def submit(self, fn: Callable, *args: Any, label: str = "", here: bool = False) -> cf.Future:
        if not here:
            unset = mp.get_start_method(allow_none=True) is None
            future = self.pool.submit(fn, *args)  # may start a worker
            if unset:
                # starting a fork-server or spawned process fixes the caller's default start
                # method as a side effect (multiprocessing.spawn.get_preparation_data calls
                # get_start_method(), up to CPython 3.13 at least): unset it again, as documented
                # for set_start_method, so that the caller can still choose one
                mp.set_start_method(None, force=True)
            return future
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
        self.pool.shutdown(wait=True, cancel_futures=True)
