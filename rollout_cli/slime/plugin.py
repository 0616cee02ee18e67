"""The two slime hooks, built on the pipeline's stages (validate, then the step assembler: ids,
rewards, fields), so that what they return for a batch equals what `convert` writes for it as a
dump (samples without group_index are the exception: they follow slime's reward rows, see `_chunk`)."""
from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..core import slime_keys as K
from ..core.errors import InvalidInputError, StepProblems, UsageError
from ..core.options import REWARD_BASELINES, SCOPES, SIBLING_REWARDS, RuleOptions
from ..inputs.base import RawChunk
from ..pipeline.assemble import StepAssembler
from ..pipeline.rewards import slime_row_length
from ..pipeline.step import StepFields
from ..pipeline.validate import normalize_chunk
from .defaults import slime_arg

log = logging.getLogger("rollout_cli.slime")

SOURCE = "slime batch"  # how problems name the batch: "slime batch:sample 3"

# environment variable -> (RuleOptions field, parser); slime's parser refuses unknown flags
ENV_VARS = {
    "ROLLOUT_CLI_ROLLOUT_ID_SCOPE": "rollout_id_scope",
    "ROLLOUT_CLI_SLIME_COMPAT": "slime_compat",
    "ROLLOUT_CLI_REWARD_BASELINE": "reward_baseline",
    "ROLLOUT_CLI_SIBLING_REWARD": "sibling_reward",
}
_CHOICES = {"rollout_id_scope": SCOPES, "reward_baseline": REWARD_BASELINES, "sibling_reward": SIBLING_REWARDS}
_TRUE, _FALSE = frozenset({"1", "true", "yes", "on"}), frozenset({"0", "false", "no", "off", ""})

# Per-sample lists a batch has on every sample or on none: slime tensorises them (or, for
# round_number, reads every sample's metadata key), so a partial one would fail deep inside it.
_ALL_OR_NONE = (
    ("round_number", "metadata.round_number"),
    ("rollout_log_probs", "rollout_log_probs"),
    ("rollout_top_p_token_ids", "rollout_top_p_token_ids"),
    ("rollout_routed_experts", "rollout_routed_experts"),
    ("teacher_log_probs", "teacher_log_probs"),
)

_logged: set = set()


def _env_value(name: str, raw: str) -> Any:
    field = ENV_VARS[name]
    if field in _CHOICES:
        if raw not in _CHOICES[field]:
            raise UsageError(f"{name}: expected one of {', '.join(_CHOICES[field])}, got {raw!r}")
        return raw
    v = raw.strip().lower()
    if v not in _TRUE | _FALSE:
        raise UsageError(f"{name}: expected 1/true/yes or 0/false/no, got {raw!r}")
    return v in _TRUE


def settings(args: Any) -> RuleOptions:
    """The rules for a slime run: slime's own args (advantage_estimator, rewards_normalization,
    grpo_std_normalization, n_samples_per_prompt, reward_key, rollout_batch_size; slime's parser
    default for any the object lacks, see `SLIME_ARG_DEFAULTS`) plus the rollout-cli-only
    settings from the environment. Logged once per distinct value."""
    n = slime_arg(args, "n_samples_per_prompt")
    opts = RuleOptions(
        advantage_estimator=slime_arg(args, "advantage_estimator"),
        n_samples_per_prompt=n,
        reward_key=slime_arg(args, "reward_key") or None,
        rewards_normalization=bool(slime_arg(args, "rewards_normalization")),
        # slime's parse_args turns std-scaling off for one sample per prompt
        grpo_std_normalization=bool(slime_arg(args, "grpo_std_normalization")) and n != 1,
        rollout_batch_size=slime_arg(args, "rollout_batch_size"),
    )
    for name, field in ENV_VARS.items():
        raw = os.environ.get(name)
        if raw is not None:
            setattr(opts, field, _env_value(name, raw))
    try:
        opts.check()
    except UsageError as e:
        raise UsageError(f"rollout_cli.slime: {e}") from None
    shown = json.dumps(opts.rule_options(), sort_keys=True)
    if shown not in _logged:
        _logged.add(shown)
        log.info("rollout_cli.slime settings: %s", shown)
    return opts


