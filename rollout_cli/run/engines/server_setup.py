"""The fork server's own process settings, imported by the server alone, first of its preloads
(fork_server.py names it):

- No cyclic garbage collection while it imports: the preloads leave some 50,000 objects that
  the collector tracks, and the collections they set off cost 5-15 ms on the way to the first
  worker. Each worker
  freezes what it inherits (never to be traversed again, so its pages are not touched by a
  collection either) and collects its own objects as usual (local._worker_init).
- An exit without teardown once the converting process is gone, instead of tearing down an
  interpreter that holds numpy, pyarrow and the stages (~30 ms). The server shares the caller's
  stdout and stderr, so until it is gone a pipe reading the command's output (a CI log,
  `| tee`) does not end. The workers it forks leave through os._exit (multiprocessing's child
  path), so this hook never runs in them."""
from __future__ import annotations

import atexit
import gc
import os
import sys


def _stop() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


gc.disable()
atexit.register(_stop)
