"""Local engines: inline (one process) and a process pool over the machine's cores."""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
from typing import Any, Callable


class _Done:
    def __init__(self, value: Any = None, error: BaseException | None = None):
        self.value, self.error = value, error


class InlineEngine:
    """Runs each task when it is submitted, in this process."""

    def slots(self) -> int:
        return 1

    def submit(self, fn: Callable, *args: Any) -> _Done:
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


class PoolEngine:
    """A pool of worker processes started by a fork server that has the pipeline imported
    (forking a process that already runs Arrow threads is unsafe; spawning each is slow)."""

    def __init__(self, workers: int):
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["rollout_cli.convert"])
        self.workers = workers
        self.pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx)

    def slots(self) -> int:
        return self.workers

    def submit(self, fn: Callable, *args: Any) -> cf.Future:
        return self.pool.submit(fn, *args)

    def wait(self, handles: list) -> list:
        done, _ = cf.wait(handles, return_when=cf.FIRST_COMPLETED)
        return list(done)

    def result(self, handle: cf.Future) -> Any:
        return handle.result()

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
