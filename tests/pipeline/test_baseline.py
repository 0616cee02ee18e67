"""The rollout baseline (each rollout once in its prompt group's mean and std) and the loss
denominators (group and step totals), hand-computed and as properties."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import copts, make_sample, read_rows, write_jsonl
from rollout_cli.core.errors import InvalidInputError, UsageError
from rollout_cli.core.options import ConvertOptions, RuleOptions
from rollout_cli.pipeline.fields import group_fields, step_fields
from rollout_cli.pipeline.rewards import (SiblingRewardConflict, baseline_shift, group_labels, normalize_rewards,
                                          rollout_baseline_rewards)
from rollout_cli.run.convert import convert

SPEC_ROW_10 = 0.7071057558059692  # slime-spec 3a: a row [1, 0] normalises to +-this
TOL = 2e-6


def _convert(tmp_path, samples, name="5.jsonl", **opts):
    inp = write_jsonl(tmp_path / "in" / name, samples)
    out = tmp_path / "out"
    result = convert([str(inp)], str(out), copts(**opts))
    return result, read_rows(out)


def _fanout():
    """Group 0: rollout 10 emits three samples (reward 1), rollout 11 one (reward 0).
    Group 1: two plain rollouts, rewards 0 and 1. Response lengths differ per sample."""
    return [
        make_sample(index=0, group_index=0, rollout_id=10, reward=1.0, response_length=2),
        make_sample(index=1, group_index=0, rollout_id=10, reward=1.0, response_length=3),
        make_sample(index=2, group_index=0, rollout_id=10, reward=1.0, response_length=4),
        make_sample(index=3, group_index=0, rollout_id=11, reward=0.0, response_length=5),
        make_sample(index=4, group_index=1, rollout_id=12, reward=0.0, response_length=1),
        make_sample(index=5, group_index=1, rollout_id=13, reward=1.0, response_length=2),
    ]


# ------------------------------------------------------------------------------ hand-computed


def test_uneven_fanout_sample_baseline_is_todays_rule(tmp_path):
    _, rows = _convert(tmp_path, _fanout())
    # samples [1, 1, 1, 0]: mean 0.75, unbiased std 0.5
    want = [0.25 / 0.500001] * 3 + [-0.75 / 0.500001, -SPEC_ROW_10, SPEC_ROW_10]
    assert [r["reward"] for r in rows] == pytest.approx(want, abs=TOL)


def test_uneven_fanout_rollout_baseline_counts_each_rollout_once(tmp_path):
    result, rows = _convert(tmp_path, _fanout(), reward_baseline="rollout")
    # rollouts [1, 0]: mean 0.5, unbiased std 0.7071: the three siblings share +0.7071
    want = [SPEC_ROW_10] * 3 + [-SPEC_ROW_10, -SPEC_ROW_10, SPEC_ROW_10]
    assert [r["reward"] for r in rows] == pytest.approx(want, abs=TOL)
    assert [r["group_mask_sum"] for r in rows] == [14, 14, 14, 14, 3, 3]
    assert [r["group_rollouts"] for r in rows] == [2, 2, 2, 2, 2, 2]
    assert [r["rollout_mask_sum"] for r in rows] == [9, 9, 9, 5, 1, 2]
    assert {(r["step_mask_sum"], r["step_rollouts"], r["step_samples"], r["step_groups"]) for r in rows} == {(17, 4, 6, 2)}
    step = result["steps"][0]
    assert (step["rows"], step["rollouts"]) == (6, 4)


def test_manifest_records_baseline_and_step_denominators(tmp_path):
    _convert(tmp_path, _fanout(), reward_baseline="rollout", sibling_reward="mean")
    import json

    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert m["options"]["reward_baseline"] == "rollout" and m["options"]["sibling_reward"] == "mean"
    s = m["steps"][0]
    assert (s["step_mask_sum"], s["step_rollouts"], s["step_samples"], s["step_groups"]) == (17, 4, 6, 2)


def test_sample_baseline_records_no_sibling_rule(tmp_path):
    import json

    _convert(tmp_path, _fanout())
    opts = json.loads((tmp_path / "out" / "manifest.json").read_text())["options"]
    assert opts["reward_baseline"] == "sample" and "sibling_reward" not in opts


def test_one_rollout_with_three_samples_gets_zero(tmp_path):
    samples = [make_sample(index=i, group_index=0, rollout_id=5, reward=0.25, response_length=i + 1) for i in range(3)]
    _, rows = _convert(tmp_path, samples, reward_baseline="rollout")
    assert [r["reward"] for r in rows] == [0.0, 0.0, 0.0]
    assert [r["group_rollouts"] for r in rows] == [1, 1, 1]
    assert [r["group_mask_sum"] for r in rows] == [6, 6, 6]


def test_siblings_with_different_rewards_exit_3_naming_step_rollout_and_values(tmp_path):
    samples = [make_sample(index=i, group_index=0, rollout_id=5, reward=r) for i, r in enumerate([1.0, 0.0, 0.5])]
    samples.append(make_sample(index=3, group_index=0, rollout_id=6, reward=1.0))
    with pytest.raises(InvalidInputError) as e:
        _convert(tmp_path, samples, reward_baseline="rollout")
    assert e.value.exit_code == 3
    msg = str(e.value)
    assert "train step 5" in msg and "rollout 5" in msg and "1.0, 0.0, 0.5" in msg and "5.jsonl:line 1" in msg
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_sibling_reward_mean_averages_first(tmp_path):
    samples = [make_sample(index=i, group_index=0, rollout_id=5, reward=r) for i, r in enumerate([1.0, 0.0, 0.5])]
    samples.append(make_sample(index=3, group_index=0, rollout_id=6, reward=1.0))
    _, rows = _convert(tmp_path, samples, reward_baseline="rollout", sibling_reward="mean")
    # rollouts [0.5, 1.0]: mean 0.75, unbiased std 0.35355
    r = 0.25 / (math.sqrt(0.125) + 1e-6)
    assert [x["reward"] for x in rows] == pytest.approx([-r, -r, -r, r], abs=TOL)


def test_all_equal_rewards_give_zero(tmp_path):
    samples = [make_sample(index=i, group_index=0, rollout_id=i // 2, reward=0.75) for i in range(5)]
    for baseline in ("sample", "rollout"):
        _, rows = _convert(tmp_path / baseline, samples, reward_baseline=baseline)
        assert [r["reward"] for r in rows] == [0.0] * 5


def test_removed_sample_counts_in_the_baseline_not_in_the_mask(tmp_path):
    samples = _fanout()
    samples[1]["remove_sample"] = True  # a sibling of rollout 10: reward still counts, mask zeroed
    samples[3]["remove_sample"] = True  # rollout 11 fully removed: it still counts as a rollout
    _, rows = _convert(tmp_path, samples, reward_baseline="rollout")
    assert [r["reward"] for r in rows] == pytest.approx([SPEC_ROW_10] * 3 + [-SPEC_ROW_10, -SPEC_ROW_10, SPEC_ROW_10], abs=TOL)
    assert [r["rollout_mask_sum"] for r in rows] == [6, 6, 6, 0, 1, 2]
    assert [r["group_mask_sum"] for r in rows] == [6, 6, 6, 6, 3, 3]
    assert [r["group_rollouts"] for r in rows] == [2, 2, 2, 2, 2, 2]
    assert {r["step_mask_sum"] for r in rows} == {9}


def test_rollout_baseline_on_eval_keeps_rewards_and_still_counts_groups(tmp_path):
    _, _ = _convert(tmp_path, _fanout(), name="eval_5.jsonl", reward_baseline="rollout")
    rows = read_rows(tmp_path / "out", "eval")
    assert [r["reward"] for r in rows] == [1.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    assert [r["group_rollouts"] for r in rows] == [2] * 6


def test_options_are_checked():
    with pytest.raises(UsageError, match="--reward-baseline"):
        RuleOptions(reward_baseline="prompt").check()
    with pytest.raises(UsageError, match="--sibling-reward"):
        RuleOptions(sibling_reward="max").check()
    with pytest.raises(UsageError, match="--slime-compat.*rollout"):
        ConvertOptions(slime_compat=True, rollout_batch_size=2, reward_baseline="rollout").check()
    ConvertOptions(slime_compat=True, rollout_batch_size=2).check()


def test_conflict_names_the_first_bad_rollout_and_its_rows():
    with pytest.raises(SiblingRewardConflict) as e:
        rollout_baseline_rewards(np.array([1.0, 2.0, 2.0, 3.0]), [0, 0, 0, 0], np.array([4, 7, 7, 4]))
    assert (e.value.rollout_id, e.value.rows, e.value.values) == (4, [0, 3], [1.0, 3.0])


def test_baseline_shift_names_fanout_groups_only():
    values = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 1.0])
    keys = [0, 0, 0, 0, 1, 1]
    shifts = baseline_shift(values, keys, np.array([10, 10, 10, 11, 12, 13]))
    assert shifts == [{"row": 0, "samples": 4, "rollouts": 2, "sample_mean": 0.75, "rollout_mean": 0.5, "shift": -0.25}]
    assert baseline_shift(values, keys, np.arange(6)) == []


# ------------------------------------------------------------------------------ properties

_rule = dict(advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=True, n_samples_per_prompt=None)


@st.composite
def _step(draw):
    """Groups of rollouts, each rollout with 1-4 samples sharing one reward; rows shuffled."""
    rows = []  # (group, rollout, reward, mask_total)
    rid = 0
    for g in range(draw(st.integers(1, 5))):
        for _ in range(draw(st.integers(1, 5))):
            reward = draw(st.sampled_from([0.0, 1.0, 0.5, -2.0, 3.25]))
            for _ in range(draw(st.integers(1, 4))):
                rows.append((g, rid, reward, draw(st.integers(0, 9))))
            rid += 1
    order = draw(st.permutations(range(len(rows))))
    return [rows[i] for i in order]


@given(_step(), st.booleans())
@settings(max_examples=200, deadline=None)
def test_rollout_baseline_centres_and_scales_over_rollouts(rows, scale):
    keys = [g for g, _, _, _ in rows]
    ids = np.array([r for _, r, _, _ in rows])
    values = np.array([v for _, _, v, _ in rows])
    out = rollout_baseline_rewards(values, keys, ids, **dict(_rule, grpo_std_normalization=scale))
    for g in set(keys):
        per_rollout = {}
        for (gg, r, v, _), x in zip(rows, out.tolist()):
            if gg == g:
                assert per_rollout.setdefault(r, x) == x  # siblings share the value
        vals = np.array(list(per_rollout.values()), dtype=np.float64)
        raw = np.array(sorted({(r, v) for gg, r, v, _ in rows if gg == g}))[:, 1]
        assert abs(vals.mean()) < 1e-5
        if scale and len(vals) > 1 and raw.std(ddof=1) > 0.1:
            assert vals.std(ddof=1) == pytest.approx(1.0, abs=1e-4)
        if len(set(raw.tolist())) == 1:
            assert (vals == 0).all()


@given(_step())
@settings(max_examples=200, deadline=None)
def test_rollout_baseline_without_fanout_is_the_sample_rule(rows):
    """With one sample per rollout the two baselines are the same computation."""
    seen, plain = set(), []
    for row in rows:
        if row[1] not in seen:
            seen.add(row[1])
            plain.append(row)
    keys = [g for g, _, _, _ in plain]
    values = np.array([v for _, _, v, _ in plain])
    a = rollout_baseline_rewards(values, keys, np.array([r for _, r, _, _ in plain]), **_rule)
    b = normalize_rewards(values, keys, **_rule)
    assert np.array_equal(a, b)


@given(_step())
@settings(max_examples=200, deadline=None)
def test_group_fields_are_group_totals(rows):
    keys = [g for g, _, _, _ in rows]
    ids = np.array([r for _, r, _, _ in rows])
    masks = np.array([m for _, _, _, m in rows])
    gms, gro = group_fields(group_labels(keys), ids, masks)
    for i, (g, _, _, _) in enumerate(rows):
        assert gms[i] == sum(m for gg, _, _, m in rows if gg == g)
        assert gro[i] == len({r for gg, r, _, _ in rows if gg == g})
    assert step_fields(ids, masks, group_labels(keys)) == {
        "step_mask_sum": int(masks.sum()), "step_rollouts": len(set(ids.tolist())), "step_samples": len(rows),
        "step_groups": len(set(keys))}


@given(_step(), st.integers(1, 4), st.booleans())
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_denominators_summed_over_a_steps_shards_equal_the_steps(tmp_path_factory, rows, shards, keep_groups):
    samples = [make_sample(index=i, group_index=g, rollout_id=r, reward=v, response_length=m + 1,
                           loss_mask=[1] * m + [0]) for i, (g, r, v, m) in enumerate(rows)]
    tmp = tmp_path_factory.mktemp("denoms")
    inp = write_jsonl(tmp / "in" / "3.jsonl", samples)
    convert([str(inp)], str(tmp / "out"), copts(shards=shards, keep_groups=keep_groups, reward_baseline="rollout"))
    from conftest import shard_paths
    import pyarrow.parquet as pq

    tables = [pq.read_table(p).to_pylist() for p in shard_paths(tmp / "out")]
    every = [r for t in tables for r in t]
    step = {(r["step_mask_sum"], r["step_rollouts"], r["step_samples"], r["step_groups"]) for r in every}
    assert step == {(sum(m for *_, m in rows), len({r for _, r, _, _ in rows}), len(rows), len({g for g, *_ in rows}))}
    # the per-prompt mean of a per-sample constant 1 over all shards is 1: each group's rows sum
    # to its mask total, over group_mask_sum, over step_groups
    per_prompt = sum(sum(r["loss_mask"]) / (r["group_mask_sum"] * r["step_groups"]) for r in every if r["group_mask_sum"])
    groups_with_tokens = len({g for g, *_, m in rows if m})
    assert per_prompt == pytest.approx(groups_with_tokens / len({g for g, *_ in rows}))
    assert sum(sum(r["loss_mask"]) for r in every) == sum(m for *_, m in rows)
    assert sum(len({r["rollout_id"] for r in t}) for t in tables) == len({r for _, r, _, _ in rows})
    assert sum(len(t) for t in tables) == len(rows)
    # a prompt group's local mask totals over the shards add up to its group_mask_sum
    for g in {r["group_index"] for r in every}:
        local = sum(sum(r["loss_mask"]) for r in every if r["group_index"] == g)
        assert {r["group_mask_sum"] for r in every if r["group_index"] == g} == {local}
