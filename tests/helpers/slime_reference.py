"""Independent oracle of slime's in-trainer rollout -> train_data conversion.

A deliberately simple re-implementation (torch + plain Python, no rollout_cli
imports) of what slime does at HEAD (snapshot 624b824a8), written from the
facts in ``shared/slime-spec.md``:

* ``fill_rollout_ids``             -- section 3c (rollout-id fill rule, #2031)
* ``post_process_rewards``         -- section 3a (``_post_process_rewards``)
* ``convert_samples_to_train_data``-- section 3b (``_convert_samples_to_train_data``)
* ``tensorize``                    -- section 6 (dtypes after
                                      ``tensorize_rollout_data_for_training``)

Inputs are lists of sample dicts in ``Sample.to_dict()`` form. Tensor-valued
fields may appear as tensors or as plain lists. Missing keys take the
``Sample`` dataclass defaults, except ``status``, which ``Sample.from_dict``
requires (a missing one raises KeyError here too).

This module reproduces slime, bugs included (position-based GRPO grouping, NaN
for one-sample rows, key presence decided by ``samples[0]``, ...). It is meant
to be the *expected value* in tests only where slime is correct; see
``slime_cases.CASES[...]["slime_groups_correctly"]``.

The caller's dicts are never mutated (slime itself mutates ``loss_mask`` in
place; the oracle builds new lists instead).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

# Estimators whose rewards are normalised (mean-centred) in _post_process_rewards.
NORMALIZED_ESTIMATORS = frozenset({"grpo", "gspo", "cispo", "reinforce_plus_plus_baseline"})
# Subset that is additionally divided by (std + eps) when grpo_std_normalization.
STD_NORMALIZED_ESTIMATORS = frozenset({"grpo", "gspo", "cispo"})
# All choices of --advantage-estimator.
KNOWN_ESTIMATORS = frozenset(
    {"grpo", "gspo", "cispo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo"}
)
STD_EPS = 1e-6

# Sample dataclass defaults for the fields this oracle reads.
_DEFAULTS: dict[str, Any] = {
    "group_index": None,
    "index": None,
    "rollout_id": None,
    "tokens": [],
    "response_length": 0,
    "reward": None,
    "loss_mask": None,
    "rollout_log_probs": None,
    "rollout_top_p_token_ids": None,
    "rollout_top_p_token_offsets": None,
    "rollout_routed_experts": None,
    "multimodal_train_inputs": None,
    "remove_sample": False,
    "teacher_log_probs": None,
    "metadata": {},
    "train_metadata": None,
}


def _get(sample: dict, key: str) -> Any:
    if key in sample:
        return sample[key]
    default = _DEFAULTS[key]
    # Fresh mutable defaults, like a dataclass default_factory.
    if isinstance(default, (list, dict)):
        return type(default)()
    return default


def _as_list(value: Any) -> Any:
    """Tensors / ndarrays -> plain (nested) Python lists; lists are shallow-copied; None stays None."""
    if value is None:
        return None
    if hasattr(value, "tolist"):
        return value.tolist()
    return list(value)


def _status_str(sample: dict) -> str:
    status = sample["status"]  # Sample.from_dict requires it (KeyError otherwise)
    return getattr(status, "value", status)


# ---------------------------------------------------------------------------------------------
# section 1: Sample.get_reward_value and get_source
# ---------------------------------------------------------------------------------------------


def get_reward_value(sample: dict, reward_key: str | None = None) -> Any:
    """``reward`` if reward_key is falsy (None or ""), else ``reward[reward_key]``."""
    reward = _get(sample, "reward")
    if not reward_key:
        return reward
    return reward[reward_key]


def get_source(sample: dict) -> str:
    """Non-empty top-level ``source`` key (a non-field attribute), else non-empty
    ``metadata["source_name"]``, else ``"unknown"``.

    Unverified corner: a sample whose metadata is None is treated as having no
    source_name here (slime's exact behaviour for that case is not stated).
    """
    source = sample.get("source")
    if source:
        return source
    metadata = _get(sample, "metadata") or {}
    name = metadata.get("source_name")
    if name:
        return name
    return "unknown"


# ---------------------------------------------------------------------------------------------
# section 3c: rollout-id fill
# ---------------------------------------------------------------------------------------------


def fill_rollout_ids(samples: list[dict]) -> list:
    """Explicit rollout ids are kept as they are; each None gets, in batch order, the
    smallest non-negative int not already in the set of used ids (which grows as ids
    are assigned)."""
    used = {_get(s, "rollout_id") for s in samples if _get(s, "rollout_id") is not None}
    counter = 0
    out = []
    for s in samples:
        rid = _get(s, "rollout_id")
        if rid is None:
            while counter in used:
                counter += 1
            rid = counter
            used.add(rid)
        out.append(rid)
    return out


def first_sample_rollout_ids(samples: list[dict]) -> list:
    """slime 09c704501 (#1965), section 4: positions 0..n-1 when the first sample has no
    rollout_id, otherwise every sample's own rollout_id (None included)."""
    if samples and _get(samples[0], "rollout_id") is None:
        return list(range(len(samples)))
    return [_get(s, "rollout_id") for s in samples]


def sample_index_rollout_ids(samples: list[dict]) -> list:
    """slime 7405851ff (#1933), section 4: the explicit rollout_id, else ``sample.index``."""
    return [_get(s, "index") if _get(s, "rollout_id") is None else _get(s, "rollout_id") for s in samples]


ROLLOUT_ID_RULES = {"fill": fill_rollout_ids, "first_sample": first_sample_rollout_ids,
                    "sample_index": sample_index_rollout_ids}


def group_index_rewards(samples: list[dict], *, std: bool = True, reward_key: str | None = None) -> list[float]:
    """slime's own correct alternative (section 3a, ``_fanout_test_helpers.grpo_normalize_by_group_index``):
    per group_index, mean-centred and divided by (unbiased std + 1e-6), float32; a one-sample
    group gives 0.0."""
    values = [float(get_reward_value(s, reward_key)) for s in samples]
    out = [0.0] * len(samples)
    groups: dict = {}
    for i, s in enumerate(samples):
        groups.setdefault(_get(s, "group_index"), []).append(i)
    for members in groups.values():
        t = torch.tensor([values[i] for i in members], dtype=torch.float32)
        t = t - t.mean()
        if std and len(members) > 1:
            t = t / (t.std() + STD_EPS)
        for i, v in zip(members, t.tolist()):
            out[i] = v
    return out


# ---------------------------------------------------------------------------------------------
# section 3a: _post_process_rewards
# ---------------------------------------------------------------------------------------------


def post_process_rewards(
    samples: list[dict],
    *,
    advantage_estimator: str = "grpo",
    n_samples_per_prompt: int = 1,
    rollout_batch_size: int,
    rewards_normalization: bool = True,
    grpo_std_normalization: bool = True,
    reward_key: str | None = None,
) -> tuple[list, list]:
    """Return ``(raw_rewards, rewards)`` like slime's ``_post_process_rewards``.

    * raw_rewards: ``get_reward_value`` per sample, Python values as given.
    * Normalisation only for estimators in NORMALIZED_ESTIMATORS and when
      rewards_normalization: float32 tensor; rows of n_samples_per_prompt
      *consecutive* samples if len == n * rbs, else the whole batch as one row;
      subtract the row mean; for grpo/gspo/cispo with grpo_std_normalization also
      divide by (unbiased row std + 1e-6). Returned as Python floats.
    * Otherwise rewards is the raw_rewards list itself.

    ``parse_args`` forces grpo_std_normalization=False when n_samples_per_prompt == 1;
    that rule is applied here, so callers can pass CLI-level values.
    """
    if advantage_estimator not in KNOWN_ESTIMATORS:
        raise ValueError(f"unknown advantage_estimator {advantage_estimator!r}")
    if n_samples_per_prompt == 1:
        grpo_std_normalization = False  # parse_args rule

    raw_rewards = [get_reward_value(s, reward_key) for s in samples]

    if not (advantage_estimator in NORMALIZED_ESTIMATORS and rewards_normalization):
        return raw_rewards, raw_rewards

    # A dict or None reward raises TypeError here, as in slime.
    t = torch.tensor(raw_rewards, dtype=torch.float32)
    if t.numel() == n_samples_per_prompt * rollout_batch_size:
        rows = t.reshape(-1, n_samples_per_prompt)
    else:
        rows = t.reshape(1, -1)
    rows = rows - rows.mean(dim=-1, keepdim=True)
    if advantage_estimator in STD_NORMALIZED_ESTIMATORS and grpo_std_normalization:
        with warnings.catch_warnings():
            # a one-sample row warns "degrees of freedom is <= 0" and gives NaN, as in slime
            warnings.simplefilter("ignore", UserWarning)
            std = rows.std(dim=-1, keepdim=True)  # torch default: unbiased (n-1)
        rows = rows / (std + STD_EPS)
    rewards = rows.flatten().tolist()
    return raw_rewards, rewards


# ---------------------------------------------------------------------------------------------
# section 3b: _convert_samples_to_train_data
# ---------------------------------------------------------------------------------------------


def convert_samples_to_train_data(
    samples: list[dict],
    *,
    advantage_estimator: str = "grpo",
    n_samples_per_prompt: int = 1,
    rollout_batch_size: int,
    rewards_normalization: bool = True,
    grpo_std_normalization: bool = True,
    reward_key: str | None = None,
    rollout_top_p: float = 1.0,
) -> dict:
    """Return slime's ``train_data`` dict for ``samples`` (flat, batch order).

    Keys in slime's insertion order; the conditional ones follow the
    "present if samples[0] ..." rules of section 3b. Token / mask / log-prob
    sequences are returned as plain lists (tensors are converted with .tolist()).
    """
    raw_rewards, rewards = post_process_rewards(
        samples,
        advantage_estimator=advantage_estimator,
        n_samples_per_prompt=n_samples_per_prompt,
        rollout_batch_size=rollout_batch_size,
        rewards_normalization=rewards_normalization,
        grpo_std_normalization=grpo_std_normalization,
        reward_key=reward_key,
    )
    assert len(raw_rewards) == len(rewards) == len(samples)

    # raw_reward overwrite: if ANY sample has metadata["raw_reward"], every sample takes
    # its metadata["raw_reward"] if present, else its raw `reward` (not get_reward_value).
    def _meta(s: dict) -> dict:
        return _get(s, "metadata") or {}

    raw_reward = raw_rewards
    if any("raw_reward" in _meta(s) for s in samples):
        raw_reward = [
            _meta(s)["raw_reward"] if "raw_reward" in _meta(s) else _get(s, "reward") for s in samples
        ]

    train_data: dict[str, Any] = {
        "tokens": [_as_list(_get(s, "tokens")) for s in samples],
        "response_lengths": [_get(s, "response_length") for s in samples],
        "rewards": rewards,
        "raw_reward": raw_reward,
        "truncated": [1 if _status_str(s) == "truncated" else 0 for s in samples],
        "sample_indices": [_get(s, "index") for s in samples],
    }

    rollout_ids = fill_rollout_ids(samples)
    train_data["rollout_ids"] = rollout_ids

    loss_masks = []
    for s in samples:
        response_length = _get(s, "response_length")
        mask = _get(s, "loss_mask")
        mask = [1] * response_length if mask is None else _as_list(mask)
        assert len(mask) == response_length, (
            f"loss_mask length {len(mask)} != response_length {response_length}"
        )
        if _get(s, "remove_sample"):
            mask = [0] * response_length
        loss_masks.append(mask)
    train_data["loss_masks"] = loss_masks

    # Sum over every sample of the same rollout, after remove_sample zeroing.
    per_rollout: dict[Any, int] = {}
    for rid, mask in zip(rollout_ids, loss_masks):
        per_rollout[rid] = per_rollout.get(rid, 0) + int(sum(mask))
    train_data["rollout_mask_sums"] = [per_rollout[rid] for rid in rollout_ids]

    if not samples:
        return train_data
    first = samples[0]

    if "round_number" in (_get(first, "metadata") or {}):
        # KeyError if a later sample lacks it, as in slime.
        train_data["round_number"] = [_get(s, "metadata")["round_number"] for s in samples]

    if _get(first, "rollout_log_probs") is not None:
        # A None on a later sample survives here (it crashes tensorisation).
        train_data["rollout_log_probs"] = [_as_list(_get(s, "rollout_log_probs")) for s in samples]

    if rollout_top_p != 1.0:
        ids_list, offsets_list = [], []
        for s in samples:
            ids = _as_list(_get(s, "rollout_top_p_token_ids"))
            offsets = _as_list(_get(s, "rollout_top_p_token_offsets"))
            assert ids is not None and offsets is not None
            assert len(offsets) == _get(s, "response_length") + 1
            assert offsets[-1] == len(ids)
            ids_list.append(ids)
            offsets_list.append(offsets)
        train_data["rollout_top_p_token_ids"] = ids_list
        train_data["rollout_top_p_token_offsets"] = offsets_list

    if _get(first, "rollout_routed_experts") is not None:
        # (use_rollout_routing_replay shape validation not reproduced)
        train_data["rollout_routed_experts"] = [
            torch.as_tensor(_get(s, "rollout_routed_experts")) for s in samples
        ]

    if _get(first, "train_metadata") is not None:
        # Dropped later by _split_train_data_by_dp; the trainer never sees it.
        train_data["metadata"] = [_get(s, "train_metadata") for s in samples]

    if any(_get(s, "multimodal_train_inputs") is not None for s in samples):
        train_data["multimodal_train_inputs"] = [_get(s, "multimodal_train_inputs") for s in samples]

    if _get(first, "teacher_log_probs") is not None:
        train_data["teacher_log_probs"] = [_as_list(_get(s, "teacher_log_probs")) for s in samples]

    if _get(first, "metadata") is not None:
        train_data["source_names"] = [get_source(s) for s in samples]

    return train_data


# ---------------------------------------------------------------------------------------------
# section 6: tensorize_rollout_data_for_training dtypes
# ---------------------------------------------------------------------------------------------

_LIST_OF_TENSORS = {
    "tokens": torch.int64,
    "loss_masks": torch.int32,
    "rollout_log_probs": torch.float32,
    "teacher_log_probs": torch.float32,
    "rollout_top_p_token_ids": torch.int32,
    "rollout_top_p_token_offsets": torch.int32,
}


def tensorize(train_data: dict) -> dict:
    """Return a new dict with the section 6 forms (CPU, contiguous):
    tokens int64, loss_masks int32, rollout/teacher log-probs float32, top-p ids/offsets
    int32 (lists of 1-D tensors); rollout_routed_experts tensors with dtype kept;
    multimodal tensor/ndarray values as CPU tensors; rollout_mask_sums one float32
    1-D tensor; everything else unchanged (plain lists)."""
    out: dict[str, Any] = {}
    for key, value in train_data.items():
        if key in _LIST_OF_TENSORS:
            dtype = _LIST_OF_TENSORS[key]
            # A None element raises here, as in slime.
            out[key] = [torch.as_tensor(v, dtype=dtype).contiguous() for v in value]
        elif key == "rollout_mask_sums":
            out[key] = torch.as_tensor(value, dtype=torch.float32).contiguous()
        elif key == "rollout_routed_experts":
            out[key] = [torch.as_tensor(v).contiguous() for v in value]
        elif key == "multimodal_train_inputs":
            out[key] = [_tensorize_mm(v) for v in value]
        else:
            out[key] = value
    return out


def _tensorize_mm(inputs: Any) -> Any:
    if inputs is None:
        return None
    result = {}
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor) or (type(v).__module__ == "numpy" and hasattr(v, "shape")):
            result[k] = torch.as_tensor(v).cpu().contiguous()
        else:
            result[k] = v
    return result
