"""rollout_cli.slime.defaults: slime's parser defaults for the args the hooks read."""
from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from rollout_cli.slime import SLIME_ARG_DEFAULTS, SLIME_COMMIT, plugin, settings
from rollout_cli.slime.defaults import slime_arg


def test_the_table_names_slimes_values():
    # slime@624b824a:slime/utils/arguments.py
    assert SLIME_COMMIT.startswith("624b824a") and len(SLIME_COMMIT) == 40
    assert SLIME_ARG_DEFAULTS == {
        "advantage_estimator": "grpo", "n_samples_per_prompt": 1, "reward_key": None, "rewards_normalization": True,
        "grpo_std_normalization": True, "rollout_top_p": 1.0, "rollout_batch_size": None,
    }


def test_every_arg_the_hooks_read_is_in_the_table():
    src = inspect.getsource(plugin)
    read = {name for name in SLIME_ARG_DEFAULTS if f'slime_arg(args, "{name}")' in src}
    assert read == set(SLIME_ARG_DEFAULTS)
    assert "getattr(args" not in src  # no second default anywhere else


@pytest.mark.parametrize("name", sorted(SLIME_ARG_DEFAULTS))
def test_slime_arg_prefers_the_args_value(name):
    assert slime_arg(SimpleNamespace(), name) == SLIME_ARG_DEFAULTS[name]
    assert slime_arg(SimpleNamespace(**{name: "given"}), name) == "given"


def test_bare_args_settle_as_slimes_parse_args_does():
    opts = settings(type("Args", (), {})())
    assert (opts.advantage_estimator, opts.n_samples_per_prompt, opts.reward_key, opts.rollout_batch_size) == (
        "grpo", 1, None, None)
    # parse_args turns std scaling off for n_samples_per_prompt 1
    assert opts.rewards_normalization is True and opts.grpo_std_normalization is False
    assert settings(SimpleNamespace(n_samples_per_prompt=4)).grpo_std_normalization is True
