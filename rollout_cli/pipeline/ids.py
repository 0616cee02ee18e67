"""Stage 3: the rollout-id rule (one id per rollout execution, never `sample.index`).

Explicit ids are kept. Samples without one get, in order, the smallest non-negative integers
that no explicit id of the step uses (slime's rule since its #2031). The scope decides what an
explicit id shared by samples of different prompt groups means:

- strict (default): an error; two executions that reuse one id would be merged silently.
- step: one rollout, as slime does.
- group: ids are unique within a prompt group only; the first (group, id) key in order keeps
  the value, later keys with the same value get fresh ids the way missing ids do.

This is the `fill` rule; slime's older rules are named beside it (ID_RULES, at the end), for
`audit` to name the one a trainer ran.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..core.errors import Location, Problem
from .validate import ID_EXPLICIT, ID_MISSING



@dataclass
class IdResult:
    ids: np.ndarray  # int64, one per record; meaningless where not assigned
    assigned: np.ndarray  # bool: False for records whose own id was invalid
    problems: list[tuple[int, Problem]] = field(default_factory=list)  # strict-scope conflicts
    anomalies: list[dict] = field(default_factory=list)


def _fresh_ids(taken: np.ndarray, count: int) -> np.ndarray:
    """The `count` smallest non-negative integers not in `taken`."""
    taken = np.unique(taken[taken >= 0])
    candidates = np.arange(count + len(taken), dtype=np.int64)
    return np.setdiff1d(candidates, taken, assume_unique=True)[:count]


def reused_ids(id_state: np.ndarray, explicit: np.ndarray, group_index: list) -> dict[int, list]:
    """Explicit ids carried by samples of more than one prompt group: {id: [groups, in order]}."""
    groups_of: dict[int, list] = {}
    for i in np.flatnonzero(id_state == ID_EXPLICIT).tolist():
        gs = groups_of.setdefault(int(explicit[i]), [])
        if group_index[i] not in gs:
            gs.append(group_index[i])
    return {v: gs for v, gs in groups_of.items() if len(gs) > 1}


def places(locs: list[Location], cap: int = 12) -> str:
    """Locations said once per file: 'a.jsonl:line 1, 2, 5; b.jsonl:line 3', at most `cap`
    numbers per file, then how many more."""
    by_file: dict[tuple, list] = {}
    for loc in locs:
        by_file.setdefault((loc.file, loc.kind), []).append(loc.number)
    parts = []
    for (file, kind), numbers in by_file.items():
        numbers = [n for n in numbers if n is not None]
        if not numbers:
            parts.append(file)
            continue
        more = f" and {len(numbers) - cap} more" if len(numbers) > cap else ""
        parts.append(f"{file}:{kind} {', '.join(str(n) for n in numbers[:cap])}{more}")
    return "; ".join(parts)


def assign_ids(
    id_state: np.ndarray,
    explicit: np.ndarray,
    group_index: list,
    scope: str = "strict",
    where: Callable[[int], Location] | None = None,
) -> IdResult:
    """Assign rollout ids over all parsed records of one step, in input order."""
    n = len(id_state)
    ids = np.zeros(n, dtype=np.int64)
    is_explicit = id_state == ID_EXPLICIT
    is_missing = id_state == ID_MISSING
    ids[is_explicit] = explicit[is_explicit]
    problems: list[tuple[int, Problem]] = []
    remap_positions = np.zeros(0, dtype=np.int64)
    conflicts = reused_ids(id_state, explicit, group_index)
    if conflicts and scope == "strict":
        for v, gs in conflicts.items():
            members = [i for i in np.flatnonzero(is_explicit & (ids == v)).tolist()]
            locs = [where(i) if where else Location("?", "sample", i) for i in members]
            msg = (
                f"explicit id {v} is used by {len(members)} samples of different prompt groups "
                f"{', '.join('null' if g is None else str(g) for g in gs)} ({places(locs)}); two executions may have reused it. "
                "Pass --rollout-id-scope step to merge them as slime does, or --rollout-id-scope group to keep them apart"
            )
            # said once, at the first sample; its siblings in the conflict point there
            see = f"explicit id {v} is used by samples of different prompt groups: see "
            for k, (i, loc) in enumerate(zip(members, locs)):
                first = locs[0] if loc.file != locs[0].file or locs[0].number is None else f"{locs[0].kind} {locs[0].number}"
                problems.append((i, Problem(loc if where else Location("?"), "rollout_id", msg if k == 0 else f"{see}{first}",
                                            "rollout_id.reused")))
    if conflicts and scope == "group":
        # later (group, id) keys of a reused value are remapped like missing ids
        remap = np.zeros(n, dtype=bool)
        for v, gs in conflicts.items():
            first = gs[0]
            for i in np.flatnonzero(is_explicit & (ids == v)).tolist():
                if group_index[i] != first:
                    remap[i] = True
        remap_positions = np.flatnonzero(remap)
        units: list[tuple] = []  # allocation order: missing samples and first sight of each remapped key
        unit_of: dict[tuple, int] = {}
        need = is_missing | remap
        order = np.flatnonzero(need).tolist()
        slot = np.zeros(n, dtype=np.int64)
        for i in order:
            if is_missing[i]:
                key = ("missing", i)
            else:
                key = ("key", group_index[i], int(ids[i]))
            if key not in unit_of:
                unit_of[key] = len(units)
                units.append(key)
            slot[i] = unit_of[key]
        fresh = _fresh_ids(explicit[is_explicit], len(units))
        ids[order] = fresh[slot[order]]
    else:
        m = int(is_missing.sum())
        if m:
            ids[is_missing] = _fresh_ids(explicit[is_explicit], m)
    assigned = is_explicit | is_missing
    result = IdResult(ids, assigned, problems)
    result.anomalies = find_id_anomalies(ids, assigned, is_explicit, is_missing, where, conflicts, scope, remap_positions)
    return result


def find_id_anomalies(ids, assigned, is_explicit, is_missing, where, conflicts, scope, remapped) -> list[dict]:
    """Non-adjacent siblings, mixed missing/explicit ids, and ids reused across prompt groups."""
    out: list[dict] = []
    loc = (lambda i: str(where(i))) if where else str
    if is_explicit.any() and is_missing.any():
        out.append(
            {
                "kind": "mixed_ids",
                "level": "info",
                "message": f"{int(is_explicit.sum())} samples carry explicit ids and {int(is_missing.sum())} have none; "
                "missing ids are filled with the smallest integers no explicit id uses",
            }
        )
    if conflicts and scope != "strict":
        for v, gs in conflicts.items():
            out.append(
                {
                    "kind": "id_reused_across_groups",
                    "level": "warning",
                    "rollout_id": v,
                    "groups": gs,
                    "message": f"explicit id {v} appears in prompt groups {gs}: "
                    + ("merged into one rollout (--rollout-id-scope step)" if scope == "step" else "split per group (--rollout-id-scope group)"),
                }
            )
    pos = np.flatnonzero(assigned)
    if len(pos):
        vals = ids[pos]
        order = np.argsort(vals, kind="stable")
        sv, sp = vals[order], pos[order]
        starts = np.flatnonzero(np.r_[True, sv[1:] != sv[:-1]])
        ends = np.r_[starts[1:], len(sv)]
        # a rollout is adjacent when its positions, among assigned records, are consecutive
        rank = np.empty(len(pos), dtype=np.int64)
        rank[np.argsort(pos)] = np.arange(len(pos))
        rk = rank[order]
        for s, e in zip(starts.tolist(), ends.tolist()):
            if e - s > 1 and rk[e - 1] - rk[s] + 1 != e - s:
                out.append(
                    {
                        "kind": "non_adjacent_siblings",
                        "level": "warning",
                        "rollout_id": int(sv[s]),
                        "where": [loc(int(i)) for i in sp[s:e][:6].tolist()],
                        "message": f"the {e - s} samples of rollout {int(sv[s])} are not adjacent in the input",
                    }
                )
    return out


# ------------------------------------------------------------------------------ named rules
# Each rollout-id rule by name: (id_state, explicit ids, group_index, sample.index per record,
# scope) -> one id per record (an int, or None where the rule leaves none). `convert` runs
# `fill` (assign_ids, with its scope checks); `audit` tries them all against a trainer's ids.


def _fill_rule(id_state, explicit, group_index, sample_index, scope) -> list:
    r = assign_ids(id_state, explicit, group_index, scope if scope != "strict" else "step")
    return [int(v) if a else None for v, a in zip(r.ids.tolist(), r.assigned.tolist())]


def _first_sample_rule(id_state, explicit, group_index, sample_index, scope) -> list:
    n = len(id_state)
    if n and id_state[0] == ID_MISSING:
        return list(range(n))
    return [int(explicit[i]) if id_state[i] == ID_EXPLICIT else None for i in range(n)]


def _sample_index_rule(id_state, explicit, group_index, sample_index, scope) -> list:
    return [int(explicit[i]) if id_state[i] == ID_EXPLICIT else sample_index[i] for i in range(len(id_state))]


ID_RULES = {
    "fill": _fill_rule,  # explicit ids kept, missing ones the smallest integers the explicit ids leave free
    "first_sample": _first_sample_rule,  # positions when the first sample has no id, else each own id (None too)
    "sample_index": _sample_index_rule,  # explicit id, else sample.index
}
ID_RULE_SOURCES = {
    "fill": "slime since 2bfa5693d (#2031), _convert_samples_to_train_data (slime/ray/rollout.py at 624b824a)",
    "first_sample": "slime 09c704501 (#1965)",
    "sample_index": "slime 7405851ff (#1933)",
}
EXPECTED_ID_RULE = "fill"  # what convert assigns


def apply_id_rule(name: str, id_state: np.ndarray, explicit: np.ndarray, group_index: list, sample_index: list,
                  scope: str = "step") -> list:
    """The ids of rule `name` (ID_RULES) for one step's records, in order. Under `fill`, a
    strict scope's conflicts are merged as slime merges them (the check is convert's, not the rule's)."""
    return ID_RULES[name](id_state, explicit, group_index, sample_index, scope)
