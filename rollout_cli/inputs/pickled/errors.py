"""The two errors of the restricted unpickler: a global outside the allow-list
(``UnsafePickleError``), and a file that is not a readable pickle or torch archive, or whose data
does not have the shape its writer gives it (``PickleFormatError``)."""
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


class PickleFormatError(Exception):
    """The file is not a readable pickle or torch zip archive (its pickle or storage records are
    corrupt), or an allowed global was handed arguments its writer never writes."""

    def __init__(self, message: str, path: str | None = None):
        self.path = path
        super().__init__(message)


# the name the torch `.pt` loader has always raised
PtFormatError = PickleFormatError
