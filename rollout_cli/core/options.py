"""Conversion options: every setting of `convert`, its default and its checks, and the value
sets the settings take. Light to import: the converting process reads it before any worker starts."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .choices import Compression, Engine, Estimator, OnError, Scope, values
from .cores import usable_cores
from .errors import UsageError

ADVANTAGE_ESTIMATORS = values(Estimator)
SCOPES = values(Scope)  # --rollout-id-scope (see pipeline/ids.py)
COMPRESSIONS = values(Compression)
ON_ERRORS = values(OnError)
ENGINES = values(Engine)
DEFAULT_ROW_GROUP_BYTES = 64 << 20


@dataclass
class RuleOptions:
    """The id and reward rules, and which inputs to read: shared by `convert`, `inspect` on dumps
    and every other command that runs the pipeline's stages (one declaration, one default)."""

    advantage_estimator: str = "grpo"
    n_samples_per_prompt: int | None = None
    reward_key: str | None = None
    rewards_normalization: bool = True
    grpo_std_normalization: bool = True
    slime_compat: bool = False
    rollout_batch_size: int | None = None
    rollout_id_scope: str = "strict"
    steps: str | None = None
    step: int | None = None
    trust_pickle: bool = False

    def check(self) -> None:
        if self.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            raise UsageError(f"--advantage-estimator: expected one of {', '.join(ADVANTAGE_ESTIMATORS)}")
        if self.rollout_id_scope not in SCOPES:
            raise UsageError(f"--rollout-id-scope: expected one of {', '.join(SCOPES)}")
        if self.n_samples_per_prompt is not None and self.n_samples_per_prompt < 1:
            raise UsageError("--n-samples-per-prompt: expected at least 1")
        if self.slime_compat and not self.rollout_batch_size:
            raise UsageError("--slime-compat needs --rollout-batch-size (slime's reshape depends on it)")
        if self.step is not None and not 0 <= self.step < 2**63:
            raise UsageError(f"--step: expected a step number in [0, {2**63 - 1}], got {self.step}")

    def rule_options(self) -> dict:
        """The settings that decide ids and rewards (what `inspect` shows and compares)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(RuleOptions)}
        for k in ("steps", "step", "trust_pickle"):
            d.pop(k)
        if not self.slime_compat:
            d.pop("rollout_batch_size")
        return d


@dataclass
class ConvertOptions(RuleOptions):
    """Every conversion option, with its default (recorded in the manifest)."""

    on_error: str = "fail"
    max_errors: int | None = None
    shards: int = 1
    keep_groups: bool = False
    compression: str = "zstd"
    compression_level: int = 1
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES
    mmap: bool = True
    keep_text: bool = False
    workers: int | None = None
    engine: str = "local"
    ray_address: str | None = None
    overwrite: bool = False
    resume: bool = False

    def check(self) -> None:
        super().check()
        if self.on_error not in ON_ERRORS:
            raise UsageError(f"--on-error: expected one of {', '.join(ON_ERRORS)}")
        if self.compression not in COMPRESSIONS:
            raise UsageError(f"--compression: expected one of {', '.join(COMPRESSIONS)}")
        if self.shards < 1:
            raise UsageError("--shards: expected at least 1")
        if self.max_errors is not None and self.max_errors < 0:
            raise UsageError("--max-errors: expected 0 or more")
        if self.row_group_bytes < 1 << 16:
            raise UsageError("--row-group-bytes: expected at least 65536")
        if self.engine not in ENGINES:
            raise UsageError(f"--engine: expected one of {', '.join(ENGINES)}")
        if self.workers is not None and self.workers < 1:
            raise UsageError("--workers: expected at least 1")
        if self.overwrite and self.resume:
            raise UsageError("--overwrite and --resume exclude each other")

    def worker_count(self) -> int:
        """--workers, or all usable cores."""
        return self.workers or usable_cores()

    def conversion_options(self) -> dict:
        """The options that decide the output bytes (recorded; --resume requires them unchanged)."""
        d = dataclasses.asdict(self)
        for k in ("overwrite", "resume", "trust_pickle", "on_error", "max_errors", "steps", "workers", "engine", "ray_address"):
            d.pop(k)
        if not self.slime_compat:
            d.pop("rollout_batch_size")
        d["step"] = d.pop("step")  # the recorded order of earlier manifests
        return d
