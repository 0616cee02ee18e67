"""What a slime (or miles) `weight_versions` entry says about a rollout step: the `version_lag`
hook of the slime-shaped formats (`.pt`, JSONL, Parquet; inputs/format.py).

slime's weight updater counts its weight updates (`UpdateWeightFrom*.update_weights`:
`self.weight_version += 1`, from 0 when the training process starts) and hands the count to
the rollout engines, which stamp it, as a string, on every generation call
(`Sample.weight_versions`, one entry per call). `train.py` and `train_async.py` update the
weights once before the first rollout and once after each step's training
(`--update-weights-interval 1`, the default), so in a run from rollout step 0 the policy that
generates step N is version N + 1, and version V is N + 1 - V steps behind step N: 0 for a
synchronous run, 1 for `train_async.py`'s steps after the first, more for a partial rollout
resumed across updates. A version that is not a decimal integer is not comparable (None).

The count starts over with the process: a run resumed at `--start-rollout-id S` stamps step S
with version 1, so its versions are S behind their steps by this rule, and a larger
`--update-weights-interval` makes every step look older than it is. `convert --max-staleness`
is meant for runs from step 0 with the default interval (docs/rules.md says so)."""
from __future__ import annotations


def versions_behind(step: int, version: str) -> int | None:
    """How many steps behind rollout step `step` slime's weight version `version` is (negative:
    ahead of it), or None where `version` is not a decimal integer."""
    if not isinstance(version, str) or not version.isascii() or not version.isdigit():
        return None
    return step + 1 - int(version)
