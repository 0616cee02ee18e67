"""Stages 3-4 for one step on small per-sample data: rollout ids, the reject rule, rewards,
rollout mask sums and the loss denominators. Shared by `convert` (which then writes the rows) and `inspect` (which only
shows them), so both always agree."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..core.errors import InvalidInputError, Location, Problem, StepProblems
from .fields import group_fields, rollout_mask_sums, step_fields
from .ids import assign_ids
from .rewards import (SiblingRewardConflict, apply_reward_rule, expected_reward_rule, group_keys, group_labels,
                      slime_compat_note)
from .staleness import stale_problem, stale_rollouts


# the rule id of a valid sample rejected with its rollout (a sibling of an invalid one)
SIBLING_RULE = "rollout.sibling"


@dataclass
class StepFields:
    ids: np.ndarray  # per record (meaningful where assigned)
    assigned: np.ndarray  # per record
    rejected: np.ndarray  # per record: invalid, or a sibling of an invalid record
    rejects: list[dict]  # one per rejected record: where, field, reason, rule
    keep: np.ndarray  # per valid row (aligned with row_pos): survives
    rewards: np.ndarray  # per kept row, float32 (NaN where groups are unknown)
    mask_sums: np.ndarray  # per kept row, int64
    anomalies: list[dict] = field(default_factory=list)
    problems: list[tuple[int, Problem]] = field(default_factory=list)  # own problems, by record position
    reasons: dict[int, Problem] = field(default_factory=dict)  # first problem per rejected record
    group_keys: list = field(default_factory=list)  # per kept row: its prompt-group key
    groups_known: bool = True  # False: some rows lack group_index and no n was given
    group_mask_sums: np.ndarray | None = None  # per kept row, int64: loss-mask total of its prompt group
    group_rollouts: np.ndarray | None = None  # per kept row, int64: distinct rollouts in its prompt group
    step_totals: dict = field(default_factory=dict)  # fields.STEP_FIELDS -> int, over the kept rows
    group_labels: np.ndarray | None = None  # per kept row: its prompt group for the denominators
    notes: list[str] = field(default_factory=list)  # what the step's rule did that is worth saying


def compute_step(
    *,
    id_state: np.ndarray,
    explicit: np.ndarray,
    group_index: list,
    problems: list[tuple[int, Problem]],
    where: Callable[[int], Location],
    row_pos: np.ndarray,
    reward_values: np.ndarray,
    mask_totals: np.ndarray,
    split: str,
    step: int,
    opts,
    fail: bool,
    unknown_groups_ok: bool = False,
    chunk: int | None = None,
    oldest: list | None = None,
) -> StepFields:
    """Ids over all parsed records; rejects (a rejected sample rejects its whole rollout); then
    rewards and mask sums over the surviving rows. `row_pos` gives each valid row's record
    position; `opts` is a ConvertOptions (or anything with the same reward and id fields).
    Rows without group_index fall in consecutive chunks of `chunk` rows (default
    --n-samples-per-prompt) and need one of the two; with `unknown_groups_ok` they are
    kept as one-sample groups and their rewards come back as NaN instead of an error (and so do a
    step's rewards whose rollouts' siblings disagree under --reward-baseline rollout: an anomaly).
    `oldest`: per valid row, its oldest comparable weight version (staleness.oldest_versions),
    for the staleness rule under `opts.max_staleness`: a stale rollout is rejected whole, also
    with `fail` (a rejection by rule, not invalid input)."""
    n = len(id_state)
    idr = assign_ids(id_state, explicit, group_index, opts.rollout_id_scope, where)
    problems = sorted(list(problems) + idr.problems, key=lambda t: t[0])
    if problems and fail:
        raise StepProblems([p for _, p in problems])
    rejected = np.zeros(n, dtype=bool)
    reason: dict[int, Problem] = {}
    for i, p in problems:
        reason.setdefault(i, p)
        rejected[i] = True
    bad_ids = np.unique(idr.ids[rejected & idr.assigned])
    if len(bad_ids):
        rejected |= idr.assigned & np.isin(idr.ids, bad_ids)
    max_staleness = getattr(opts, "max_staleness", None)
    if max_staleness is not None and oldest is not None and len(row_pos):
        live = np.flatnonzero(~rejected[row_pos] & idr.assigned[row_pos])
        worst = stale_rollouts([oldest[k] for k in live.tolist()], idr.ids[row_pos[live]], max_staleness, step)
        for k in live.tolist():
            p = int(row_pos[k])
            rid = int(idr.ids[p])
            if rid in worst:
                rejected[p] = True
                reason[p] = stale_problem(where(p), rid, *worst[rid], step, max_staleness)
    rejects: list[dict] = []
    if rejected.any():
        first_by_id: dict[int, int] = {}
        for i, _ in problems:
            if idr.assigned[i]:
                first_by_id.setdefault(int(idr.ids[i]), i)
        for i in np.flatnonzero(rejected).tolist():
            rec = where(i).to_dict()
            rec["split"], rec["step"] = split, step
            if i in reason:
                rec["field"], rec["reason"], rec["rule"] = reason[i].field, reason[i].message, reason[i].rule
            else:
                j = first_by_id[int(idr.ids[i])]
                rec["field"] = None
                rec["reason"] = f"sibling of rejected sample {where(j)} (rollout {int(idr.ids[i])}): {reason[j].field}: {reason[j].message}"
                rec["rule"] = SIBLING_RULE
            if idr.assigned[i]:
                rec["rollout_id"] = int(idr.ids[i])
            rejects.append(rec)
    keep = ~rejected[row_pos] if len(row_pos) else np.zeros(0, dtype=bool)
    pos = row_pos[keep]
    ids = idr.ids[pos]
    values = reward_values[keep]
    gi = [group_index[p] for p in pos.tolist()]
    groups_known = True
    notes: list[str] = []
    compat = getattr(opts, "slime_compat", False)
    chunk = chunk or opts.n_samples_per_prompt
    try:
        keys = group_keys(gi, chunk) if split != "eval" and not compat else None
    except ValueError:
        if not unknown_groups_ok:
            k = next(i for i, g in enumerate(gi) if g is None)
            raise InvalidInputError(
                f"{where(int(pos[k]))}: group_index: missing, so prompt groups are unknown; "
                "pass --n-samples-per-prompt N to group consecutive samples"
            ) from None
        keys, groups_known = None, False
    if keys is None:
        keys = [g if g is not None else ("sample", k) for k, g in enumerate(gi)]
    if split == "eval":
        rewards = values.astype(np.float32)
    elif not groups_known:
        rewards = np.full(len(values), np.nan, dtype=np.float32)
    else:
        rule = expected_reward_rule(opts)
        if compat:
            note = slime_compat_note(len(values), advantage_estimator=opts.advantage_estimator,
                                     rewards_normalization=opts.rewards_normalization,
                                     n_samples_per_prompt=opts.n_samples_per_prompt,
                                     rollout_batch_size=opts.rollout_batch_size or 0)
            if note:
                notes.append(f"step {step}: {note}")
        try:
            rewards = apply_reward_rule(rule, values, keys, ids, opts)
        except SiblingRewardConflict as e:
            locs = ", ".join(str(where(int(pos[r]))) for r in e.rows)
            if unknown_groups_ok:  # inspect: shown as an anomaly, the rewards as unknown
                rewards = np.full(len(values), np.nan, dtype=np.float32)
                idr.anomalies.append({
                    "kind": "sibling_reward_mismatch", "level": "error", "rollout_id": e.rollout_id,
                    "rewards": e.values, "where": [where(int(pos[r])) for r in e.rows[:6]],
                    "message": f"rollout {e.rollout_id}: its samples carry different rewards "
                               f"{', '.join(repr(v) for v in e.values)}: convert fails under --reward-baseline "
                               "rollout (--sibling-reward mean averages them)",
                })
            else:
                raise InvalidInputError(
                    f"{split} step {step}: rollout {e.rollout_id}: its samples carry different rewards "
                    f"{', '.join(repr(v) for v in e.values)} ({locs}); --reward-baseline rollout needs one reward per "
                    "rollout (--sibling-reward mean averages them)"
                ) from None
    kept_masks = mask_totals[keep]
    sums = rollout_mask_sums(ids, kept_masks)
    denom_keys = keys
    if compat or split == "eval":  # the prompt groups, even where rewards are not grouped by them
        try:
            denom_keys = group_keys(gi, chunk)
        except ValueError:
            pass
    labels = group_labels(denom_keys)
    g_sums, g_rollouts = group_fields(labels, ids, kept_masks)
    anomalies = [dict(a, step=step, split=split) for a in idr.anomalies]
    return StepFields(idr.ids, idr.assigned, rejected, rejects, keep, rewards, sums, anomalies, problems, reason, keys,
                      groups_known, g_sums, g_rollouts, step_fields(ids, kept_masks, labels), labels, notes)
