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


def _lean_allocator() -> None:
    """Workers allocate and free large Arrow buffers (parsed batches, encoder scratch, pieces);
    jemalloc, told to return freed pages at once, keeps a worker's peak memory lowest (pyarrow's
    default mimalloc keeps freed pages). ARROW_DEFAULT_MEMORY_POOL, when set, decides instead.
    numpy's buffers come from the C library's malloc, which after the first large free serves
    blocks of up to 32 MB from its heap and keeps them when freed: a fixed threshold of 1 MiB
    gives each large buffer its own mapping, returned to the system when it is freed."""
    _malloc_threshold(1 << 20)
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    import pyarrow as pa

    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
        pa.jemalloc_set_decay_ms(0)
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
    allocator (see _NoPandas, _lean_allocator), and end the worker once the converter process
    is gone. A SIGKILLed converter otherwise leaves its workers (and the fork server) running,
    still writing into OUT/.staging."""
    import threading
    import time

    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    if "pandas" not in sys.modules:
        sys.meta_path.insert(0, _NoPandas())
    _lean_allocator()

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


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """While the fork server starts, OPENBLAS_NUM_THREADS=1 unless set: it imports numpy, whose
    OpenBLAS would start a thread per core that spins for a while (a fifth of a CPU-second per
    conversion on two cores), and no stage does linear algebra. The workers it forks take the
    caller's own environment back (_worker_init)."""
    if "OPENBLAS_NUM_THREADS" in os.environ:
        yield
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)


_started_early = False


def start_early(preload: Sequence[str]) -> None:
    """Start the fork server now, importing the modules `preload` names (what the pool's tasks
    will run), so that it imports them while the caller is still importing its own modules (on
    another core): the pool's first workers then start at once."""
    global _started_early
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(preload))
    from multiprocessing import forkserver

    with _main_not_rerun(), _one_blas_thread():  # the server would import the caller's __main__ too
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
        ctx.set_forkserver_preload(list(preload))
        self.workers = workers
        self._main = _main_not_rerun()
        self._main.__enter__()
        self.pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                                           initargs=(os.getpid(), dict(os.environ)), max_tasks_per_child=1)
        from multiprocessing import forkserver

        with _one_blas_thread():  # started here rather than at the first task
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
