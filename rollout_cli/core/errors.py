"""Error types, exit codes and source locations."""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    """The exit codes of the command line (README's table): each error's `exit_code`."""

    OK = 0
    INTERNAL = 1
    USAGE = 2
    INVALID_INPUT = 3
    INTEGRITY = 4
    OUTPUT_EXISTS = 5
    OUTPUT_ERROR = 6
    CHECKS_FAILED = 7  # a --fail-on / --checks gate crossed its threshold
    OUTPUT_BUSY = 8
    INPUT_UNAVAILABLE = 9


@dataclass(frozen=True)
class Location:
    """Where a sample came from: a JSONL line, a Parquet row or a `.pt` sample position (all 1-based
    for lines, 0-based for rows and positions, as editors and dataframes count them)."""

    file: str
    kind: str = "file"  # "line" | "row" | "sample" | "file"
    number: int | None = None

    def __str__(self) -> str:
        if self.number is None:
            return self.file
        return f"{self.file}:{self.kind} {self.number}"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"file": self.file}
        if self.number is not None:
            d[self.kind] = self.number
        return d


@dataclass(frozen=True)
class Problem:
    """One validation problem: where, which field, expected vs got, and the id of the rule it
    breaks (`<field>.<check>` such as `loss_mask.length`, or `json.invalid`, `rollout_id.reused`:
    short and stable, for the rejects report and inspect's anomalies to classify by)."""

    location: Location
    field: str | None
    message: str
    rule: str | None = None
    sample_index: int | None = None  # the sample's own index, where a rule that reads it knows it

    def __str__(self) -> str:
        where = str(self.location)
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        d = self.location.to_dict()
        d["field"] = self.field
        d["reason"] = self.message
        d["rule"] = self.rule
        return d


class RolloutCliError(Exception):
    """A known failure; the CLI prints it without a traceback and exits with `exit_code`."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def to_dict(self) -> dict[str, Any]:
        return {"error": type(self).__name__, "message": str(self), "exit_code": int(self.exit_code)}


class UsageError(RolloutCliError):
    """A bad argument or option value, or options that differ from the output being resumed."""

    exit_code = ExitCode.USAGE


class InvalidInputError(RolloutCliError):
    """Input that breaks the rules (a sample, file or id); `problems` lists each, with its location."""

    exit_code = ExitCode.INVALID_INPUT

    def __init__(self, message: str, problems: list[Problem] | None = None):
        super().__init__(message)
        self.problems = list(problems or [])

    def __reduce__(self):  # keep the problems when crossing process boundaries
        return (type(self), (str(self), self.problems))

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["problems"] = [p.to_dict() for p in self.problems]
        return d


class IntegrityError(RolloutCliError):
    """A broken checksum or invariant, or a malformed shard; `failures` lists what verify found."""

    exit_code = ExitCode.INTEGRITY

    def __init__(self, message: str, failures: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.failures = list(failures or [])

    def __reduce__(self):
        return (type(self), (str(self), self.failures))

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["failures"] = self.failures
        return d


class OutputExistsError(RolloutCliError):
    """The output exists and may not be replaced (no overwrite or resume, or not one rollout-cli wrote)."""

    exit_code = ExitCode.OUTPUT_EXISTS


class OutputError(RolloutCliError):
    """OUT cannot be written: not a directory, no permission, read-only file system, disk full."""

    exit_code = ExitCode.OUTPUT_ERROR


def output_error(path: str, e: OSError) -> OutputError:
    """The error of every command whose output cannot be written (convert's OUT, export's DEST,
    report's page): any OSError met while writing it (no space, no permission, a read-only file
    system, a parent that is a file) is exit 6, naming the output and the file the system
    refused when that is another one."""
    reason = e.strerror or str(e) or type(e).__name__
    refused = getattr(e, "filename", None)
    where = f" ({refused})" if refused and str(refused) != str(path) else ""
    return OutputError(f"{path}: cannot write the output: {reason}{where}")


class OutputBusyError(RolloutCliError):
    """Another process is writing the output (it holds the output's writer lock)."""

    exit_code = ExitCode.OUTPUT_BUSY


class InputUnavailableError(RolloutCliError):
    """An input cannot be read from where it lives: its store is unreachable, refuses the
    credentials, or the file is not readable. The bytes were never seen, so this is not
    invalid input."""

    exit_code = ExitCode.INPUT_UNAVAILABLE


class StepProblems(Exception):
    """Invalid samples under --on-error fail: carries the problems to report, in input order
    (raised by a step's stages, turned into InvalidInputError by `convert`)."""


class IncompleteInputError(InvalidInputError):
    """An input still being written: it ends inside a line, or it changed while it was read
    (run/live.py). Nothing is committed; `--skip-incomplete` leaves such steps out instead."""
