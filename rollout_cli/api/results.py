"""The results of the command functions: frozen dataclasses, one field per top-level key of the
command's `--json` object, in its order. `to_dict()` gives that object back (a field marked
optional is left out while it is None, as the command leaves its key out)."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional

__all__ = ["AuditResult", "ConvertResult", "ExportResult", "InspectResult", "ReportResult", "RolloutResult",
           "VerifyResult"]

_OPTIONAL = {"optional": True}  # the key is in the JSON only when the field is not None


def _optional() -> Any:
    return field(default=None, metadata=_OPTIONAL)


class _Result:
    """The shared face of a result: `to_dict()` and `from_dict()` by the dataclass's fields."""

    def to_dict(self) -> dict:
        """The command's `--json` object."""
        out = {}
        for f in fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if v is None and f.metadata.get("optional"):
                continue
            out[f.name] = v
        return out

    @classmethod
    def from_dict(cls, d: dict):
        """The result of a command's plain-data answer (every key a field of the result)."""
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        unknown = [k for k in d if k not in names]
        if unknown:
            raise TypeError(f"{cls.__name__}: unexpected keys {unknown}")
        return cls(**d)


@dataclass(frozen=True)
class ConvertResult(_Result):
    """What `convert` wrote: the manifest's counts and steps (without their shards), the rejects'
    summary, what was skipped, noted, warned about or found odd, and the pending inputs
    (under `skip_incomplete`)."""

    out: str
    counts: dict
    steps: list
    rejects: Optional[dict]
    skipped: list
    notes: list
    warnings: list
    anomalies: list
    elapsed_seconds: float
    pending: Optional[list] = _optional()


@dataclass(frozen=True)
class InspectResult(_Result):
    """What `inspect` found: the summary, the groups (with `group_by`), the anomalies (most
    severe first, then by step), the samples `remove_sample` left out, each step's loss weights,
    and the gates' checks once `check_gates` has run (docs/inspect.md)."""

    summary: dict
    groups: list
    anomalies: list
    removed: list
    loss_weight: list
    checks: Optional[list] = _optional()

    @property
    def checks_passed(self) -> bool:
        """Every gate passed (True when there was none)."""
        return all(c["passed"] for c in self.checks or [])


@dataclass(frozen=True)
class RolloutResult(_Result):
    """One rollout's samples (`inspect(..., show="STEP:ID")`)."""

    rollout: dict


@dataclass(frozen=True)
class VerifyResult(_Result):
    """What `verify` checked and found: `ok` when no invariant is broken, the files checked, each
    failure (file, invariant, detail), notes and the pending steps (docs/guarantees.md)."""

    out: str
    ok: bool
    quick: bool
    schema_version: Optional[int]
    tool_version: Optional[str]
    checked: dict
    files: list
    failures: list
    notes: list
    pending: list


@dataclass(frozen=True)
class AuditResult(_Result):
    """The rollout dumps against what the trainer computed: the summary, the trainer rules that are
    not the expected ones, each step and the divergences, and the gates' checks once
    `check_gates` has run (docs/audit.md)."""

    summary: dict
    rules: list
    steps: list
    divergences: list
    checks: Optional[list] = _optional()

    @property
    def diverged(self) -> bool:
        """Something diverges (the command's exit 4)."""
        return bool(self.summary["divergences"])

    @property
    def checks_passed(self) -> bool:
        """Every gate passed (True when there was none)."""
        return all(c["passed"] for c in self.checks or [])


@dataclass(frozen=True)
class ReportResult(_Result):
    """The page `report` wrote: its path, size, counts per split and, with the trainer's dumps,
    the trainer section's counts."""

    path: str
    bytes: int
    counts: dict
    trainer: Optional[dict] = _optional()


@dataclass(frozen=True)
class ExportResult(_Result):
    """What `export` wrote into DEST: per file its path, split, step, samples and bytes, and the
    notes on what an export cannot restore."""

    out: str
    dest: str
    format: str
    files: list
    samples: int
    notes: list
    elapsed_seconds: float
