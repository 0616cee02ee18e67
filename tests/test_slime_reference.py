"""Tests of the slime oracle (tests/helpers/slime_reference.py) and its cases (tests/helpers/slime_cases.py)
against numbers stated in shared/slime-spec.md or computed by hand (numpy float32 / fractions)."""

from __future__ import annotations

import copy
import math
import os
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import slime_cases  # noqa: E402
import slime_reference as ref  # noqa: E402
from slime_cases import CASES, fresh_case  # noqa: E402

F32 = np.float32


def _grpo_row_f32(values):
    """Hand computation of one GRPO row in float32 with numpy: (x - mean) / (std_unbiased + 1e-6)."""
    x = np.asarray(values, dtype=F32)
    n = F32(len(values))
    mean = F32(x.sum(dtype=F32) / n)
    c = (x - mean).astype(F32)
    var = F32((c * c).sum(dtype=F32) / F32(n - F32(1)))
    std = F32(np.sqrt(var))
    return [float(v) for v in (c / F32(std + F32(1e-6))).astype(F32)]


def _mk(rewards, **kw):
    return [
        {"index": i, "reward": r, "status": "completed", "tokens": [1, 2], "response_length": 1, "loss_mask": [1]}
        | kw
        for i, r in enumerate(rewards)
    ]


# ------------------------------------------------------------------------------------------
# 3c fill rule
# ------------------------------------------------------------------------------------------


def test_fill_mixed_ids_spec_example():
    samples = [{"rollout_id": r} for r in [None, 2, 2, None, 0, 0, None, 7]]
    assert ref.fill_rollout_ids(samples) == [1, 2, 2, 3, 0, 0, 4, 7]
    assert ref.fill_rollout_ids(CASES["mixed_ids"]["samples"]) == [1, 2, 2, 3, 0, 0, 4, 7]


def test_fill_all_default_and_all_explicit():
    assert ref.fill_rollout_ids([{}, {"rollout_id": None}, {}]) == [0, 1, 2]
    assert ref.fill_rollout_ids([{"rollout_id": r} for r in [5, 5, 3]]) == [5, 5, 3]
    # explicit non-int ids are kept as they are; defaults skip only ids that are used
    assert ref.fill_rollout_ids([{"rollout_id": "a"}, {}, {"rollout_id": 1}, {}]) == ["a", 0, 1, 2]
    assert ref.fill_rollout_ids([]) == []


# ------------------------------------------------------------------------------------------
# 3a rewards
# ------------------------------------------------------------------------------------------


def test_grpo_1000_group_hand_computed():
    raw, rewards = ref.post_process_rewards(_mk([1, 0, 0, 0]), n_samples_per_prompt=4, rollout_batch_size=1)
    assert raw == [1, 0, 0, 0]
    # mean .25, unbiased std .5: .75 / .500001 and -.25 / .500001 in float32
    assert rewards == _grpo_row_f32([1, 0, 0, 0])
    assert rewards[0] == pytest.approx(1.4999970, abs=1e-6)
    assert rewards[1:] == [pytest.approx(-0.4999990, abs=1e-6)] * 3
    assert all(type(r) is float for r in rewards)


def test_grpo_spec_literal_value():
    # spec 3a: "as Python floats (e.g. 0.7071057558059692)" = row [1, 0]
    _, rewards = ref.post_process_rewards(_mk([1.0, 0.0]), n_samples_per_prompt=2, rollout_batch_size=1)
    assert rewards == [0.7071057558059692, -0.7071057558059692]


def test_grpo_default_case_rows():
    c = CASES["grpo_default"]
    _, rewards = ref.post_process_rewards(c["samples"], **c["args"])
    assert rewards == _grpo_row_f32([1, 0, 0, 0]) + _grpo_row_f32([1, 1, 0, 0])
    # [1,1,0,0]: .5 / (sqrt(1/3) + 1e-6)
    assert rewards[4] == pytest.approx(0.5 / (math.sqrt(1 / 3) + 1e-6), rel=1e-6)


