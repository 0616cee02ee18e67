"""The `rollout-cli` executable. A `convert` takes its workers' Arrow allocator and malloc
settings (run/engines/worker_setup.py) in this process too, and pandas is refused here (core.no_pandas):
a step converted here (`--workers 1`, a one-core machine) would otherwise import it through
`pa.array`."""
from __future__ import annotations

import sys


def main() -> None:
    from .core.no_pandas import refuse_pandas

    refuse_pandas()
    if sys.argv[1:2] == ["convert"]:
        import os

        from .run.engines.local import claim_process
        from .run.engines.worker_setup import keep_freed_memory, worker_environment

        os.environ.update(worker_environment())  # this executable's own environment, before pyarrow loads
        keep_freed_memory()
        claim_process()
    from .cli.app import main as cli_main

    cli_main()
