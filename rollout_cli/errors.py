"""The errors the library raises, each with the exit code the command line exits with
(`exit_code`; README's table). Catch `RolloutCliError` for any of them; `to_dict()` is the JSON
object a command prints for it under `--json`.

| exit | error |
|---|---|
| 1 | RolloutCliError: the base of them all (raised as itself: an internal error) |
| 2 | UsageError: a bad argument or option value, options that differ from the output being resumed |
| 3 | InvalidInputError: a sample, file or id that breaks the rules (`problems` lists them) |
| 4 | IntegrityError: a broken checksum or invariant, a malformed shard (`failures`); ManifestError: a manifest that is missing, malformed or foreign |
| 5 | OutputExistsError: the output exists, or is not one rollout-cli wrote |
| 6 | OutputError: the output cannot be written (no space, no permission) |
| 8 | OutputBusyError: another process is writing the output |
| 9 | InputUnavailableError: an input cannot be read from where it lives |

A failed gate (exit 7) and a divergence found by `audit` (exit 4) are results, not errors
(`checks_passed`, `diverged`); so is a broken invariant `verify` finds (`ok`)."""
from __future__ import annotations

from .core.errors import (ExitCode, InputUnavailableError, IntegrityError, InvalidInputError, OutputBusyError,
                          OutputError, OutputExistsError, RolloutCliError, UsageError)
from .output.manifest import ManifestError

__all__ = ["ExitCode", "InputUnavailableError", "IntegrityError", "InvalidInputError", "ManifestError",
           "OutputBusyError", "OutputError", "OutputExistsError", "RolloutCliError", "UsageError"]
