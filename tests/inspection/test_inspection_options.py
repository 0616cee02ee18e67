"""inspection/options.py: inspect takes convert's rule options and checks them as convert does, a
split of the layout's, how many anomalies of each kind to keep; its JSON names slime_compat only
when it is on."""
from __future__ import annotations

import pytest

from rollout_cli.core.errors import UsageError
from rollout_cli.core.options import RuleOptions
from rollout_cli.inspection.options import DEFAULT_MAX_ANOMALIES, InspectOptions


def test_the_checks():
    InspectOptions(split="eval", max_anomalies=None).check()
    InspectOptions(max_anomalies=0).check()
    assert InspectOptions().max_anomalies == DEFAULT_MAX_ANOMALIES
    with pytest.raises(UsageError, match="--split: expected one of train, eval"):
        InspectOptions(split="test").check()
    with pytest.raises(UsageError, match="--max-anomalies: expected 0 or more"):
        InspectOptions(max_anomalies=-1).check()
    with pytest.raises(UsageError, match="--reward-baseline"):
        InspectOptions(reward_baseline="mean").check()


def test_the_id_and_reward_options_shown():
    d = InspectOptions(n_samples_per_prompt=4).id_reward_options()
    assert "slime_compat" not in d and d["n_samples_per_prompt"] == 4
    assert d == {k: v for k, v in RuleOptions(n_samples_per_prompt=4).rule_options().items() if k != "slime_compat"}
    d = InspectOptions(slime_compat=True, rollout_batch_size=8).id_reward_options()
    assert d["slime_compat"] is True and d["rollout_batch_size"] == 8
