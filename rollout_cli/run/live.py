"""Live runs: a dump still being written is never converted in part.

A trainer writes its step files while a converter (a cron job, say) may be reading them. An
input counts as still being written, and its step is never committed, when:

- a line file (`.jsonl`: slime JSONL, NeMo-RL logs, prime-rl traces) ends inside a line: its
  last line has no newline and is not valid JSON. A last line without its newline that parses
  is a complete record (no proper prefix of a JSON object parses), as it always was;
- a `.pt` dump does not open as a zip archive, or a Parquet file has no valid footer, while
  its size or modification time is changing (watched for SETTLE_SECONDS); one that stays as it
  is, is a broken file, reported by its reader as before;
- any input's size or modification time differs between the start of the run (before anything
  is read) and the commit, or from the fingerprint recorded for it: it changed while it was read.
  This is the only check of compressed JSONL (`.gz`, `.zst`), whose tail is not looked at.

By default such an input stops the run before anything is committed: exit 3, "FILE: still
being written? ...". With `--skip-incomplete` its step is left out, the manifest lists it under
`pending` (output/manifest.py), and a later `--resume` converts it once it is complete.
"""
from __future__ import annotations

import os
import time
from typing import Callable


from ..core import storage
from ..inputs.registry import format_of
from ..core.errors import IncompleteInputError, InvalidInputError, Location, Problem
from ..output import manifest as manifest_mod

SETTLE_SECONDS = 1.0  # how long a .pt or Parquet file that does not open is watched for a change
_HINT = ("nothing was converted; convert it once it is complete, or pass --skip-incomplete to convert the rest "
         "and leave it pending")


def _stat(path: str) -> tuple[int, int] | None:
    """(size, mtime_ns) of an input, as a local file system or an object store reports it;
    None when it is gone."""
    try:
        if storage.is_uri(path):
            info = storage.file_info(path)
            return (info.size, info.mtime_ns or 0) if info.size is not None else None
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns
    except FileNotFoundError:
        return None


def _changing(path: str, before: tuple | None) -> bool:
    """Whether the file's size or mtime differs from `before`, now or within SETTLE_SECONDS."""
    if _stat(path) != before:
        return True
    time.sleep(SETTLE_SECONDS)
    return _stat(path) != before


def incomplete_reason(inp, before: tuple | None) -> str | None:
    """Why the input looks still being written at the start of a run (None: it does not), by
    its format's own checks (inputs/format.py: `cut_off`, `whole`). `before`: its
    (size, mtime_ns) taken just before."""
    fmt = format_of(inp.format)
    try:
        cut = fmt.cut_off_reason(inp.path)
        if cut is not None:
            return f"still being written? {cut}"
        missing = fmt.missing_whole(inp.path)
        if missing is not None and _changing(inp.path, before):
            return f"still being written? {missing}, and its size is changing"
    except OSError:
        return None  # unreadable: its reader says so
    return None


CHANGED = "still being written? it changed while it was read"


class Fingerprints(dict):
    """The inputs' fingerprints for one run (path -> fingerprint). `get` gives one only when it
    was taken from the bytes the run started with (the size and mtime seen at the start): a step
    read before its input grew is never recorded for --resume, nor reused, under the grown
    input's fingerprint."""

    def __init__(self, seen: dict[str, tuple | None]):
        super().__init__()
        self._seen = seen

    def get(self, path, default=None):
        fp = super().get(path, default)
        before = self._seen.get(path)
        if fp and before and (fp.get("size"), fp.get("mtime_ns")) != before:
            return default
        return fp


class LiveWatch:
    """The inputs of one run, as they were when it started: those still being written are
    refused or (--skip-incomplete) left out and recorded as pending."""

    def __init__(self, units: list, skip: bool):
        self.skip = skip
        self.units = units
        self.inputs = {u.input.path: u.input for u in units if u.input.path != "-"}
        self.seen: dict[str, tuple | None] = {p: _stat(p) for p in self.inputs}
        self.pending: list[dict] = []

    def fingerprints(self) -> Fingerprints:
        """An empty fingerprint table for the run, checked against the inputs' start."""
        return Fingerprints(self.seen)

    def start(self) -> list:
        """Check every input before anything is read; returns the units to convert."""
        found = [(u.input, None, r) for u in self.units if u.input.path in self.seen
                 and (r := incomplete_reason(u.input, self.seen[u.input.path])) is not None]
        if found and not self.skip:
            raise _refusal(found)
        for inp, step, reason in found:
            self._pend(inp, step, reason)
        gone = {inp.path for inp, _, _ in found}
        return [u for u in self.units if u.input.path not in gone]

    def converting(self, fn: Callable[[], list]) -> list:
        """fn() (the conversion); an input error while an input changed is that change's doing."""
        try:
            return fn()
        except IncompleteInputError:
            raise
        except InvalidInputError as e:
            changed = self._changed({})
            if changed:
                raise _refusal([(self.inputs[p], None, CHANGED) for p in changed]) from e
            raise

    def settle(self, results: list, fingerprints: dict[str, dict], drop: Callable[[object], None]) -> list:
        """Just before the commit: an input that changed since the start (or whose fingerprint
        was taken from other bytes) is refused, or with --skip-incomplete its step is left out
        (`drop` removes what the run staged for it). Returns the results to commit."""
        changed = self._changed(fingerprints)
        if changed and not self.skip:
            raise _refusal([(self.inputs[p], None, CHANGED) for p in changed])
        pending_paths = {p["path"] for p in self.pending}
        kept = []
        for r in results:
            if r.input.path in changed:
                self._pend(r.input, r.step, CHANGED)
                drop(r)
            elif r.input.step_from == "missing" and r.input.display in pending_paths:
                drop(r)  # an earlier version of an input being written again: not kept as "no longer given"
            else:
                kept.append(r)
        for p in changed:
            if not any(e["path"] == self.inputs[p].display for e in self.pending):
                self._pend(self.inputs[p], None, CHANGED)
        self.pending.sort(key=lambda e: (e["split"] != "train", e["step"] is None, e["step"] or 0, e["path"]))
        return kept

    def report(self, summary: dict) -> dict:
        """The convert summary with the pending inputs, each also a warning."""
        summary["pending"] = list(self.pending)
        summary["warnings"] = list(summary.get("warnings", [])) + [manifest_mod.pending_message(p) for p in self.pending]
        return summary

    def _changed(self, fingerprints: dict[str, dict]) -> list[str]:
        pending = {p["path"] for p in self.pending}
        out = []
        for path, before in self.seen.items():
            if self.inputs[path].display in pending:
                continue
            fp = dict.get(fingerprints, path)
            if _stat(path) != before or (fp and before and (fp.get("size"), fp.get("mtime_ns")) != before):
                out.append(path)
        return out

    def _pend(self, inp, step: int | None, reason: str) -> None:
        if step is None and not (format_of(inp.format).payload_step and inp.step_from == "name"):
            step = inp.step  # a dump whose payload names its step: the file name is a hint only
        self.pending.append({"path": inp.display, "format": inp.format, "split": inp.split, "step": step, "reason": reason})


def _refusal(found: list[tuple]) -> IncompleteInputError:
    first = found[0]
    more = f" (and {len(found) - 1} more input{'s' if len(found) > 2 else ''})" if len(found) > 1 else ""
    problems = [Problem(Location(inp.display), None, reason, "input.incomplete") for inp, _, reason in found]
    return IncompleteInputError(f"{first[0].display}: {first[2]}{more}; {_HINT}", problems)
