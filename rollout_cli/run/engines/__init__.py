"""Engines run the functions the converting process hands them (the pipeline's stages): in this
process, in a local process pool, or as Ray tasks. All give byte-identical output; only where the
work runs differs. An engine knows nothing of the pipeline: the caller names the modules its
workers preload, labels each task (for error messages) and says which task must run in the
calling process."""
from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence


class Engine(Protocol):
    def submit(self, fn: Callable, *args: Any, label: str = "", here: bool = False) -> Any:
        """Start `fn(*args)`; a handle for wait() and result(). `label` says what the task
        is in error messages; `here` runs it in this process (it reads this process's stdin)."""
        ...

    def wait(self, handles: list) -> list:
        """Block until at least one handle is done; return the done ones."""
        ...

    def result(self, handle: Any) -> Any: ...

    def shutdown(self) -> None: ...

    def slots(self) -> int:
        """How many tasks can run at once (parts are planned for this many)."""
        ...


def make_engine(name: str, workers: int, ray_address: str | None = None, preload: Sequence[str] = (),
                inline: bool | None = None) -> Engine:
    """The engine `name` ("local" or "ray") with `workers` slots (for Ray, 0: the cluster's
    CPUs); a local pool's workers import the `preload` modules before their first task.
    `inline`: run the tasks in this process (default: with one slot)."""
    if name == "ray":
        from .ray import RayEngine

        return RayEngine(address=ray_address, workers=workers)
    from .local import InlineEngine, PoolEngine

    if inline is None:
        inline = workers <= 1
    return InlineEngine() if inline else PoolEngine(max(1, workers), preload)
