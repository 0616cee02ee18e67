"""What every check of `verify` shares: the report that collects failures and counts what
was read, and the paths and readers of OUT's files (a local folder or an object store)."""
from __future__ import annotations

import os
from typing import Any

from ..core import storage
from ..output import manifest as manifest_mod


EXAMPLES = 3  # offending rows quoted per failure


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class Report:
    """What one verify run found (failures, notes) and read (files, bytes, rows, shards)."""

    def __init__(self, out: str, quick: bool):
        self.out = out
        self.quick = quick
        self.failures: list[dict] = []
        self.files: list[str] = []
        self.notes: list[str] = []
        self.bytes = 0
        self.hashed = 0
        self.rows = 0
        self.row_problems = False  # a row invariant failed in one of its shards
        self.shards = 0

    def fail(self, file: str, invariant: str, detail: str) -> None:
        self.failures.append({"file": file, "invariant": invariant, "detail": detail})

    def result(self, manifest: dict | None) -> dict:
        m = manifest or {}
        steps = m.get("steps") if isinstance(m.get("steps"), list) else []
        return {
            "out": self.out,
            "ok": not self.failures,
            "quick": self.quick,
            "schema_version": m.get("schema_version"),
            "tool_version": m.get("tool_version"),
            "checked": {
                "files": len(self.files),
                "shards": self.shards,
                "steps": sum(1 for s in steps if isinstance(s, dict) and s.get("split") == "train"),
                "eval_steps": sum(1 for s in steps if isinstance(s, dict) and s.get("split") == "eval"),
                "rows": self.rows,
                "bytes": self.bytes,
                "hashed_bytes": self.hashed,
            },
            "files": self.files,
            "failures": self.failures,
            "notes": self.notes,
            "pending": manifest_mod.pending_steps(m) if not manifest_mod.pending_problem(m) else [],
        }


def full_path(out: str, rel: str) -> str:
    return storage.join(out, rel) if storage.is_uri(out) else os.path.join(out, *rel.split("/"))


def open_file(full: str, mapped: bool = True):
    """A random-access file for pyarrow: locally a regular file only, mapped or (not `mapped`)
    read with pread (output/files.random_access), a remote file otherwise."""
    from ..output.files import random_access

    return random_access(full, mapped=mapped)
