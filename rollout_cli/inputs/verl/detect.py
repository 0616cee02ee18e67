"""verl's rollout-skip cache: `{dump_dir}/{experiment}_{project}/GBS{gbs}_N{n}_in{P}_out{R}/{step}/`
holding `gen_batch.dp` (the step's generated batch) and `meta.json` (`{"global_steps": step}`).

Written by `RolloutSkip.prepare_data` (verl-project/verl@1dda039b9c63:
verl/utils/skip/rollout_skip.py:95-122) around `AgentLoopManager.generate_sequences`
(verl/experimental/agent_loop/agent_loop.py:1200), for the steps listed in `skip.rollout.steps`.
This module tells them (`claims`, `step_and_split`, `skip_note`, `rollouts_per_prompt`): what
discovery imports, so no numpy here.
"""
from __future__ import annotations

import os
import re

_CONFIG = re.compile(r"^GBS(\d+)_N(\d+)_in(\d+)_out(\d+)$")
_BATCH = "gen_batch.dp"
_META = "meta.json"
_TQ = "tq_batch.pt"


def _parts(path: str) -> list[str]:
    return os.path.normpath(os.path.abspath(path)).split(os.sep) if path != "-" else []


def _placed(path: str) -> tuple[int, re.Match] | None:
    """(step, the GBS_N_in_out folder's match) of a file directly in `{config}/{step}/`."""
    parts = _parts(path)
    if len(parts) < 3 or not parts[-2].isdigit():
        return None
    m = _CONFIG.match(parts[-3])
    return (int(parts[-2]), m) if m else None


def claims(path: str) -> bool:
    """A `gen_batch.dp` anywhere (its reader tells a file that is not verl's DataProto), and the
    other files of a step folder of the cache (`meta.json`; the TransferQueue trainer's
    `{step}/{inner}/tq_batch.pt`), claimed so that `skip_note` leaves them out."""
    name = os.path.basename(path)
    if name == _BATCH:
        return True
    if name == _META:
        return _placed(path) is not None
    if name == _TQ:
        parts = _parts(path)
        return len(parts) >= 4 and parts[-2].isdigit() and parts[-3].isdigit() and _CONFIG.match(parts[-4]) is not None
    return False


def step_and_split(path: str) -> tuple[int, str] | None:
    """The step from the `{step}` folder; the cache holds training rollouts only (validation
    bypasses it, verl/utils/skip/skip_manager.py:67-77)."""
    placed = _placed(path)
    return (placed[0], "train") if placed else None


def rollouts_per_prompt(path: str) -> int | None:
    """N, the rollouts per prompt, from the `GBS{gbs}_N{n}_in{P}_out{R}` folder (None: not in one)."""
    placed = _placed(path)
    return int(placed[1].group(2)) if placed else None


def skip_note(path: str, options=None, named: bool = False) -> str | None:
    name = os.path.basename(path)
    if name == _META:
        return f"{path}: verl rollout-skip step metadata (the step's number), not samples, skipped"
    if name == _TQ:
        return (f"{path}: verl TransferQueue rollout cache (a torch.save of a TensorDict), not read; "
                "the rollout-skip cache's gen_batch.dp is")
    return None


def version_lag(step: int, version: str) -> int | None:
    """How many steps behind rollout step `step` the weights `version` (a `global_steps` value)
    are: step N's own policy is version N - 1, the step the trainer last finished before
    generating (verl/trainer/ppo/ray_trainer.py:1451-1455; the rollout server's version,
    verl/workers/rollout/llm_server.py:284-286). None where `version` is not an integer."""
    try:
        v = int(version)
    except (TypeError, ValueError):
        return None
    return step - 1 - v
