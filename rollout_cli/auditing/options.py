"""What `audit` is asked to do: convert's id and reward rules (so the expected values are what
convert writes) and how many divergences of a step to list."""
from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import UsageError
from ..core.options import RuleOptions

DEFAULT_MAX_DIVERGENCES = 100  # listed per step; counts are always complete


@dataclass
class AuditOptions(RuleOptions):
    """The id and reward rules of `convert`, plus the divergences listed per step (None: all)."""

    max_divergences: int | None = DEFAULT_MAX_DIVERGENCES
    keep_tokens: bool = False  # keep each sample's per-token d and mask (the report's drill-down)

    def check(self) -> None:
        super().check()
        if self.max_divergences is not None and self.max_divergences < 0:
            raise UsageError("--max-divergences: expected 0 or more")
