"""Imported by the local pool's fork server alone, first of its preloads (fork_server.py names
it): when the converting process is gone the server stops at once instead of tearing down an
interpreter that holds numpy, pyarrow and the stages (~30 ms). It shares the caller's stdout
and stderr, so until it is gone a pipe reading the command's output (a CI log, `| tee`) does not
end. The workers it forks leave through os._exit (multiprocessing's child path), so this hook
never runs in them."""
from __future__ import annotations

import atexit
import os
import sys


def _stop() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


atexit.register(_stop)
