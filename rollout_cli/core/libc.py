"""The C library, for the calls the standard library lacks (mallopt, sync_file_range): loaded
once, on Linux only; None elsewhere, where the callers keep the platform's own behaviour."""
from __future__ import annotations

import sys
from functools import lru_cache


@lru_cache(maxsize=1)
def libc():
    """The loaded C library, or None (not Linux, or it cannot be loaded)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        # the process's own symbols, where the C library is always loaded (ctypes.util's
        # find_library would run `ldconfig -p` in a child process: a fork of a large worker)
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