def _plain(v: Any) -> Any:
    """A torch tensor as a numpy array (what the validators take); anything else unchanged."""
    if type(v).__module__.startswith("torch") and hasattr(v, "detach"):
        torch = sys.modules["torch"]
        t = v.detach().cpu()
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()
        return t.numpy()
    return v


def _record(s: Any) -> dict:
    """One Sample as its `to_dict()` form (slime's dump form), tensors as numpy arrays."""
    d = s.to_dict() if hasattr(s, "to_dict") else dict(s)
    status = d.get("status")
    if status is not None and not isinstance(status, str):  # a Sample.Status enum
        d["status"] = getattr(status, "value", status)
    return {k: _plain(v) for k, v in d.items()}


@dataclass
class _Batch:
    records: list[dict]
    table: pa.Table  # the validated rows (pre-schema), in batch order
    fields: StepFields


def _chunk(opts: RuleOptions, size: int) -> int:
    """How many consecutive samples without group_index make one prompt group, as slime groups
    rewards: slime's own rows (pipeline.rewards.slime_row_length)."""
    return slime_row_length(size, opts.n_samples_per_prompt, opts.rollout_batch_size)


def _positions(positions: list[int], index: list) -> str:
    """Batch positions with each sample's `index`, the first 8: `3 (index 3), 7 (index 7)`."""
    shown = ", ".join(f"{i} (index {index[i]})" for i in positions[:8])
    return shown + (", ..." if len(positions) > 8 else "")


def _summary(problems: list, index: list) -> str:
    """One line per distinct field and message: a problem of one sample as "slime batch:sample 5:
    field: message", one shared by several as "field: message on batch positions 0 (index 0), ..."."""
    by: dict[tuple, list] = {}
    for p in problems:
        by.setdefault((p.field, p.message), []).append(p)
    lines = []
    for (field, message), ps in by.items():
        pos = [p.location.number for p in ps]
        if len(ps) == 1 or None in pos:
            lines.extend(str(p) for p in ps)
        else:
            lines.append(f"{field}: {message} on batch positions {_positions(pos, index)}" if field
                         else f"{message} on batch positions {_positions(pos, index)}")
    shown = "; ".join(lines[:5])
    more = f" (and {len(lines) - 5} more)" if len(lines) > 5 else ""
    bad = len({p.location.number for p in problems})
    return f"{bad} invalid sample{'s' if bad != 1 else ''} in the batch: {shown}{more}"


def _run_stages(samples: list, opts: RuleOptions) -> _Batch:
    records = [_record(s) for s in samples]
    chunk = RawChunk(SOURCE, "sample", list(range(len(records))), records)
    asm = StepAssembler(opts, split="train")
    asm.add(normalize_chunk(chunk, 0, reward_key=opts.reward_key, keep_text=False))
    try:
        st = asm.finish(0, fail=True, chunk=_chunk(opts, len(records)))
    except StepProblems as e:
        problems = e.args[0]
        raise InvalidInputError(_summary(problems, [r.get("index") for r in records]), problems) from None
    for a in st.fields.anomalies:
        if a.get("level") == "warning":
            log.warning("rollout_cli.slime: %s", a["message"])
    for note in st.fields.notes:  # "step 0: ...": the hook is not told the step, so the batch is named
        log.info("rollout_cli.slime: this batch: %s", note.partition(": ")[2])
    return _Batch(records, st.rows, st.fields)


def post_process_rewards(args: Any, samples: list) -> tuple[list[float], list[float]]:
    """slime's `--custom-reward-post-process-path` hook: `(raw_rewards, rewards)`, one number
    each per sample. raw_rewards are the selected rewards (reward, or reward[reward_key]);
    rewards are normalised per prompt group (by group_index, float32, unbiased std, eps 1e-6;
    a one-sample group gives 0.0, never NaN). Samples without group_index are grouped as slime
    groups rewards: chunks of n_samples_per_prompt when the batch holds n x rollout_batch_size
    samples, else all of them as one group. Invalid samples raise InvalidInputError."""
    opts = settings(args)
    opts.rollout_id_scope = "step"  # ids do not enter rewards; slime assigns them itself after this hook
    b = _run_stages(samples, opts)
    return b.table.column("_reward_value").to_pylist(), b.fields.rewards.tolist()


