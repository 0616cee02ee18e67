"""Local engines: inline (one process) and a process pool over the machine's cores. They run
whatever functions they are given; the caller names the modules the pool's workers import.

The pool uses only public multiprocessing API and changes nothing in a library caller's process:
no start method is set, no environment variable, import hook or `__main__` is touched. Its
workers are processes of their own, and only they take rollout-cli's process settings
(worker_setup.py). In the `rollout-cli` executable's own process (`claim_process`), and only
while it runs no other thread, the workers are forked from it once it has imported the stages
(`fork_ready`)."""
from __future__ import annotations

import concurrent.futures as cf
import gc
import importlib
import multiprocessing as mp
import os
import sys
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


_OWN_PROCESS = False


def claim_process() -> None:
    """Say that this process is the `rollout-cli` executable's: its pools may fork it."""
    global _OWN_PROCESS
    _OWN_PROCESS = True


def _single_threaded() -> bool:
    try:
        return len(os.listdir("/proc/self/task")) == 1  # native threads too, not only Python's
    except OSError:
        return False


def fork_ready() -> bool:
    """Whether a pool may fork this process: it is the executable's (claim_process) and runs
    one thread, on a platform with fork, and the switch is on (core/tuning.FORK_WORKERS, with
    its figure). Its workers then inherit the imported stages instead of a fork server's and
    each worker's own imports (each ~0.25 CPU-s)."""
    from ...core.tuning import fork_workers

    # Linux only: elsewhere fork is unsafe with system libraries (macOS) or absent (Windows)
    return _OWN_PROCESS and fork_workers() and sys.platform.startswith("linux") and _single_threaded()


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
        if method is None and fork_ready():
            for name in preload:
                importlib.import_module(name)
            method = "fork" if _single_threaded() else None  # an import may have started a thread
        self.method = method or start_method()
        self._submitted: list[cf.Future] = []
        self.pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context(self.method),
                                           initializer=worker_init,
                                           initargs=(os.getpid(), tuple(preload), dict(os.environ)))
        if self.method == "fork":
            # what this process holds now (the imported stages) leaves the collector's view:
            # no collection, here or in a worker, walks it again (nor writes its pages, which
            # the workers share), and the interpreter's exit skips it. 16-step whole run, 8
            # alternating runs (bench/results/machinery-gc-freeze.json): JSONL 1.75 -> 1.72 s,
            # 2.95 -> 2.92 CPU-s; Parquet 1.32 -> 1.27 s, 2.08 -> 2.03 CPU-s
            gc.freeze()
            # the executor forks all its workers at its first task: give it one now, before
            # this process starts any thread of its own (the inputs' fingerprints)
            self.pool.submit(int)

    def slots(self) -> int:
        return self.workers

    def submit(self, fn: Callable, *args: Any, label: str = "", here: bool = False) -> cf.Future:
        if not here:
            unset = mp.get_start_method(allow_none=True) is None
            future = self.pool.submit(fn, *args)  # may start a worker
            self._submitted = [f for f in self._submitted if not f.done()] + [future]
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
        """Stop the workers. While a task runs, wait for it (the caller then cleans up what it
        may be writing); once all are done, the idle workers exit while the caller goes on (a
        run commits meanwhile: 16-step whole run, 12 alternating runs, 10 ms less), and the
        executor collects them (the interpreter's exit waits for that)."""
        busy = any(not f.done() for f in self._submitted)
        self.pool.shutdown(wait=busy, cancel_futures=True)