@pytest.mark.parametrize("estimator", ["gspo", "cispo"])
def test_gspo_cispo_like_grpo(estimator):
    _, a = ref.post_process_rewards(_mk([1, 0, 0, 0]), n_samples_per_prompt=4, rollout_batch_size=1)
    _, b = ref.post_process_rewards(
        _mk([1, 0, 0, 0]), advantage_estimator=estimator, n_samples_per_prompt=4, rollout_batch_size=1
    )
    assert a == b


def test_one_sample_row_is_nan():
    c = CASES["one_sample_group"]
    _, rewards = ref.post_process_rewards(c["samples"], **c["args"])
    assert len(rewards) == 1 and math.isnan(rewards[0])


def test_identical_row_is_zero():
    c = CASES["identical_rewards"]
    _, rewards = ref.post_process_rewards(c["samples"], **c["args"])
    assert rewards == [0.0, 0.0, 0.0, 0.0]


def test_whole_batch_fallback_when_count_differs():
    # n=4, rbs=2 expects 8; 6 samples -> one row of 6
    vals = [1, 0, 0, 0, 1, 1]
    _, rewards = ref.post_process_rewards(_mk(vals), n_samples_per_prompt=4, rollout_batch_size=2)
    # mean 1/2, unbiased var (6 * 1/4) / 5 = 0.3
    expected = [(v - 0.5) / (math.sqrt(0.3) + 1e-6) for v in vals]
    assert rewards == pytest.approx(expected, rel=1e-6)
    c = CASES["mixed_ids"]
    raw, rewards = ref.post_process_rewards(c["samples"], **c["args"])
    assert rewards == pytest.approx(_grpo_row_f32(raw), rel=1e-6)


def test_positional_grouping_ignores_group_index():
    c = CASES["interleaved_groups"]
    _, rewards = ref.post_process_rewards(c["samples"], **c["args"])
    assert rewards == [0.0, 0.0, 0.0, 0.0]  # rows [1,1],[0,0]


def test_rpp_baseline_mean_centred_only():
    _, rewards = ref.post_process_rewards(
        _mk([1, 0, 0, 0]), advantage_estimator="reinforce_plus_plus_baseline",
        n_samples_per_prompt=4, rollout_batch_size=1, grpo_std_normalization=True,
    )
    assert rewards == [0.75, -0.25, -0.25, -0.25]
    c = CASES["rpp_baseline"]
    _, rewards = ref.post_process_rewards(c["samples"], **c["args"])
    assert rewards == [0.75, -0.25, -0.25, -0.25, 0.25, 0.25, -0.75, 0.25]


@pytest.mark.parametrize("estimator", ["ppo", "reinforce_plus_plus"])
def test_passthrough_estimators(estimator):
    samples = _mk([1, 0, {"a": 1}, None])
    raw, rewards = ref.post_process_rewards(
        samples, advantage_estimator=estimator, n_samples_per_prompt=4, rollout_batch_size=1
    )
    assert rewards is raw
    assert raw == [1, 0, {"a": 1}, None] and type(raw[0]) is int


def test_normalization_disabled_passthrough():
    raw, rewards = ref.post_process_rewards(
        _mk([1, 0, 0, 0]), n_samples_per_prompt=4, rollout_batch_size=1, rewards_normalization=False
    )
    assert rewards is raw and raw == [1, 0, 0, 0]


def test_std_normalization_disabled():
    _, rewards = ref.post_process_rewards(
        _mk([1, 0, 0, 0]), n_samples_per_prompt=4, rollout_batch_size=1, grpo_std_normalization=False
    )
    assert rewards == [0.75, -0.25, -0.25, -0.25]


def test_n1_forces_std_off():
    c = CASES["n1_no_std"]
    _, rewards = ref.post_process_rewards(c["samples"], **c["args"])
    assert rewards == [0.0, 0.0, 0.0, 0.0]  # rows of one, mean-centred, no NaN
    # n=1 with a count mismatch: whole batch mean-centred, not std-scaled
    _, rewards = ref.post_process_rewards(_mk([1, 0, 0, 0]), n_samples_per_prompt=1, rollout_batch_size=3)
    assert rewards == [0.75, -0.25, -0.25, -0.25]