def _partial_fields(table: pa.Table, index: list) -> list[str]:
    """One line per optional per-sample field set on some samples but not all."""
    lines = []
    n = table.num_rows
    for col, name in _ALL_OR_NONE:
        nulls = table.column(col).null_count
        if 0 < nulls < n:
            missing = np.flatnonzero(table.column(col).is_null().to_numpy(zero_copy_only=False)).tolist()
            lines.append(f"{name}: set on {n - nulls} of {n} samples, missing on batch positions {_positions(missing, index)}")
    return lines


def convert_samples_to_train_data(args: Any, samples: list) -> dict:
    """slime's `--custom-convert-samples-to-train-data-path` hook: the whole `train_data` dict
    with rollout-cli's rules (ids, id scope, rewards, masks, mask sums), in slime's value types
    and key order, including `rollout_ids` and `rollout_mask_sums`. An optional per-sample key
    appears when the batch has it; on only some samples it is an InvalidInputError naming the
    field and the samples."""
    opts = settings(args)
    b = _run_stages(samples, opts)
    t, sf = b.table, b.fields
    index = t.column("sample_index").to_pylist()
    partial = _partial_fields(t, index)
    top_p = t.column("rollout_top_p_token_ids").null_count < t.num_rows if t.num_rows else False
    top_p_arg = slime_arg(args, "rollout_top_p")
    if top_p_arg != 1.0 and not top_p and t.num_rows:
        partial.append(f"rollout_top_p_token_ids: --rollout-top-p {top_p_arg} needs it on every sample, set on none")
    if partial:
        raise InvalidInputError("every sample of a batch must have these fields, or none: " + "; ".join(partial))
    pos = t.column("_pos").to_numpy()
    d: dict[str, Any] = {
        K.TOKENS: t.column("tokens").to_pylist(),
        K.RESPONSE_LENGTHS: t.column("response_length").to_pylist(),
        K.REWARDS: sf.rewards.tolist(),
        K.RAW_REWARD: t.column("raw_reward").to_pylist(),
        K.TRUNCATED: [int(v) for v in t.column("truncated").to_pylist()],
        K.SAMPLE_INDICES: index,
        K.ROLLOUT_IDS: sf.ids[pos].tolist(),
        K.LOSS_MASKS: t.column("loss_mask").to_pylist(),
        K.ROLLOUT_MASK_SUMS: sf.mask_sums.tolist(),
    }
    has = {c: t.num_rows > 0 and t.column(c).null_count == 0 for c, _ in _ALL_OR_NONE}
    if has["round_number"]:
        d[K.ROUND_NUMBER] = t.column("round_number").to_pylist()
    if has["rollout_log_probs"]:
        d[K.ROLLOUT_LOG_PROBS] = t.column("rollout_log_probs").to_pylist()
    if top_p:
        d[K.ROLLOUT_TOP_P_TOKEN_IDS] = t.column("rollout_top_p_token_ids").to_pylist()
        d[K.ROLLOUT_TOP_P_TOKEN_OFFSETS] = t.column("rollout_top_p_token_offsets").to_pylist()
    if has["rollout_routed_experts"]:
        import torch  # slime hands routed experts on as tensors

        flat, shapes = t.column("rollout_routed_experts"), t.column("rollout_routed_experts_shape").to_pylist()
        d[K.ROLLOUT_ROUTED_EXPERTS] = [
            torch.from_numpy(flat[i].values.to_numpy().reshape(shapes[i]).copy()) for i in range(t.num_rows)
        ]
    recs = [b.records[p] for p in pos.tolist()]
    if any(r.get("train_metadata") is not None for r in recs):
        d["metadata"] = [r.get("train_metadata") for r in recs]
    if any(r.get("multimodal_train_inputs") is not None for r in recs):
        # the samples' own objects (tensors stay tensors), not the JSON text convert stores
        d[K.MULTIMODAL_TRAIN_INPUTS] = [_orig(samples[p], "multimodal_train_inputs") for p in pos.tolist()]
    if has["teacher_log_probs"]:
        d[K.TEACHER_LOG_PROBS] = t.column("teacher_log_probs").to_pylist()
    d[K.SOURCE_NAMES] = t.column("source_name").to_pylist()
    return d


def _orig(s: Any, key: str) -> Any:
    return getattr(s, key, None) if not isinstance(s, dict) else s.get(key)
