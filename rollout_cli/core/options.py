"""Conversion options: every setting of `convert`, its default and its checks, and the value
sets the settings take. Light to import: the converting process reads it before any worker starts."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .choices import (Compression, Engine, Estimator, OnError, PrimeRlSubset, RewardBaseline, Schedule, Scope,
                      SiblingReward, values)
from .cores import usable_cores
from .errors import UsageError

ADVANTAGE_ESTIMATORS = values(Estimator)
SCOPES = values(Scope)  # --rollout-id-scope (see pipeline/ids.py)
REWARD_BASELINES = values(RewardBaseline)  # --reward-baseline: what one member of a prompt group is
SIBLING_REWARDS = values(SiblingReward)  # --sibling-reward: siblings whose rewards differ, under `rollout`
COMPRESSIONS = values(Compression)
ON_ERRORS = values(OnError)
ENGINES = values(Engine)
SCHEDULES = values(Schedule)  # --schedule
PRIME_RL_SUBSETS = values(PrimeRlSubset)  # --prime-rl-subset (inputs/prime_rl/reader.py)
# The --schedule slime settings (slime's argument names); recorded only under that schedule.
SCHEDULE_FIELDS = ("global_batch_size", "num_steps_per_rollout", "micro_batch_size", "use_dynamic_batch_size",
                   "max_tokens_per_gpu", "balance_data", "cp_size", "vpp_size",
                   "microbatch_group_size_per_vp_stage", "keep_trailing")
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
    reward_baseline: str = "sample"
    sibling_reward: str = "error"
    steps: str | None = None
    step: int | None = None
    trust_pickle: bool = False
    input_format: str | None = None  # a reader registry name for every input (None: detected)
    # prime-rl traces: `effective` (what the trainer was sent) or `all` (every episode that arrived)
    prime_rl_subset: str = "effective"
    # --max-staleness: a rollout whose oldest weight version is more than this many steps behind
    # its step is rejected whole (pipeline/staleness.py); None: no limit
    max_staleness: int | None = None
    # the longest line a line file may hold, and the largest record a torch archive may declare
    # (inputs/limits.py): beyond them an input is refused, before it is read into memory
    max_line_bytes: int = 256 << 20
    max_storage_bytes: int = 64 << 30
    # --tokenizer: a tokenizer.json (or a folder holding one) that text dumps are tokenized with
    # (inputs/textdump.py) and token ids are decoded with for display
    tokenizer: str | None = None
    # --image-token-id: the image placeholder rule (pipeline/validate/images.py) with the
    # processor's --spatial-merge-size; None: not checked
    image_token_id: int | None = None
    spatial_merge_size: int = 2

    def image_rule(self) -> tuple[int, int] | None:
        """(image token id, spatial merge size) when the image placeholder rule applies."""
        return None if self.image_token_id is None else (self.image_token_id, self.spatial_merge_size)

    def check(self) -> None:
        if self.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            raise UsageError(f"--advantage-estimator: expected one of {', '.join(ADVANTAGE_ESTIMATORS)}")
        if self.rollout_id_scope not in SCOPES:
            raise UsageError(f"--rollout-id-scope: expected one of {', '.join(SCOPES)}")
        if self.reward_baseline not in REWARD_BASELINES:
            raise UsageError(f"--reward-baseline: expected one of {', '.join(REWARD_BASELINES)}")
        if self.sibling_reward not in SIBLING_REWARDS:
            raise UsageError(f"--sibling-reward: expected one of {', '.join(SIBLING_REWARDS)}")
        if self.slime_compat and self.reward_baseline != "sample":
            raise UsageError("--slime-compat reproduces slime's per-sample rows: it refuses --reward-baseline rollout")
        if self.n_samples_per_prompt is not None and self.n_samples_per_prompt < 1:
            raise UsageError("--n-samples-per-prompt: expected at least 1")
        if self.slime_compat and not self.rollout_batch_size:
            raise UsageError("--slime-compat needs --rollout-batch-size (slime's reshape depends on it)")
        if self.step is not None and not 0 <= self.step < 2**63:
            raise UsageError(f"--step: expected a step number in [0, {2**63 - 1}], got {self.step}")
        if self.prime_rl_subset not in PRIME_RL_SUBSETS:
            raise UsageError(f"--prime-rl-subset: expected one of {', '.join(PRIME_RL_SUBSETS)}")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise UsageError(f"--max-staleness: expected 0 or more steps, got {self.max_staleness}")
        for name in ("max_line_bytes", "max_storage_bytes"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')}: expected at least 1 byte, got {getattr(self, name)}")
        if self.image_token_id is not None and self.image_token_id < 0:
            raise UsageError(f"--image-token-id: expected a token id (0 or more), got {self.image_token_id}")
        if self.spatial_merge_size < 1:
            raise UsageError(f"--spatial-merge-size: expected at least 1, got {self.spatial_merge_size}")

    def rule_options(self) -> dict:
        """The settings that decide ids and rewards (what `inspect` shows and compares)."""
        d = {k: getattr(self, k) for k in RULE_FIELDS}
        if not self.slime_compat:
            d.pop("rollout_batch_size")
        if self.reward_baseline == "sample":
            d.pop("sibling_reward")
        if self.max_staleness is None:
            d.pop("max_staleness")
        if self.image_token_id is None:
            d.pop("image_token_id")
            d.pop("spatial_merge_size")
        return d


# RuleOptions' fields that choose what to read; the others (RULE_FIELDS) decide ids and rewards,
# and every command that computes them takes each as an option (cli/options.py's rule group).
INPUT_FIELDS = ("steps", "step", "trust_pickle", "input_format", "prime_rl_subset", "tokenizer", "max_line_bytes", "max_storage_bytes")
RULE_FIELDS = tuple(f.name for f in dataclasses.fields(RuleOptions) if f.name not in INPUT_FIELDS)


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
    wait: float | None = None  # seconds to wait for another writer of OUT (output/lock.py); None: refuse at once
    schedule: str = "balanced"
    global_batch_size: int | None = None
    num_steps_per_rollout: int | None = None
    micro_batch_size: int = 1
    use_dynamic_batch_size: bool = False
    max_tokens_per_gpu: int | None = None
    balance_data: bool = False
    cp_size: int = 1
    vpp_size: int = 1
    microbatch_group_size_per_vp_stage: int | None = None
    keep_trailing: bool = False
    # an input still being written (run/live.py): left out and recorded as pending, not refused
    skip_incomplete: bool = False

    def check(self) -> None:
        super().check()
        self._check_schedule()
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
        if self.wait is not None and not self.wait >= 0:
            raise UsageError("--wait: expected 0 or more seconds")

    def _check_schedule(self) -> None:
        if self.schedule not in SCHEDULES:
            raise UsageError(f"--schedule: expected one of {', '.join(SCHEDULES)}")
        if self.schedule != "slime":
            defaults = ConvertOptions.__dataclass_fields__
            changed = [k for k in SCHEDULE_FIELDS if getattr(self, k) != defaults[k].default]
            if changed:
                raise UsageError(f"--{changed[0].replace('_', '-')} needs --schedule slime")
            return
        for name in ("global_batch_size", "num_steps_per_rollout", "max_tokens_per_gpu",
                     "microbatch_group_size_per_vp_stage"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise UsageError(f"--{name.replace('_', '-')}: expected at least 1, got {v}")
        for name in ("micro_batch_size", "cp_size", "vpp_size"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')}: expected at least 1, got {getattr(self, name)}")
        if self.global_batch_size is None and self.num_steps_per_rollout is None:
            raise UsageError("--schedule slime needs --global-batch-size (rollouts per optimizer step) "
                             "or --num-steps-per-rollout")
        if self.num_steps_per_rollout is not None:
            if not self.rollout_batch_size:
                raise UsageError("--num-steps-per-rollout needs --rollout-batch-size "
                                 "(global batch size = rollout batch size x n-samples-per-prompt // steps)")
            derived = self.rollout_batch_size * (self.n_samples_per_prompt or 1) // self.num_steps_per_rollout
            if derived < 1:
                raise UsageError(f"--num-steps-per-rollout {self.num_steps_per_rollout}: gives a global batch size of 0 "
                                 f"(rollout batch size {self.rollout_batch_size} x n {self.n_samples_per_prompt or 1})")
            if self.global_batch_size is not None and self.global_batch_size != derived:
                raise UsageError(f"--global-batch-size {self.global_batch_size} disagrees with --num-steps-per-rollout "
                                 f"{self.num_steps_per_rollout}, which gives {derived}")
        if self.use_dynamic_batch_size and self.max_tokens_per_gpu is None:
            raise UsageError("--use-dynamic-batch-size needs --max-tokens-per-gpu")
        if self.vpp_size > 1 and self.microbatch_group_size_per_vp_stage is None:
            raise UsageError("--vpp-size above 1 needs --microbatch-group-size-per-vp-stage")
        if self.keep_groups:
            raise UsageError("--keep-groups applies to --schedule balanced (slime's schedule splits by rollout)")

    def effective_global_batch_size(self) -> int | None:
        """Rollouts per optimizer step: --global-batch-size, or rbs x n // --num-steps-per-rollout."""
        if self.global_batch_size is not None:
            return self.global_batch_size
        if self.num_steps_per_rollout is not None and self.rollout_batch_size:
            return self.rollout_batch_size * (self.n_samples_per_prompt or 1) // self.num_steps_per_rollout
        return None

    def worker_count(self) -> int:
        """--workers, or all usable cores."""
        return self.workers or usable_cores()

    def conversion_options(self) -> dict:
        """The options that decide the output bytes (recorded; --resume requires them unchanged)."""
        d = dataclasses.asdict(self)
        # input_format is recorded with each input (the manifest's inputs[].format)
        for k in ("overwrite", "resume", "wait", "trust_pickle", "on_error", "max_errors", "steps", "workers", "engine", "ray_address",
                  "input_format", "max_line_bytes", "max_storage_bytes"):
            d.pop(k)
        d.pop("skip_incomplete")  # which steps wait for their input, not what any step holds
        if not self.slime_compat and not (self.schedule == "slime" and self.num_steps_per_rollout):
            d.pop("rollout_batch_size")
        if self.reward_baseline == "sample":
            d.pop("sibling_reward")  # only read under `rollout`
        if d["prime_rl_subset"] == RuleOptions.prime_rl_subset:
            d.pop("prime_rl_subset")  # recorded only when it is not the default, as before it existed
        if d["max_staleness"] is None:
            d.pop("max_staleness")  # recorded only when given, as before it existed
        if d["tokenizer"] is None:
            d.pop("tokenizer")  # given, run/convert.py records its file's digest: the content decides the rows
        if d["image_token_id"] is None:  # recorded only when given, as before they existed
            d.pop("image_token_id")
            d.pop("spatial_merge_size")
        d["step"] = d.pop("step")  # the recorded order of earlier manifests
        schedule = {k: d.pop(k) for k in SCHEDULE_FIELDS}
        scheduled = d.pop("schedule") == "slime"
        if scheduled:  # under balanced nothing is recorded, as before the option existed
            d["schedule"] = "slime"
            d.update(schedule)
        return d
