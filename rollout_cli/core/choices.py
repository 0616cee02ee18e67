"""The value sets of the options: one Enum each, the only place a set is written down. The
command line takes its choices from these, and core/options.py checks against `values(...)`."""
from __future__ import annotations

from enum import Enum


class Estimator(str, Enum):
    """--advantage-estimator, as slime's flag of that name."""

    grpo = "grpo"
    gspo = "gspo"
    cispo = "cispo"
    reinforce_plus_plus = "reinforce_plus_plus"
    reinforce_plus_plus_baseline = "reinforce_plus_plus_baseline"
    ppo = "ppo"


class Scope(str, Enum):
    """--rollout-id-scope (see pipeline/ids.py)."""

    strict = "strict"
    step = "step"
    group = "group"


class RewardBaseline(str, Enum):
    sample = "sample"
    rollout = "rollout"


class SiblingReward(str, Enum):
    error = "error"
    mean = "mean"


class PrimeRlSubset(str, Enum):
    """--prime-rl-subset: which of a prime-rl step's trace files is read."""

    effective = "effective"
    all = "all"


class OnError(str, Enum):
    fail = "fail"
    skip = "skip"


class Schedule(str, Enum):
    balanced = "balanced"
    slime = "slime"


class Compression(str, Enum):
    zstd = "zstd"
    lz4 = "lz4"
    snappy = "snappy"
    none = "none"


class Engine(str, Enum):
    local = "local"
    ray = "ray"


class GroupBy(str, Enum):
    rollout_id = "rollout_id"
    group_index = "group_index"
    step = "step"
    status = "status"
    source_name = "source_name"


class Split(str, Enum):
    train = "train"
    eval = "eval"


class ExportFormat(str, Enum):
    slime_pt = "slime-pt"  # slime's rollout debug dump, for --load-debug-rollout-data


class DeriveKind(str, Enum):
    sft = "sft"
    dpo = "dpo"
    kto = "kto"
    rm = "rm"


class DeriveSelect(str, Enum):
    best = "best"
    all = "all"


class DerivePairs(str, Enum):
    extremes = "extremes"
    all = "all"


def values(choices: type[Enum]) -> tuple[str, ...]:
    """The values of a choice Enum, in declaration order."""
    return tuple(c.value for c in choices)
