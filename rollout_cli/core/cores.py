"""The cores this process may use: the default worker and thread count."""
from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and `taskset`
    narrow; os.cpu_count() counts the machine's): the default --workers and thread count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity API on this platform
        return os.cpu_count() or 1
