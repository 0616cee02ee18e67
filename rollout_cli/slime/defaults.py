"""slime's parser defaults for the args the hooks read, used for any attribute the `args`
object lacks (slime's own plugin contract tests call the hooks with a bare object)."""
from __future__ import annotations

from typing import Any

# Read from THUDM/slime@624b824a898ab0ec1fcb4d373004c7f3852bf515 (2026-08-21),
# slime/utils/arguments.py; each comment gives the flag's line there.
SLIME_COMMIT = "624b824a898ab0ec1fcb4d373004c7f3852bf515"
SLIME_ARG_DEFAULTS: dict[str, Any] = {
    "advantage_estimator": "grpo",  # --advantage-estimator, :941
    "n_samples_per_prompt": 1,  # --n-samples-per-prompt, :700
    "reward_key": None,  # --reward-key, :1337
    "rewards_normalization": True,  # --disable-rewards-normalization (store_false), :1012
    "grpo_std_normalization": True,  # --disable-grpo-std-normalization (store_false), :1006;
    # parse_args sets it to False when n_samples_per_prompt == 1 (:1981), applied in settings()
    "rollout_top_p": 1.0,  # --rollout-top-p, :349
    # --rollout-batch-size is required=True (:691-693): there is no default. Without it no batch
    # can hold n_samples_per_prompt x rollout_batch_size samples, so slime's reward rule
    # (slime/ray/rollout.py:619-623) takes the whole batch as one row.
    "rollout_batch_size": None,
}


def slime_arg(args: Any, name: str) -> Any:
    """`args.name`, or slime's parser default when `args` has no such attribute."""
    return getattr(args, name, SLIME_ARG_DEFAULTS[name])
