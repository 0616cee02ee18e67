"""Stage 4a (rewards.py): grouping by group_index, estimators, flags; slime_compat is the oracle."""
from __future__ import annotations

import random

import numpy as np
import pytest

import slime_reference as ref
from slime_cases import CASES, fresh_case
from rollout_cli.pipeline.rewards import group_keys, normalize_rewards, slime_compat_note, slime_compat_rewards

F32 = np.float32
# slime-spec 3a: a row [1, 0] normalises to +-0.7071057558059692
SPEC_ROW_10 = 0.7071057558059692
TOL = 2e-6  # float32 mean/std rounding may differ from torch by one ulp


def _oracle_rows(values, rows, **kw):
    """Oracle rewards for `values` grouped into the given rows (each row normalised on its own)."""
    out = np.zeros(len(values))
    for members in rows:
        samples = [{"reward": values[i], "status": "completed"} for i in members]
        _, r = ref.post_process_rewards(samples, rollout_batch_size=1, n_samples_per_prompt=len(members), **kw)
        out[members] = r
    return out


# ------------------------------------------------------------------------------ group keys


def test_group_keys_use_group_index():
    assert group_keys([3, 3, 1, 1], None) == [3, 3, 1, 1]
    assert group_keys([3, 3, 1, 1], 4) == [3, 3, 1, 1]


def test_group_keys_consecutive_chunks_when_missing():
    keys = group_keys([None] * 6, 2)
    assert keys[0] == keys[1] and keys[2] == keys[3] and keys[4] == keys[5]
    assert len({keys[0], keys[2], keys[4]}) == 3


def test_group_keys_missing_without_n_is_an_error():
    with pytest.raises(ValueError):
        group_keys([0, None], None)


def test_chunk_keys_never_collide_with_group_index_values():
    keys = group_keys([0, None, None, 1], 2)
    assert keys[1] == keys[2]
    assert keys[1] not in (keys[0], keys[3])


# ------------------------------------------------------------------------------ grouping


def test_grouped_by_group_index_not_position():
    # interleaved_groups case: slime's position rows give zeros, by group_index each group is [1, 0]
    case = fresh_case("interleaved_groups")
    values = [s["reward"] for s in case["samples"]]
    keys = [s["group_index"] for s in case["samples"]]
    got = normalize_rewards(values, keys, n_samples_per_prompt=2)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, [SPEC_ROW_10, SPEC_ROW_10, -SPEC_ROW_10, -SPEC_ROW_10], atol=TOL, rtol=0)
    np.testing.assert_allclose(got, _oracle_rows(values, [[0, 2], [1, 3]]), atol=TOL, rtol=0)


def test_consecutive_chunks_when_group_index_missing():
    values = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    keys = group_keys([None] * 8, 4)
    got = normalize_rewards(values, keys, n_samples_per_prompt=4)
    expected = _oracle_rows(values, [[0, 1, 2, 3], [4, 5, 6, 7]])
    np.testing.assert_allclose(got, expected, atol=TOL, rtol=0)
    # hand: [1,0,1,1]: mean .75, std .5 -> .25/.500001, -.75/.500001
    assert got[0] == pytest.approx(0.25 / 0.500001, abs=TOL)
    assert got[1] == pytest.approx(-0.75 / 0.500001, abs=TOL)


def test_one_sample_group_gives_zero_not_nan():
    got = normalize_rewards([1.0, 1.0, 0.0], [0, 1, 1], n_samples_per_prompt=2)
    assert not np.isnan(got).any()
    assert got[0] == 0.0
    assert got[1] == pytest.approx(SPEC_ROW_10, abs=TOL) and got[2] == pytest.approx(-SPEC_ROW_10, abs=TOL)


def test_one_sample_case_gives_zero():
    # slime gives NaN for this dump (one_sample_group); the converter must give 0.0
    case = fresh_case("one_sample_group")
    got = normalize_rewards([s["reward"] for s in case["samples"]], [0], n_samples_per_prompt=4)
    assert got.tolist() == [0.0]


def test_identical_rewards_give_zero():
    got = normalize_rewards([0.3] * 4, [5] * 4)
    assert np.all(got == 0.0)


def test_empty():
    assert normalize_rewards([], []).tolist() == []


