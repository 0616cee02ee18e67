"""Stage 3b: the staleness rule (`convert --max-staleness N`): a rollout whose oldest weight
version is more than N steps behind its step is rejected whole, every sample of it written to
the rejects report with rule `weight_versions.stale` and the version that decided it.

How far behind a step a version is belongs to the input's format (its `version_lag` hook,
inputs/format.py: slime's count of weight updates for the slime-shaped formats); a sample
whose versions are all not comparable (or that records none) does not make its rollout stale.
A rollout's oldest version is the one furthest behind over all its samples' versions, each
sample holding one version per generation call (a partial rollout resumed across weight
updates holds several). The rule is a rejection, not invalid input: it applies under
`--on-error fail` too, and its rejects do not count towards --max-errors.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ..core.errors import Location, Problem

STALE_RULE = "weight_versions.stale"  # the rule id of a sample rejected with its stale rollout


def oldest_versions(versions: Sequence[Sequence[str] | None], step: int,
                    lag: Callable[[int, str], int | None]) -> list[tuple[int, str] | None]:
    """Per row: (how many steps behind `step`, the version) of its oldest comparable version,
    or None where it has none (no versions, or none comparable)."""
    out: list[tuple[int, str] | None] = []
    cache: dict[str, int | None] = {}
    for vs in versions:
        best = None
        for v in vs or ():
            if v not in cache:
                cache[v] = lag(step, v)
            d = cache[v]
            if d is not None and (best is None or d > best[0]):
                best = (d, v)
        out.append(best)
    return out


def stale_rollouts(oldest: list[tuple[int, str] | None], rollout_ids, max_staleness: int,
                   step: int) -> dict[int, tuple[int, str]]:
    """The rollouts (of rows with ids `rollout_ids`, aligned with `oldest`) whose oldest version
    is more than `max_staleness` steps behind: rollout id -> (steps behind, the version). No numpy
    here: the converting process reads STALE_RULE."""
    worst: dict[int, tuple[int, str]] = {}
    for o, rid in zip(oldest, rollout_ids.tolist()):
        if o is not None and o[0] > max_staleness and (rid not in worst or o[0] > worst[rid][0]):
            worst[rid] = o
    return worst


def stale_problem(where: Location, rollout_id: int, lag: int, version: str, step: int, max_staleness: int) -> Problem:
    """Why a sample of a stale rollout is rejected."""
    return Problem(where, "weight_versions",
                   f"rollout {rollout_id}: its oldest weight version {version!r} is {lag} steps behind step {step}, "
                   f"more than --max-staleness {max_staleness}", STALE_RULE)
