"""rollout-cli's rules inside a slime run, through slime's two plugin hooks:

    --custom-reward-post-process-path rollout_cli.slime.post_process_rewards
    --custom-convert-samples-to-train-data-path rollout_cli.slime.convert_samples_to_train_data

Both take `(args, samples)` (slime's parsed args and the flat `list[Sample]`) and run the same
stage functions as `rollout-cli convert`. An arg the object lacks takes slime's parser default
(`SLIME_ARG_DEFAULTS`, read from slime's `arguments.py` at `SLIME_COMMIT`). Settings slime has no flag for come from environment
variables (`ROLLOUT_CLI_ROLLOUT_ID_SCOPE`, `ROLLOUT_CLI_SLIME_COMPAT`, `ROLLOUT_CLI_REWARD_BASELINE`,
`ROLLOUT_CLI_SIBLING_REWARD`; see `settings`).
Importing this starts nothing: no CLI, no worker processes; torch is imported only to build
the routed-experts tensors slime expects.
"""
from __future__ import annotations

from .defaults import SLIME_ARG_DEFAULTS, SLIME_COMMIT
from .plugin import ENV_VARS, convert_samples_to_train_data, post_process_rewards, settings

__all__ = ["ENV_VARS", "SLIME_ARG_DEFAULTS", "SLIME_COMMIT", "convert_samples_to_train_data", "post_process_rewards",
           "settings"]
