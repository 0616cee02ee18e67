"""Engines run the pipeline's stage functions: in this process, in a local process pool, or as
Ray tasks. All give byte-identical output; only where the work runs differs."""
from __future__ import annotations

from typing import Any, Callable, Protocol


class Engine(Protocol):
    def submit(self, fn: Callable, *args: Any) -> Any: ...

    def wait(self, handles: list) -> list:
        """Block until at least one handle is done; return the done ones."""
        ...

    def result(self, handle: Any) -> Any: ...

    def shutdown(self) -> None: ...

    def slots(self) -> int:
        """How many tasks can run at once (parts are planned for this many)."""
        ...


def make_engine(name: str, workers: int, ray_address: str | None = None) -> Engine:
    if name == "ray":
        from .ray import RayEngine

        return RayEngine(address=ray_address, workers=workers)
    from .local import InlineEngine, PoolEngine

    return InlineEngine() if workers <= 1 else PoolEngine(workers)
