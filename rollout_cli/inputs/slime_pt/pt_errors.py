"""The two errors of the torch-free `.pt` loader: a global outside the allow-list, and a file
that is not a readable torch zip archive."""
from __future__ import annotations


class UnsafePickleError(Exception):
    """The pickle references a global outside the plain-data allowlist."""

    def __init__(self, global_name: str, path: str | None = None):
        self.global_name = global_name
        self.path = path
        super().__init__(
            f"pickle references global {global_name!r}, which is not on the plain-data allowlist: "
            "this file needs full unpickling; pass --trust-pickle only if the file is trusted "
            "(full unpickling can run arbitrary code)"
        )


class PtFormatError(Exception):
    """The file is not a readable torch zip archive (or its pickle/storage records are corrupt)."""

    def __init__(self, message: str, path: str | None = None):
        self.path = path
        super().__init__(message)