def test_reward_key_and_type_errors():
    c = CASES["dict_reward_key"]
    raw, rewards = ref.post_process_rewards(c["samples"], **c["args"])
    assert raw == [1.0, 0.0, 0.5, 0.25]
    # rows [1, 0] and [0.5, 0.25]; the second: .125 / (sqrt(2 * .125**2) + 1e-6) ~ 0.7071028
    assert rewards == _grpo_row_f32([1.0, 0.0]) + _grpo_row_f32([0.5, 0.25])
    assert rewards[2] == pytest.approx(0.125 / (math.sqrt(2) * 0.125 + 1e-6), rel=1e-6)
    args = dict(c["args"], reward_key=None)
    with pytest.raises(TypeError):
        ref.post_process_rewards(c["samples"], **args)
    args = dict(c["args"], reward_key="")  # falsy -> the raw dict
    with pytest.raises(TypeError):
        ref.post_process_rewards(c["samples"], **args)
    with pytest.raises(TypeError):
        ref.post_process_rewards(_mk([1.0, None]), n_samples_per_prompt=2, rollout_batch_size=1)


def test_unknown_estimator_rejected():
    with pytest.raises(ValueError):
        ref.post_process_rewards(_mk([1]), advantage_estimator="bogus", rollout_batch_size=1)


# ------------------------------------------------------------------------------------------
# 3b conversion
# ------------------------------------------------------------------------------------------