@pytest.mark.parametrize("estimator", ["grpo", "gspo", "cispo"])
def test_std_scaled_estimators(estimator):
    values = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    got = normalize_rewards(values, [0] * 4 + [1] * 4, advantage_estimator=estimator, n_samples_per_prompt=4)
    expected = _oracle_rows(values, [[0, 1, 2, 3], [4, 5, 6, 7]], advantage_estimator=estimator)
    np.testing.assert_allclose(got, expected, atol=TOL, rtol=0)
    assert got[0] == pytest.approx(1.4999970, abs=TOL)  # hand: .75 / (.5 + 1e-6)


def test_rpp_baseline_mean_centred_only():
    values = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    got = normalize_rewards(values, [0] * 4 + [1] * 4, advantage_estimator="reinforce_plus_plus_baseline",
                            n_samples_per_prompt=4)
    np.testing.assert_allclose(got, [0.75, -0.25, -0.25, -0.25, 0.25, 0.25, -0.75, 0.25], atol=1e-7, rtol=0)


@pytest.mark.parametrize("estimator", ["ppo", "reinforce_plus_plus"])
def test_passthrough_estimators(estimator):
    values = [1.0, 0.0, 0.25, 3.0]
    got = normalize_rewards(values, [0, 0, 1, 1], advantage_estimator=estimator, n_samples_per_prompt=2)
    assert got.tolist() == values


def test_disable_rewards_normalization():
    values = [1.0, 0.0, 0.25, 3.0]
    got = normalize_rewards(values, [0, 0, 1, 1], rewards_normalization=False, n_samples_per_prompt=2)
    assert got.tolist() == values


def test_disable_grpo_std_normalization():
    values = [1.0, 0.0, 0.0, 0.0]
    got = normalize_rewards(values, [0] * 4, grpo_std_normalization=False, n_samples_per_prompt=4)
    np.testing.assert_allclose(got, [0.75, -0.25, -0.25, -0.25], atol=1e-7, rtol=0)


def test_n1_turns_std_off_as_parse_args_does():
    # slime's parse_args: n_samples_per_prompt == 1 forces grpo_std_normalization off
    got = normalize_rewards([1.0, 0.0], [0, 0], n_samples_per_prompt=1)
    np.testing.assert_allclose(got, [0.5, -0.5], atol=1e-7, rtol=0)


@pytest.mark.parametrize("seed", range(10))
def test_random_groups_match_oracle_per_group(seed):
    rng = random.Random(seed)
    sizes = [rng.randint(2, 8) for _ in range(rng.randint(1, 6))]
    keys = [g for g, k in enumerate(sizes) for _ in range(k)]
    rng.shuffle(keys)
    values = [rng.choice([0.0, 1.0, 0.5, rng.random()]) for _ in keys]
    got = normalize_rewards(values, keys)
    rows = [[i for i, k in enumerate(keys) if k == g] for g in range(len(sizes))]
    np.testing.assert_allclose(got, _oracle_rows(values, rows), atol=TOL, rtol=0)


# ------------------------------------------------------------------------------ against the oracle


def _selected(case):
    key = case["args"].get("reward_key")
    return [ref.get_reward_value(s, key) for s in case["samples"]]


CORRECT = [name for name, c in CASES.items() if c["slime_groups_correctly"]]


@pytest.mark.parametrize("name", CORRECT)
def test_default_mode_equals_oracle_where_slime_groups_correctly(name):
    case = fresh_case(name)
    a = case["args"]
    _, expected = ref.post_process_rewards(case["samples"], **a)
    got = normalize_rewards(
        np.asarray(_selected(case), dtype=np.float64),
        group_keys([s["group_index"] for s in case["samples"]], a["n_samples_per_prompt"]),
        advantage_estimator=a["advantage_estimator"],
        n_samples_per_prompt=a["n_samples_per_prompt"],
    )
    np.testing.assert_allclose(got, np.asarray(expected, dtype=np.float64), atol=TOL, rtol=0)


