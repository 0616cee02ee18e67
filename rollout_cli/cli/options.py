"""Flags shared by several commands, declared once (defaults from core.options.RuleOptions)."""
from __future__ import annotations

import typer

from ..core.choices import RewardBaseline, SiblingReward
from ..core.options import RuleOptions

_RULES = RuleOptions()


def reward_baseline_option():
    return typer.Option(
        RewardBaseline(_RULES.reward_baseline), "--reward-baseline",
        help="What counts once in a prompt group's reward mean and std: sample, or rollout (its samples share "
             "its reward; not with --slime-compat).",
    )


def sibling_reward_option():
    return typer.Option(
        SiblingReward(_RULES.sibling_reward), "--sibling-reward",
        help="Under --reward-baseline rollout, siblings with different rewards: error (exit 3) or mean.",
    )
