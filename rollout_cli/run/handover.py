"""Handing over the rest of a JSONL byte range that a worker is parsing to an idle worker.

Parts of a file are cut to equal sizes, but two workers rarely parse at the same speed (a core
shared with another machine's load runs a fifth slower), so one would sit idle at the end. The
idle worker asks the busy one for the second half of what it has left; the busy one answers at
its next line, stops there, and the other parses the rest as a part of its own. Rows are
ordered by byte offset afterwards, so the output does not depend on whether or where a range
was handed over.

The two processes agree through small files next to the busy part's staged rows, each step an
atomic create or rename, so every request gets exactly one answer and no line is parsed twice
or lost:

- `<stage>.ask`: the idle worker's request (created exclusively);
- `<stage>.taken` / `<stage>.withdrawn`: the request renamed by whichever side acts on it first;
- `<stage>.answer`: the busy worker's answer, "<start> <end>" or "-" (nothing to hand over);
- `<stage>.done`: the busy worker has parsed its last line.
"""
from __future__ import annotations

import os
import time

from ..core import storage
from ..inputs.jsonl import next_line_start
from ..inputs.registry import HANDOVER

# the least a range must have left to be split: the taker's start costs a few milliseconds
MIN_REST_BYTES = 8 << 20
_WAIT_S = 0.001
_PATIENCE_S = 30.0  # a partner silent this long has died: the run fails rather than lose rows


def can_hand_over(task) -> bool:
    """Whether a part (a tasks.PartTask) can hand the rest of its range over: a plain local
    JSONL file, staged locally."""
    path = task.input.path
    return (task.input.format in HANDOVER and path != "-" and not path.endswith((".gz", ".zst"))
            and not storage.is_uri(path) and not storage.is_uri(task.stage_path))


class HandoverLost(RuntimeError):
    """The busy worker took a request and never answered it."""


def _write_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class Offer:
    """The busy side, as the JSONL reader's `Handover` (inputs.jsonl): `poll` between lines,
    `close` after the last one."""

    def __init__(self, stage_path: str, input_path: str):
        self._base = stage_path
        self._input = input_path
        self._open = True  # at most one handover per part

    def poll(self, pos: int, end: int) -> int | None:
        """A new end for this part (a line start) if a worker asked for the rest, else None.
        `pos` is the offset of the next line to parse, `end` the current end."""
        if not self._claim():
            return None
        cut = None
        if end - pos >= MIN_REST_BYTES:
            with open(self._input, "rb") as f:  # the first line starting at or after the middle
                cut = next_line_start(f, pos + (end - pos) // 2 - 1, end)
            if cut >= end:
                cut = None
        _write_atomic(self._base + ".answer", "-" if cut is None else f"{cut} {end}")
        return cut

    def close(self) -> None:
        """No more lines will be parsed: a request still open gets "-"."""
        with open(self._base + ".done", "w"):
            pass
        if self._claim():
            _write_atomic(self._base + ".answer", "-")

    def _claim(self) -> bool:
        """Take a pending request (once per part), unless the asker withdrew it first."""
        if not self._open or not os.path.exists(self._base + ".ask"):
            return False
        try:
            os.rename(self._base + ".ask", self._base + ".taken")
        except FileNotFoundError:  # withdrawn meanwhile
            return False
        self._open = False
        return True


def take_over(stage_path: str) -> tuple[int, int] | None:
    """The idle side: ask the part staged at `stage_path` for the rest of its range; the byte
    range handed over, or None (too little left, already finished, or asked by another)."""
    try:
        os.close(os.open(stage_path + ".ask", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return None
    started = time.monotonic()
    while True:
        try:
            with open(stage_path + ".answer") as f:
                text = f.read()
        except FileNotFoundError:
            pass
        else:
            if text == "-":
                return None
            a, b = text.split()
            return int(a), int(b)
        waited = time.monotonic() - started
        if os.path.exists(stage_path + ".done") or waited > _PATIENCE_S:
            try:
                os.rename(stage_path + ".ask", stage_path + ".withdrawn")
                return None
            except FileNotFoundError:  # taken: its answer is being written
                if waited > 2 * _PATIENCE_S:
                    raise HandoverLost(f"{stage_path}: a handover request was taken but never answered") from None
        time.sleep(_WAIT_S)

