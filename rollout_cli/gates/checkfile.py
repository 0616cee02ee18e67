"""A checks file (`--checks FILE`): TOML that a repository keeps beside its training config.

    fail_on = ["anomalies.id_reused_across_groups > 0"]   # every command that has the name

    [inspect]
    fail_on = ["step.truncation_rate > 0.2", "step.zero_variance_share >= 0.5"]

    [audit]
    fail_on = ["mismatch.mean_abs_diff > 0.05"]

Any other key, or a value of another type, is a usage error naming the file and the key (error
messages say "the inspect table", not "[inspect]": a terminal would read brackets as markup).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

from ..core.errors import UsageError
from .figures import COMMANDS

if sys.version_info >= (3, 11):
    import tomllib
else:  # the backport, a dependency on 3.10
    import tomli as tomllib

KEY = "fail_on"


@dataclass
class CheckFile:
    """The expressions of a checks file: the top-level list and each command's table."""

    path: str
    top: list[str] = field(default_factory=list)
    tables: dict[str, list[str]] = field(default_factory=dict)


def load(path: str) -> CheckFile:
    """Read and check the file; UsageError (exit 2) when it cannot be read, is not TOML, or holds
    a key or value a checks file does not have."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise UsageError(f"--checks {path}: cannot read it: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"--checks {path}: not valid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"--checks {path}: not UTF-8 text: {e}") from None
    out = CheckFile(path)
    allowed = f"{KEY} and the tables " + " and ".join(COMMANDS)
    for key, value in data.items():
        if key == KEY:
            out.top = _list(path, KEY, value)
        elif key in COMMANDS and isinstance(value, dict):
            for k, v in value.items():
                if k != KEY:
                    raise UsageError(f"--checks {path}: {key} table: unknown key {k!r} (a table holds {KEY} only)")
                out.tables[key] = _list(path, f"{key} table {KEY}", v)
        else:
            raise UsageError(f"--checks {path}: unknown key {key!r} (expected {allowed})")
    return out


def _list(path: str, where: str, value) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise UsageError(f"--checks {path}: {where}: expected a list of strings, as {KEY} = [\"step.truncation_rate > 0.2\"]")
    return list(value)
