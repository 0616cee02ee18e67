"""What a local pool's workers import once, in the fork server, before their first task: the
stage functions and the readers they call (each format's descriptor names its own, `preload`).
The converting process hands this list to the pool."""
from __future__ import annotations

from ..inputs.registry import FORMATS

WORKER_MODULES = (
    "rollout_cli.run.convert",
    "rollout_cli.run.stages",
    *(m for f in FORMATS.values() for m in f.preload),  # each format's `preload`
    "rollout_cli.pipeline.validate.columns",
    "concurrent.futures.thread",
    # pa.array imports it at its first numpy argument (to rule out a masked array): 12 ms
    "numpy.ma",
)

