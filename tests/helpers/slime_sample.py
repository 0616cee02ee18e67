"""A stand-in for slime's `Sample` (slime/utils/types.py), written from the facts in
slime-spec section 1: the fields in declaration order with their defaults, the Status enum,
`to_dict()` (a shallow copy of `__dict__`, status as its string, the two info records as
dicts, extra attributes included) and `from_dict()` (status required, no type coercion,
unknown keys set as attributes). slime itself is never imported."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any


@dataclass
class SpecInfo:
    spec_accept_token_num: int = 0
    spec_draft_token_num: int = 0
    spec_verify_ct: int = 0
    completion_token_num: int = 0


@dataclass
class PrefixCacheInfo:
    cached_tokens: int = 0
    total_prompt_tokens: int = 0


@dataclass
class Sample:
    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    prompt: Any = ""
    tokens: Any = field(default_factory=list)
    multimodal_inputs: dict | None = None
    multimodal_train_inputs: dict | None = None
    multimodal_train_input_id: str | None = None
    apply_chat_template_kwargs: dict = field(default_factory=dict)
    response: str = ""
    response_length: int = 0
    label: Any = None
    reward: Any = None
    loss_mask: Any = None
    weight_versions: list = field(default_factory=list)
    rollout_log_probs: Any = None
    rollout_top_p_token_ids: Any = None
    rollout_top_p_token_offsets: Any = None
    rollout_routed_experts: Any = None
    remove_sample: bool = False
    teacher_log_probs: Any = None
    status: "Sample.Status" = Status.PENDING
    metadata: dict = field(default_factory=dict)
    generate_function_path: str | None = None
    custom_rm_path: str | None = None
    train_metadata: dict | None = None
    session_id: str | None = None
    non_generation_time: float = 0.0
    spec_info: SpecInfo = field(default_factory=SpecInfo)
    prefix_cache_info: PrefixCacheInfo = field(default_factory=PrefixCacheInfo)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["status"] = self.status.value
        d["spec_info"] = dict(self.spec_info.__dict__)
        d["prefix_cache_info"] = dict(self.prefix_cache_info.__dict__)
        return d

    @classmethod
    def from_dict(cls, data: dict) -> "Sample":
        d = dict(data)
        d["status"] = cls.Status(d["status"])  # KeyError without it, as slime
        d["spec_info"] = SpecInfo(**(d.get("spec_info") or {}))
        d["prefix_cache_info"] = PrefixCacheInfo(**(d.get("prefix_cache_info") or {}))
        names = {f.name for f in fields(cls)}
        s = cls(**{k: v for k, v in d.items() if k in names})
        for k, v in d.items():
            if k not in names:
                setattr(s, k, v)
        return s

    def get_reward_value(self, args) -> Any:
        key = getattr(args, "reward_key", None)
        return self.reward[key] if key else self.reward


SAMPLE_FIELDS = [f.name for f in fields(Sample)]
