"""What a local pool's workers import once, in the fork server, before their first task: the
stage functions and the readers they call (each format's descriptor names its own, `preload`).
The converting process hands this list to the pool; the executable starts the fork server with
it before it parses its command line."""
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


def start_pool_early() -> None:
    """Start the pool's fork server now (it imports WORKER_MODULES on another core while the
    caller goes on); a no-op when it is already running."""
    from .engines.fork_server import start_early

    start_early(WORKER_MODULES)