@pytest.mark.filterwarnings("ignore:std\\(\\):UserWarning")  # one-sample row: NaN, as slime
@pytest.mark.parametrize("name", sorted(CASES))
def test_slime_compat_bit_for_bit(name):
    case = fresh_case(name)
    a = case["args"]
    _, expected = ref.post_process_rewards(case["samples"], **a)
    got = slime_compat_rewards(
        np.asarray(_selected(case), dtype=np.float64),
        advantage_estimator=a["advantage_estimator"],
        rewards_normalization=True,
        grpo_std_normalization=True,
        n_samples_per_prompt=a["n_samples_per_prompt"],
        rollout_batch_size=a["rollout_batch_size"],
    )
    exp32 = np.asarray(expected, dtype=np.float64).astype(F32)
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), exp32.view(np.uint32)), (got, exp32)


@pytest.mark.parametrize("n,rbs,size", [(2, 3, 6), (2, 3, 8), (4, 1, 3), (3, 2, 6), (1, 5, 5), (4, 2, 7)])
@pytest.mark.parametrize("estimator", ["grpo", "reinforce_plus_plus_baseline", "ppo"])
def test_slime_compat_reshape_and_whole_batch_fallback(n, rbs, size, estimator):
    rng = random.Random(n * 100 + rbs * 10 + size)
    values = [rng.choice([0.0, 1.0, 0.25, rng.random()]) for _ in range(size)]
    samples = [{"reward": v, "status": "completed"} for v in values]
    _, expected = ref.post_process_rewards(samples, advantage_estimator=estimator, n_samples_per_prompt=n,
                                           rollout_batch_size=rbs)
    got = slime_compat_rewards(np.asarray(values), advantage_estimator=estimator, rewards_normalization=True,
                               grpo_std_normalization=True, n_samples_per_prompt=n, rollout_batch_size=rbs)
    exp32 = np.asarray(expected, dtype=np.float64).astype(F32)
    assert np.array_equal(got.view(np.uint32), exp32.view(np.uint32))


@pytest.mark.parametrize("rn,std", [(False, True), (True, False), (False, False)])
def test_slime_compat_flags(rn, std):
    values = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    samples = [{"reward": v, "status": "completed"} for v in values]
    _, expected = ref.post_process_rewards(samples, n_samples_per_prompt=3, rollout_batch_size=2,
                                           rewards_normalization=rn, grpo_std_normalization=std)
    got = slime_compat_rewards(np.asarray(values), advantage_estimator="grpo", rewards_normalization=rn,
                               grpo_std_normalization=std, n_samples_per_prompt=3, rollout_batch_size=2)
    exp32 = np.asarray(expected, dtype=np.float64).astype(F32)
    assert np.array_equal(got.view(np.uint32), exp32.view(np.uint32))


def _note(size, n=8, rbs=24, estimator="grpo", rn=True):
    return slime_compat_note(size, advantage_estimator=estimator, rewards_normalization=rn, n_samples_per_prompt=n,
                             rollout_batch_size=rbs)


def test_slime_compat_note_says_when_the_batch_is_one_group():
    assert _note(188) == "188 samples, not 8 × 24: normalised as one group, as slime does"
    assert _note(192) is None  # 8 x 24: rows of 8
    assert _note(0) is None
    assert _note(5, n=None, rbs=4) == ("5 samples, not 1 × 4 (no --n-samples-per-prompt: slime's default 1): "
                                       "normalised as one group, as slime does")
    assert _note(4, n=None, rbs=4) is None
    # rewards not normalised: the batch's shape decides nothing
    assert _note(188, rn=False) is None and _note(188, estimator="ppo") is None
    assert _note(188, estimator="reinforce_plus_plus_baseline") is not None


def test_the_note_matches_what_slime_compat_rewards_does():
    """Where the note says 'one group', the rewards are the whole batch normalised; elsewhere rows of n."""
    values = np.asarray([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0], dtype=np.float64)
    rule = dict(advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=True)
    for size, rbs in ((8, 4), (8, 3), (6, 3), (6, 4)):
        got = slime_compat_rewards(values[:size], n_samples_per_prompt=2, rollout_batch_size=rbs, **rule)
        whole = slime_compat_rewards(values[:size], n_samples_per_prompt=size, rollout_batch_size=1, **rule)
        one_group = _note(size, n=2, rbs=rbs) is not None
        assert one_group == (size != 2 * rbs)
        assert np.array_equal(got, whole) == one_group, (size, rbs)
