"""core/options.py: the options' checks (each refusal is a usage error naming the option), the
rule fields every command shares, and which settings a run records (conversion_options: what
--resume compares, so a key that appears or goes changes whether an output can be resumed)."""
from __future__ import annotations

import dataclasses

import pytest

from rollout_cli.core.choices import Estimator, values
from rollout_cli.core.errors import ExitCode, UsageError
from rollout_cli.core.options import (INPUT_FIELDS, RULE_FIELDS, ConvertOptions, RuleOptions)


def test_the_defaults_pass():
    RuleOptions().check()
    ConvertOptions().check()


@pytest.mark.parametrize("kw, option", [
    ({"advantage_estimator": "ppo-ish"}, "--advantage-estimator"),
    ({"rollout_id_scope": "global"}, "--rollout-id-scope"),
    ({"reward_baseline": "prompt"}, "--reward-baseline"),
    ({"sibling_reward": "max"}, "--sibling-reward"),
    ({"n_samples_per_prompt": 0}, "--n-samples-per-prompt"),
    ({"slime_compat": True}, "--rollout-batch-size"),
    ({"slime_compat": True, "rollout_batch_size": 4, "reward_baseline": "rollout"}, "--reward-baseline rollout"),
    ({"step": -1}, "--step"),
    ({"step": 2**63}, "--step"),
    ({"prime_rl_subset": "some"}, "--prime-rl-subset"),
])
def test_rule_options_refuse(kw, option):
    with pytest.raises(UsageError, match=option) as e:
        RuleOptions(**kw).check()
    assert e.value.exit_code == ExitCode.USAGE
    # the limits themselves are accepted
    RuleOptions(n_samples_per_prompt=1, step=2**63 - 1, slime_compat=True, rollout_batch_size=1).check()


def test_every_estimator_of_the_value_set_is_accepted():
    for name in values(Estimator):
        RuleOptions(advantage_estimator=name).check()


@pytest.mark.parametrize("kw, option", [
    ({"on_error": "ignore"}, "--on-error"),
    ({"compression": "lz5"}, "--compression"),
    ({"shards": 0}, "--shards"),
    ({"max_errors": -1}, "--max-errors"),
    ({"row_group_bytes": (1 << 16) - 1}, "--row-group-bytes"),
    ({"engine": "dask"}, "--engine"),
    ({"workers": 0}, "--workers"),
    ({"overwrite": True, "resume": True}, "--overwrite and --resume"),
    ({"wait": -0.5}, "--wait"),
    ({"wait": float("nan")}, "--wait"),
    ({"schedule": "greedy"}, "--schedule"),
    ({"global_batch_size": 8}, "--global-batch-size needs --schedule slime"),
    ({"schedule": "slime"}, "--global-batch-size"),
    ({"schedule": "slime", "global_batch_size": 0}, "--global-batch-size: expected at least 1"),
    ({"schedule": "slime", "num_steps_per_rollout": 2}, "--rollout-batch-size"),
    ({"schedule": "slime", "num_steps_per_rollout": 9, "rollout_batch_size": 2, "n_samples_per_prompt": 4},
     "global batch size of 0"),
    ({"schedule": "slime", "num_steps_per_rollout": 2, "rollout_batch_size": 4, "global_batch_size": 3},
     "disagrees"),
    ({"schedule": "slime", "global_batch_size": 4, "use_dynamic_batch_size": True}, "--max-tokens-per-gpu"),
    ({"schedule": "slime", "global_batch_size": 4, "vpp_size": 2}, "--microbatch-group-size-per-vp-stage"),
    ({"schedule": "slime", "global_batch_size": 4, "keep_groups": True}, "--keep-groups"),
])
def test_convert_options_refuse(kw, option):
    with pytest.raises(UsageError, match=option):
        ConvertOptions(**kw).check()


def test_the_slime_schedule_derives_its_global_batch_size():
    o = ConvertOptions(schedule="slime", num_steps_per_rollout=2, rollout_batch_size=4, n_samples_per_prompt=3)
    o.check()
    assert o.effective_global_batch_size() == 6
    assert ConvertOptions(schedule="slime", global_batch_size=5).effective_global_batch_size() == 5
    assert ConvertOptions().effective_global_batch_size() is None


def test_rule_fields_are_the_rule_options_less_the_input_ones():
    names = [f.name for f in dataclasses.fields(RuleOptions)]
    assert set(RULE_FIELDS) | set(INPUT_FIELDS) == set(names) and not set(RULE_FIELDS) & set(INPUT_FIELDS)
    assert "rollout_id_scope" in RULE_FIELDS and "steps" not in RULE_FIELDS
    d = RuleOptions().rule_options()
    assert "rollout_batch_size" not in d and "sibling_reward" not in d  # read only under their modes
    d = RuleOptions(slime_compat=True, rollout_batch_size=4, reward_baseline="sample").rule_options()
    assert d["rollout_batch_size"] == 4
    assert RuleOptions(reward_baseline="rollout").rule_options()["sibling_reward"] == "error"


def test_what_a_run_records():
    d = ConvertOptions().conversion_options()
    for gone in ("overwrite", "resume", "wait", "trust_pickle", "on_error", "max_errors", "steps", "workers", "engine",
                 "ray_address", "input_format", "skip_incomplete", "rollout_batch_size", "sibling_reward",
                 "prime_rl_subset", "schedule", "global_batch_size", "micro_batch_size"):
        assert gone not in d, gone
    assert list(d)[-1] == "step" and d["shards"] == 1 and d["advantage_estimator"] == "grpo"
    # the run's settings that change the bytes are recorded, a changed one with its value
    assert ConvertOptions(prime_rl_subset="all").conversion_options()["prime_rl_subset"] == "all"
    assert ConvertOptions(reward_baseline="rollout").conversion_options()["sibling_reward"] == "error"
    slime = ConvertOptions(schedule="slime", num_steps_per_rollout=2, rollout_batch_size=4).conversion_options()
    assert slime["schedule"] == "slime" and slime["num_steps_per_rollout"] == 2 and slime["rollout_batch_size"] == 4
    assert ConvertOptions(workers=3, engine="ray").conversion_options() == d
