"""What a local pool's workers import once, before their first task: the stage functions and
the readers they call (each format's descriptor names its own, `preload`). The converting
process hands this list to the pool."""
from __future__ import annotations

from typing import Iterable

from ..inputs.registry import FORMATS

_STAGES = ("rollout_cli.run.convert", "rollout_cli.run.stages")
_AFTER_READERS = (
    "rollout_cli.pipeline.validate.columns",
    "concurrent.futures.thread",
    # pa.array imports it at its first numpy argument (to rule out a masked array): 12 ms
    "numpy.ma",
)


def worker_modules(formats: Iterable[str] | None = None) -> tuple[str, ...]:
    """The stages, and the readers of `formats` (names of FORMATS; default every format's)."""
    names = FORMATS if formats is None else dict.fromkeys(formats)
    return (*_STAGES, *(m for name in names for m in FORMATS[name].preload), *_AFTER_READERS)


WORKER_MODULES = worker_modules()