# ------------------------------------------------------------------------------ named rules


def test_slime_row_length_is_slimes_reshape():
    from rollout_cli.pipeline.rewards import slime_row_length

    assert slime_row_length(6, 2, 3) == 2  # n x rbs: rows of n
    assert slime_row_length(7, 2, 3) == 7  # otherwise the whole batch
    assert slime_row_length(6, 2, None) == 6 and slime_row_length(6, None, 3) == 6


def test_the_slime_hooks_group_as_slime_rows():
    """One implementation: the hooks' chunk of group-less samples is slime_row_length."""
    from rollout_cli.core.options import RuleOptions
    from rollout_cli.slime import plugin

    for size in (6, 7, 12):
        opts = RuleOptions(n_samples_per_prompt=2, rollout_batch_size=3)
        assert plugin._chunk(opts, size) == (2 if size == 6 else size)


PLAIN_CASES = sorted(n for n, c in CASES.items()
                     if c["args"].get("reward_key") is None and c["args"].get("advantage_estimator", "grpo") == "grpo"
                     and all(isinstance(s.get("reward"), (int, float)) and s.get("group_index") is not None
                             for s in c["samples"]))


@pytest.mark.filterwarnings("ignore:std\\(\\)")  # slime's one-sample row: torch warns, the value is NaN
@pytest.mark.parametrize("name", PLAIN_CASES)
def test_named_reward_rules_are_the_functions_convert_runs(name):
    from rollout_cli.core.options import RuleOptions
    from rollout_cli.pipeline.rewards import REWARD_RULES, apply_reward_rule, expected_reward_rule

    case = fresh_case(name)
    samples, a = case["samples"], case["args"]
    opts = RuleOptions(n_samples_per_prompt=a["n_samples_per_prompt"], rollout_batch_size=a["rollout_batch_size"])
    values = np.array([float(s["reward"]) for s in samples])
    keys = group_keys([s["group_index"] for s in samples], opts.n_samples_per_prompt)
    ids = np.array(ref.fill_rollout_ids(samples), dtype=np.int64)
    assert list(REWARD_RULES) == ["group", "group_rollout", "slime_positional", "raw"]
    assert expected_reward_rule(opts) == "group"
    assert apply_reward_rule("group", values, keys, ids, opts).tolist() == normalize_rewards(
        values, keys, n_samples_per_prompt=opts.n_samples_per_prompt).tolist()
    assert apply_reward_rule("raw", values, keys, ids, opts).tolist() == values.astype(np.float32).tolist()
    slime = ref.post_process_rewards(samples, n_samples_per_prompt=opts.n_samples_per_prompt,
                                     rollout_batch_size=opts.rollout_batch_size)[1]
    got = apply_reward_rule("slime_positional", values, keys, ids, opts)
    assert np.array_equal(got, np.asarray(slime, dtype=np.float32), equal_nan=True)


@pytest.mark.parametrize("rule", ["group", "group_rollout", "raw"])
def test_rows_without_a_recorded_reward_take_no_part_and_stay_nan(rule):
    """NaN (a reward the framework did not record): the rule runs over the recorded rows of
    each group alone; the others stay NaN. Without any NaN nothing changes."""
    from types import SimpleNamespace

    from rollout_cli.pipeline.rewards import apply_reward_rule

    opts = SimpleNamespace(advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=True,
                           n_samples_per_prompt=None, sibling_reward="error")
    values = np.array([np.nan, 1.0, np.nan, 0.0, 3.0, np.nan])
    keys = [0, 0, 0, 0, 1, 1]
    ids = np.arange(6)
    got = apply_reward_rule(rule, values, keys, ids, opts)
    assert np.isnan(got[[0, 2, 5]]).all()
    recorded = apply_reward_rule(rule, values[[1, 3, 4]], [0, 0, 1], ids[[1, 3, 4]], opts)
    assert np.array_equal(got[[1, 3, 4]], recorded)
    if rule != "raw":
        assert got[[1, 3, 4]].tolist() == pytest.approx([0.7071, -0.7071, 0.0], abs=1e-4)
    everything = apply_reward_rule(rule, np.array([1.0, 0.0, 3.0]), [0, 0, 1], np.arange(3), opts)
    assert np.array_equal(everything, recorded)
