"""Choices shared by the commands' flags."""
from __future__ import annotations

from enum import Enum


class Estimator(str, Enum):
    grpo = "grpo"
    gspo = "gspo"
    cispo = "cispo"
    reinforce_plus_plus = "reinforce_plus_plus"
    reinforce_plus_plus_baseline = "reinforce_plus_plus_baseline"
    ppo = "ppo"


class Scope(str, Enum):
    strict = "strict"
    step = "step"
    group = "group"


class RewardBaseline(str, Enum):
    sample = "sample"
    rollout = "rollout"


class SiblingReward(str, Enum):
    error = "error"
    mean = "mean"


class OnError(str, Enum):
    fail = "fail"
    skip = "skip"


class Compression(str, Enum):
    zstd = "zstd"
    lz4 = "lz4"
    snappy = "snappy"
    none = "none"


class GroupBy(str, Enum):
    rollout_id = "rollout_id"
    group_index = "group_index"
    step = "step"
    status = "status"
    source_name = "source_name"


class Split(str, Enum):
    train = "train"
    eval = "eval"
