"""derive's options and their defaults (one home: the library and the CLI read them here)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.choices import DeriveKind, DerivePairs, DeriveSelect, values
from ..core.errors import UsageError

KINDS = values(DeriveKind)
SELECTS = values(DeriveSelect)
PAIRS = values(DerivePairs)


@dataclass(frozen=True)
class DeriveOptions:
    """What derive takes besides OUT and DEST (defaults: docs/derive.md)."""

    as_: str = "sft"
    split: str = "train"
    steps: str | None = None
    select: str = "best"
    min_reward: float | None = None
    min_margin: float = 0.0
    pairs: str = "extremes"
    pointwise: bool = False
    test_fraction: float = 0.0
    dedupe: bool = False
    max_rows_per_group: int | None = None
    tokenizer: str | None = None
    overwrite: bool = False
    wait: float | None = None

    def check(self) -> None:
        """UsageError (exit 2) for a value or combination the rules do not take."""
        if self.as_ not in KINDS:
            raise UsageError(f"--as: expected one of {', '.join(KINDS)}, got {self.as_!r}")
        if self.split not in ("train", "eval"):
            raise UsageError(f"--split: expected train or eval, got {self.split!r}")
        if self.select not in SELECTS:
            raise UsageError(f"--select: expected best or all, got {self.select!r}")
        if self.pairs not in PAIRS:
            raise UsageError(f"--pairs: expected extremes or all, got {self.pairs!r}")
        if not 0.0 <= self.test_fraction < 1.0:
            raise UsageError(f"--test-fraction: expected a number in [0, 1), got {self.test_fraction}")
        if self.max_rows_per_group is not None and (self.max_rows_per_group < 1 or self.select != "all"):
            raise UsageError("--max-rows-per-group: expected a positive number, with --select all")
        for name, v in (("--min-reward", self.min_reward), ("--min-margin", self.min_margin)):
            if v is not None and not math.isfinite(v):
                raise UsageError(f"{name}: expected a finite number, got {v}")
        if self.min_margin < 0:
            raise UsageError(f"--min-margin: expected 0 or more, got {self.min_margin}")
        if self.as_ == "kto" and self.min_reward is None:
            raise UsageError("--as kto: --min-reward is required (label = reward >= --min-reward)")
        if self.pointwise and self.as_ != "rm":
            raise UsageError("--pointwise: only with --as rm")
        if self.wait is not None and not self.wait >= 0:
            raise UsageError("--wait: expected 0 or more seconds")

    @property
    def paired(self) -> bool:
        return self.as_ == "dpo" or (self.as_ == "rm" and not self.pointwise)

    def record(self) -> dict:
        """The options as provenance.json records them (rule options only: no paths, no waits)."""
        d = {"as": self.as_, "split": self.split, "steps": self.steps, "test_fraction": self.test_fraction,
             "dedupe": self.dedupe, "min_reward": self.min_reward}
        if self.paired:
            d.update(pairs=self.pairs, min_margin=self.min_margin)
        elif self.as_ == "sft":
            d.update(select=self.select, max_rows_per_group=self.max_rows_per_group)
        d["text"] = "tokenizer" if self.tokenizer else None
        return d
