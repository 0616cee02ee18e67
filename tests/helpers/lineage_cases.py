"""Inputs whose framework records no reward for some samples, and weight versions: a JSONL step
read as a format whose descriptor says `rewards_recorded=False` (as a framework's reader that
writes its samples without rewards declares it), for the tests of null rewards through every
stage.

Step 1 holds two prompt groups of three one-sample rollouts: group 0 without rewards, group 1
with rewards 1.0, none and 0.0 (normalised over its two recorded rewards: +-0.7071). The samples
carry weight versions, the fifth of two."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson

REWARDS = [None, None, None, 1.0, None, 0.0]
VERSIONS = [["1"], ["1"], ["1"], ["1"], ["0", "1"], ["1"]]


def jsonl_without_rewards(monkeypatch) -> None:
    """For this test, JSONL is a format that records no rewards."""
    from rollout_cli.inputs import registry

    monkeypatch.setitem(registry.FORMATS, "jsonl", dataclasses.replace(registry.FORMATS["jsonl"], rewards_recorded=False))


def write_unrecorded(folder) -> Path:
    """The step above as `folder/1.jsonl`; returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    recs = [{"index": i, "group_index": i // 3, "tokens": [5, 6, 7, 100 + i, 101 + i], "response_length": 2,
             "loss_mask": [1, 1], "status": "completed", "reward": r, "weight_versions": v,
             "rollout_log_probs": [-0.5, -0.25]}
            for i, (r, v) in enumerate(zip(REWARDS, VERSIONS))]
    (folder / "1.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return folder
