"""The denominators a step's rows carry, once all its shards are read: rollout_mask_sum per
rollout, group_mask_sum and group_rollouts per prompt group, the step_* fields per step (and a
rollout's shared reward under the rollout baseline)."""
from __future__ import annotations

from ..core.layout import MANIFEST
from .common import EXAMPLES, Report
from .rows import StepState


def check_rollouts(label: str, paths: list[str], st: StepState, rep: Report) -> None:
    """Siblings (same step, rollout_id) share rollout_mask_sum, which is their loss_mask total."""
    shared, total = [], []
    for rid, (shard, mt, lo, hi) in st.rollouts.items():
        if lo != hi:
            shared.append((shard, f"{label}: rollout {rid}: siblings carry rollout_mask_sum {lo} and {hi}"))
        elif lo != mt and st.complete:
            total.append((shard, f"{label}: rollout {rid}: rollout_mask_sum {lo}, its samples' loss_mask totals add up to {mt}"))
    for inv, found in (("rollout_mask_sum_shared", shared), ("rollout_mask_sum_total", total)):
        for shard, detail in found[:EXAMPLES]:
            rep.fail(paths[shard], inv, detail)
        if len(found) > EXAMPLES:
            rep.fail(paths[found[EXAMPLES][0]], inv, f"{label}: ... {len(found) - EXAMPLES} more rollouts")



def check_groups(label: str, s: dict, paths: list[str], st: StepState, rep: Report) -> None:
    """The step's group and step denominators, once all its shards are read."""
    found: dict[str, list] = {"group_fields_shared": [], "group_fields_total": [], "rollout_reward_shared": [], "step_fields": []}
    for g, (shard, mt, members, lo_s, hi_s, lo_r, hi_r) in st.groups.items():
        if lo_s != hi_s or lo_r != hi_r:
            found["group_fields_shared"].append((shard, f"{label}: group_index {g}: rows carry group_mask_sum {lo_s}..{hi_s}, group_rollouts {lo_r}..{hi_r}"))
        elif st.complete and not st.row_problems and (lo_s != mt or lo_r != len(members)):
            found["group_fields_total"].append((shard, f"{label}: group_index {g}: group_mask_sum {lo_s}, group_rollouts {lo_r}; "
                                                       f"its rows hold loss_mask total {mt} and {len(members)} rollouts"))
    for (g, r), (shard, lo, hi) in st.unit_rewards.items():
        if lo != hi:
            found["rollout_reward_shared"].append((shard, f"{label}: group_index {g}: rollout {r}: its samples carry rewards {lo} and {hi}"))
    for shard, name, lo, hi in st.step_values:
        if lo != s[name] or hi != s[name]:
            found["step_fields"].append((shard, f"{label}: {name} {lo}..{hi} in its rows, the manifest records {s[name]}"))
    # totals are compared only over clean rows (a broken loss_mask is reported as such, once)
    if st.complete and not st.row_problems and not found["step_fields"]:
        actuals = [("step_mask_sum", st.mask_total), ("step_samples", st.rows), ("step_rollouts", len(st.rollouts))]
        if st.rows and st.grouped_rows == st.rows:  # every row names its group_index
            actuals.append(("step_groups", len(st.groups)))
        for name, actual in actuals:
            if s[name] != actual:
                found["step_fields"].append((0, f"{label}: {name} {s[name]}, its shards hold {actual}"))
    for inv, items in found.items():
        items = list(dict.fromkeys(items))  # a shard's row groups repeat the same finding
        for shard, detail in items[:EXAMPLES]:
            rep.fail(paths[shard] if paths else MANIFEST, inv, detail)
        if len(items) > EXAMPLES:
            rep.fail(paths[items[EXAMPLES][0]] if paths else MANIFEST, inv, f"{label}: ... {len(items) - EXAMPLES} more")
