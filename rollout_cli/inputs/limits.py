"""The size limits on what an input may make the reader hold, in force in this process: the
longest line of a line file (``--max-line-bytes``) and the largest record a torch archive may
declare (``--max-storage-bytes``), their defaults core/options.py's. ``read_input`` sets them
from its request before a reader starts; a record compressed more than ``MAX_INFLATION`` times
is refused whatever the options (torch.save stores its records uncompressed)."""
from __future__ import annotations

from ..core.errors import UsageError
from ..core.options import RuleOptions

MAX_INFLATION = 1000  # deflate's best is about 1032:1, so a bomb is over it and real data far under

_limits = {"max_line_bytes": RuleOptions.max_line_bytes, "max_storage_bytes": RuleOptions.max_storage_bytes}


def use(max_line_bytes: int, max_storage_bytes: int) -> None:
    """Set the limits for the reads this process makes from now on."""
    if max_line_bytes < 1 or max_storage_bytes < 1:
        raise UsageError("--max-line-bytes and --max-storage-bytes: expected at least 1")
    _limits["max_line_bytes"] = max_line_bytes
    _limits["max_storage_bytes"] = max_storage_bytes


def max_line_bytes() -> int:
    return _limits["max_line_bytes"]


def max_storage_bytes() -> int:
    return _limits["max_storage_bytes"]