def test_convert_grpo_default_keys_and_values():
    c = CASES["grpo_default"]
    td = ref.convert_samples_to_train_data(c["samples"], **c["args"])
    assert list(td) == [
        "tokens", "response_lengths", "rewards", "raw_reward", "truncated", "sample_indices",
        "rollout_ids", "loss_masks", "rollout_mask_sums", "rollout_log_probs", "source_names",
    ]
    assert td["response_lengths"] == [3, 2, 4, 1, 2, 4, 3, 2]
    assert td["raw_reward"] == [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert td["truncated"] == [0, 1, 0, 0, 0, 0, 1, 0]
    assert td["sample_indices"] == list(range(8))
    assert td["rollout_ids"] == list(range(8))
    assert td["rollout_mask_sums"] == [3, 2, 3, 1, 2, 4, 2, 2]
    assert td["source_names"] == ["unknown", "math", "code", "unknown"] + ["unknown"] * 4
    assert td["tokens"][0] == [100, 101, 102, 1000, 1001, 1002]
    assert td["rollout_log_probs"][2] == [-0.125, 0.0, -0.375, -0.5]


def test_convert_mixed_ids_mask_sums():
    c = CASES["mixed_ids"]
    td = ref.convert_samples_to_train_data(c["samples"], **c["args"])
    assert td["rollout_ids"] == [1, 2, 2, 3, 0, 0, 4, 7]
    assert td["sample_indices"] == [0, 1, 1, 2, 3, 3, 4, 5]
    assert td["rollout_mask_sums"] == [4, 4, 4, 3, 5, 5, 2, 3]


def test_convert_remove_sample_and_none_mask():
    c = CASES["remove_sample"]
    td = ref.convert_samples_to_train_data(c["samples"], **c["args"])
    assert td["loss_masks"] == [[1, 1, 1], [1, 0, 1], [0, 0], [1, 1, 1, 1]]
    assert td["rollout_mask_sums"] == [3, 2, 0, 4]
    # the removed sample still took part in normalisation
    assert td["rewards"] == _grpo_row_f32([1, 0, 1, 0])
    assert td["round_number"] == [0, 0, 1, 1]
    c = CASES["removed_sibling"]
    td = ref.convert_samples_to_train_data(c["samples"], **c["args"])
    assert td["rollout_ids"] == [0, 1, 1]
    assert td["loss_masks"] == [[1, 1, 1], [0, 0], [1, 0, 1]]
    assert td["rollout_mask_sums"] == [3, 2, 2]


def test_convert_compact_explicit():
    c = CASES["compact_explicit"]
    td = ref.convert_samples_to_train_data(c["samples"], **c["args"])
    assert td["rollout_ids"] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert td["rollout_mask_sums"] == [5] * 8
    raw = [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    assert td["rewards"] == pytest.approx(_grpo_row_f32(raw), rel=1e-6)  # whole-batch row


def test_loss_mask_length_assert():
    samples = _mk([1.0, 0.0])
    samples[1]["loss_mask"] = [1, 1]
    with pytest.raises(AssertionError):
        ref.convert_samples_to_train_data(samples, n_samples_per_prompt=2, rollout_batch_size=1)


def test_raw_reward_overwrite_mixes_dicts():
    c = CASES["metadata_raw_reward"]
    td = ref.convert_samples_to_train_data(c["samples"], **c["args"])
    assert td["raw_reward"] == [0.25, {"score": 0.0, "format": 0.5}, 0.75, {"score": 1.0, "format": 0.5}]
    assert td["rewards"] == [0.7071057558059692, -0.7071057558059692, -0.7071057558059692, 0.7071057558059692]


def test_raw_reward_without_overwrite_uses_reward_key():
    c = CASES["dict_reward_key"]
    td = ref.convert_samples_to_train_data(c["samples"], **c["args"])
    assert td["raw_reward"] == [1.0, 0.0, 0.5, 0.25]


def test_conditional_keys_follow_first_sample():
    c = fresh_case("grpo_default")
    c["samples"][0]["rollout_log_probs"] = None
    td = ref.convert_samples_to_train_data(c["samples"], **c["args"])
    assert "rollout_log_probs" not in td  # silently dropped for all
    c = fresh_case("grpo_default")
    c["samples"][3]["rollout_log_probs"] = None
    td = ref.convert_samples_to_train_data(c["samples"], **c["args"])
    assert td["rollout_log_probs"][3] is None  # survives conversion ...
    with pytest.raises((TypeError, RuntimeError)):
        ref.tensorize(td)  # ... crashes tensorisation
    c = fresh_case("remove_sample")
    del c["samples"][2]["metadata"]["round_number"]
    with pytest.raises(KeyError):
        ref.convert_samples_to_train_data(c["samples"], **c["args"])
    c = fresh_case("grpo_default")
    c["samples"][0]["metadata"] = None
    assert "source_names" not in ref.convert_samples_to_train_data(c["samples"], **c["args"])
    c = CASES["identical_rewards"]
    td = ref.convert_samples_to_train_data(c["samples"], **c["args"])
    assert td["teacher_log_probs"][1] == [-0.5, -0.75]


def test_missing_status_raises_keyerror():
    samples = _mk([1.0])
    del samples[0]["status"]
    with pytest.raises(KeyError):
        ref.convert_samples_to_train_data(samples, rollout_batch_size=1)


def test_tensor_inputs_accepted():
    c = fresh_case("grpo_default")
    for s in c["samples"]:
        s["tokens"] = torch.tensor(s["tokens"])
        s["loss_mask"] = torch.tensor(s["loss_mask"], dtype=torch.int32)
        s["rollout_log_probs"] = torch.tensor(s["rollout_log_probs"])
    td = ref.convert_samples_to_train_data(c["samples"], **c["args"])
    plain = ref.convert_samples_to_train_data(CASES["grpo_default"]["samples"], **c["args"])
    assert td["tokens"] == plain["tokens"]
    assert td["loss_masks"] == plain["loss_masks"]
    assert td["rollout_mask_sums"] == plain["rollout_mask_sums"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_does_not_mutate_caller(name):
    c = fresh_case(name)
    before = copy.deepcopy(c["samples"])
    ref.convert_samples_to_train_data(c["samples"], **c["args"])
    assert repr(c["samples"]) == repr(before)


# ------------------------------------------------------------------------------------------
# section 6 dtypes
# ------------------------------------------------------------------------------------------


def test_tensorize_dtypes():
    c = CASES["identical_rewards"]
    t = ref.tensorize(ref.convert_samples_to_train_data(c["samples"], **c["args"]))
    assert all(x.dtype == torch.int64 for x in t["tokens"])
    assert all(x.dtype == torch.int32 for x in t["loss_masks"])
    assert all(x.dtype == torch.float32 for x in t["rollout_log_probs"])
    assert all(x.dtype == torch.float32 for x in t["teacher_log_probs"])
    rms = t["rollout_mask_sums"]
    assert isinstance(rms, torch.Tensor) and rms.dtype == torch.float32 and rms.dim() == 1
    assert rms.tolist() == [1.0, 2.0, 3.0, 4.0]
    for key in ["response_lengths", "rewards", "raw_reward", "truncated", "sample_indices", "rollout_ids",
                "source_names"]:
        assert isinstance(t[key], list), key


def test_tensorize_routed_experts_dtype_kept():
    c = fresh_case("identical_rewards")
    for s in c["samples"]:
        s["rollout_routed_experts"] = torch.zeros((len(s["tokens"]) - 1, 2, 1), dtype=torch.int32)
    t = ref.tensorize(ref.convert_samples_to_train_data(c["samples"], **c["args"]))
    assert all(x.dtype == torch.int32 for x in t["rollout_routed_experts"])
    c = fresh_case("identical_rewards")
    for s in c["samples"]:
        s["rollout_routed_experts"] = [[[0], [1]]] * (len(s["tokens"]) - 1)
    t = ref.tensorize(ref.convert_samples_to_train_data(c["samples"], **c["args"]))
    assert all(x.dtype == torch.int64 for x in t["rollout_routed_experts"])


# ------------------------------------------------------------------------------------------
# the cases and their flags
# ------------------------------------------------------------------------------------------


def _groups_correctly(case) -> bool:
    samples, args = case["samples"], case["args"]
    n, rbs = args["n_samples_per_prompt"], args["rollout_batch_size"]
    if len(samples) != n * rbs:
        return False
    chunk_of = [p // n for p in range(len(samples))]
    # the partition into consecutive chunks must equal the partition by group_index
    gi = [s["group_index"] for s in samples]
    for a in range(len(samples)):
        for b in range(len(samples)):
            if (chunk_of[a] == chunk_of[b]) != (gi[a] == gi[b]):
                return False
    _, rewards = ref.post_process_rewards(samples, **args)
    return not any(isinstance(r, float) and math.isnan(r) for r in rewards)


def test_case_set():
    assert {
        "mixed_ids", "grpo_default", "compact_explicit", "remove_sample", "removed_sibling",
        "metadata_raw_reward", "dict_reward_key", "one_sample_group", "identical_rewards",
        "interleaved_groups", "ppo_passthrough", "rpp_baseline", "n1_no_std",
    } == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_flag_matches_definition(name):
    case = CASES[name]
    assert case["slime_groups_correctly"] is _groups_correctly(case)


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_is_well_formed(name):
    case = CASES[name]
    for s in case["samples"]:
        assert list(s)[:3] == ["group_index", "index", "rollout_id"]
        assert s["status"] in {"pending", "completed", "truncated", "aborted", "failed"}
        assert s["response_length"] <= len(s["tokens"])
        if s["loss_mask"] is not None:
            assert len(s["loss_mask"]) == s["response_length"]
        if s["rollout_log_probs"] is not None:
            assert len(s["rollout_log_probs"]) == s["response_length"]
    ref.tensorize(ref.convert_samples_to_train_data(case["samples"], **case["args"]))
    assert slime_cases.make_cases()[name]["samples"] is not case["samples"]


def test_ppo_case_keeps_ints():
    c = CASES["ppo_passthrough"]
    td = ref.convert_samples_to_train_data(c["samples"], **c["args"])
    assert td["rewards"] == [1, 0, 0, 0] and all(type(r) is int for r in td["rewards"])
    assert td["rewards"] is td["raw_reward"]
