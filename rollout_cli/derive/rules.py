"""The rules that turn a converted step's rows into the next run's training rows (docs/derive.md):
which rollouts are candidates, which of them are selected, which pairs they make. Functions over
Arrow tables, usable without writing anything.

A rollout is every row sharing `(step, rollout_id)`; its prompt group is `(step, group_index)`.
The reward is `raw_reward` (what the environment gave, before normalisation)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core import hashing

# why a rollout is not a candidate, in the order the rules are checked (the first that applies counts)
NOT_COMPLETED = "a sample is not completed"
REMOVED = "a sample has remove_sample"
NO_TRAINED_TOKENS = "loss-mask sum is 0"
NO_REWARD = "no reward recorded"
NO_GROUP = "no group_index"
REWARDS_DIFFER = "rewards differ within a rollout"
SKIP_REASONS = (NOT_COMPLETED, REMOVED, NO_TRAINED_TOKENS, NO_REWARD, NO_GROUP, REWARDS_DIFFER)

# why a candidate rollout gives no row
NOT_BEST = "not the best of its group"
BELOW_MIN = "reward below --min-reward"
DUPLICATE = "duplicate response in its group (--dedupe)"
OVER_CAP = "over --max-rows-per-group"
SEVERAL_SAMPLES = "several samples (pairs take rollouts of one sample)"
NO_PAIR = "no pair in its group"
PROMPTS_DIFFER = "prompts differ within its group"

NEEDED = ("step", "rollout_id", "group_index", "rollout_position", "sample_index", "status", "remove_sample",
          "loss_mask", "rollout_mask_sum", "raw_reward", "tokens", "response_length")


@dataclass
class Counts:
    """What a selection kept and why it left the rest (rollouts; pairs for pair selections)."""

    rollouts: int = 0
    candidates: int = 0
    skipped: Counter = field(default_factory=Counter)  # rollouts that are no candidates, by reason
    not_selected: Counter = field(default_factory=Counter)  # candidates that give no row, by reason
    selected: int = 0  # candidate rollouts that give rows
    pairs: int = 0
    groups_skipped: Counter = field(default_factory=Counter)  # prompt groups that give no pair, by reason

    def add(self, other: "Counts") -> None:
        self.rollouts += other.rollouts
        self.candidates += other.candidates
        self.skipped.update(other.skipped)
        self.not_selected.update(other.not_selected)
        self.selected += other.selected
        self.pairs += other.pairs
        self.groups_skipped.update(other.groups_skipped)

    def to_dict(self) -> dict:
        return {"rollouts": self.rollouts, "candidates": self.candidates, "skipped": dict(sorted(self.skipped.items())),
                "selected": self.selected, "not_selected": dict(sorted(self.not_selected.items())),
                "pairs": self.pairs, "groups_skipped": dict(sorted(self.groups_skipped.items()))}


def rollouts(t: pa.Table) -> pa.Table:
    """One row per rollout of `t` (a step's rows): step, rollout_id, group_index, samples,
    first_position, reward and `reason` (null for a candidate, else the first rule it breaks:
    SKIP_REASONS), sorted by (step, first_position)."""
    # the output's rollout_mask_sum is the rollout's loss-mask total on each of its rows
    flat_sum = t["rollout_mask_sum"] if "rollout_mask_sum" in t.schema.names else _mask_sums(t["loss_mask"])
    work = pa.table({
        "step": t["step"], "rollout_id": t["rollout_id"],
        "group_index": t["group_index"], "rollout_position": t["rollout_position"],
        "not_completed": pc.cast(pc.not_equal(t["status"], "completed"), pa.int64()),
        "removed": pc.cast(t["remove_sample"], pa.int64()),
        "mask_sum": flat_sum,
        "no_reward": pc.cast(pc.is_null(t["raw_reward"]), pa.int64()),
        "no_group": pc.cast(pc.is_null(t["group_index"]), pa.int64()),
        "raw_reward": t["raw_reward"],
    })
    g = work.group_by(["step", "rollout_id"], use_threads=False).aggregate([
        ("rollout_position", "min"), ("rollout_position", "count"), ("group_index", "min"),
        ("not_completed", "sum"), ("removed", "sum"), ("mask_sum", "max"), ("no_reward", "sum"),
        ("no_group", "sum"), ("raw_reward", "min"), ("raw_reward", "max"),
    ])
    lo, hi = g["raw_reward_min"], g["raw_reward_max"]
    checks = [
        (NOT_COMPLETED, pc.greater(g["not_completed_sum"], 0)),
        (REMOVED, pc.greater(g["removed_sum"], 0)),
        (NO_TRAINED_TOKENS, pc.equal(g["mask_sum_max"], 0)),
        (NO_REWARD, pc.greater(g["no_reward_sum"], 0)),
        (NO_GROUP, pc.greater(g["no_group_sum"], 0)),
        (REWARDS_DIFFER, pc.not_equal(lo, hi)),
    ]
    reason = pa.nulls(g.num_rows, pa.string())
    for why, broken in reversed(checks):  # the first rule broken wins
        reason = pc.if_else(pc.fill_null(broken, False), pa.scalar(why), reason)
    r = pa.table({"step": g["step"], "rollout_id": g["rollout_id"], "group_index": g["group_index_min"],
                  "samples": g["rollout_position_count"], "first_position": g["rollout_position_min"],
                  "reward": lo, "reason": reason})
    return r.take(pc.sort_indices(r, [("step", "ascending"), ("first_position", "ascending")]))


def _mask_sums(mask: pa.ChunkedArray) -> pa.Array:
    """Each row's loss-mask total."""
    mask = mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask
    offsets = mask.offsets.to_numpy()
    values = np.asarray(pc.cast(mask.values, pa.int64()).to_numpy(zero_copy_only=False))
    cums = np.concatenate([[0], np.cumsum(values)])
    return pa.array(cums[offsets[1:]] - cums[offsets[:-1]], pa.int64())


def count_skips(r: pa.Table, counts: Counts) -> pa.Table:
    """The candidates of `r` (rollouts()), with every rollout counted in `counts`."""
    counts.rollouts += r.num_rows
    reasons = r["reason"].to_pylist()
    counts.skipped.update(x for x in reasons if x is not None)
    cand = r.filter(pc.is_null(r["reason"]))
    counts.candidates += cand.num_rows
    return cand


def ranked(cand: pa.Table) -> pa.Table:
    """Candidates in group order, best first: (step, group_index) ascending, reward descending,
    ties by the lowest first rollout_position; with `rank` (0 for each group's best)."""
    s = cand.take(pc.sort_indices(cand, [("step", "ascending"), ("group_index", "ascending"),
                                         ("reward", "descending"), ("first_position", "ascending")]))
    step, grp = s["step"].to_numpy(), s["group_index"].to_numpy()
    new = np.ones(len(step), bool)
    new[1:] = (step[1:] != step[:-1]) | (grp[1:] != grp[:-1])
    starts = np.flatnonzero(new)
    rank = np.arange(len(step)) - np.repeat(starts, np.diff(np.append(starts, len(step))))
    return s.append_column("rank", pa.array(rank, pa.int64()))


def response_keys(t: pa.Table, rollout_ids: pa.Array) -> list[bytes]:
    """A key per rollout in `rollout_ids` (of one step's rows `t`): its samples' response tokens,
    in position order, as bytes (equal keys: equal responses)."""
    sel = t.filter(pc.is_in(t["rollout_id"], rollout_ids)).sort_by([("rollout_position", "ascending")])
    by: dict[int, list[bytes]] = {}
    for rid, toks, rl in zip(sel["rollout_id"].to_pylist(), sel["tokens"].to_numpy(zero_copy_only=False),
                             sel["response_length"].to_pylist()):
        by.setdefault(rid, []).append(np.asarray(toks[len(toks) - rl:], np.int64).tobytes() + b"|")
    return [b"".join(by.get(rid, [])) for rid in rollout_ids.to_pylist()]


def dedupe(t: pa.Table, cand: pa.Table, counts: Counts) -> pa.Table:
    """`cand` (ranked) without the rollouts whose response repeats an earlier one of its group."""
    keys = response_keys(t, cand["rollout_id"].combine_chunks())
    seen, keep = set(), []
    for s, g, k in zip(cand["step"].to_pylist(), cand["group_index"].to_pylist(), keys):
        keep.append((s, g, k) not in seen)
        seen.add((s, g, k))
    counts.not_selected[DUPLICATE] += keep.count(False)
    return ranked(cand.filter(pa.array(keep)).drop_columns(["rank"]))


def select_rollouts(cand: pa.Table, counts: Counts, *, select: str = "best", min_reward: float | None = None,
                    max_per_group: int | None = None) -> pa.Table:
    """The selected rollouts among ranked candidates: `best` keeps each group's rank 0, `all`
    every candidate (at most `max_per_group` per group, best first); both only with reward >=
    `min_reward` when given. Counted in `counts`."""
    keep = pa.array(np.ones(cand.num_rows, bool))
    rank = cand["rank"]
    if select == "best":
        best = pc.equal(rank, 0)
        counts.not_selected[NOT_BEST] += cand.num_rows - pc.sum(best).as_py() if cand.num_rows else 0
        keep = best
    if min_reward is not None:
        ok = pc.greater_equal(cand["reward"], min_reward)
        counts.not_selected[BELOW_MIN] += pc.sum(pc.and_(keep, pc.invert(ok))).as_py() or 0
        keep = pc.and_(keep, ok)
    if select == "all" and max_per_group is not None:
        # the cap counts the kept rollouts of each group, best first
        kept = cand.filter(keep)
        r = ranked(kept.drop_columns(["rank"])) if kept.num_rows else kept
        within = pc.less(r["rank"], max_per_group)
        counts.not_selected[OVER_CAP] += r.num_rows - (pc.sum(within).as_py() or 0)
        out = r.filter(within)
    else:
        out = cand.filter(keep)
    counts.selected += out.num_rows
    counts.not_selected = Counter({k: v for k, v in counts.not_selected.items() if v})
    return out


def pairs(t: pa.Table, cand: pa.Table, counts: Counts, *, min_margin: float = 0.0, every: bool = False) -> list[tuple]:
    """Preference pairs of ranked candidates: per prompt group, among rollouts of one sample,
    (chosen, rejected) = (highest, lowest reward) when chosen - rejected > `min_margin`, and both
    share the prompt tokens; `every`: each (higher, lower) pair of the group with that margin.
    Returns (step, group_index, chosen_rollout_id, rejected_rollout_id) in group order."""
    one = cand.filter(pc.equal(cand["samples"], 1))
    counts.not_selected[SEVERAL_SAMPLES] += cand.num_rows - one.num_rows
    prompts = _prompt_keys(t, one["rollout_id"].combine_chunks())
    out: list[tuple] = []
    groups: dict[tuple, list] = {}
    for s, g, rid, rw, p in zip(one["step"].to_pylist(), one["group_index"].to_pylist(),
                                one["rollout_id"].to_pylist(), one["reward"].to_pylist(), prompts):
        groups.setdefault((s, g), []).append((rid, rw, p))  # best first (ranked order)
    for (s, g), members in groups.items():
        found, differ = [], False
        if every:
            for i, (a, ra, pa_) in enumerate(members):
                for b, rb, pb in members[i + 1:]:
                    if ra - rb > min_margin:
                        if pa_ == pb:
                            found.append((s, g, a, b))
                        else:
                            differ = True
        else:
            (a, ra, pa_), worst = members[0], min(members, key=lambda m: m[1])  # min keeps the lowest position
            if ra - worst[1] > min_margin:
                if pa_ == worst[2]:
                    found.append((s, g, a, worst[0]))
                else:
                    differ = True
        if not found:
            counts.groups_skipped[PROMPTS_DIFFER if differ else NO_PAIR] += 1
        out.extend(found)
    paired = {x for p in out for x in p[2:]}
    counts.pairs += len(out)
    counts.selected += len(paired)
    counts.not_selected[NO_PAIR] += one.num_rows - len(paired)
    counts.not_selected = Counter({k: v for k, v in counts.not_selected.items() if v})
    return out


def _prompt_keys(t: pa.Table, rollout_ids: pa.Array) -> list[bytes]:
    """Each rollout's prompt tokens (its sample's tokens before the response), as bytes."""
    sel = t.filter(pc.is_in(t["rollout_id"], rollout_ids))
    by = {rid: np.asarray(toks[: len(toks) - rl], np.int64).tobytes()
          for rid, toks, rl in zip(sel["rollout_id"].to_pylist(), sel["tokens"].to_numpy(zero_copy_only=False),
                                   sel["response_length"].to_pylist())}
    return [by[rid] for rid in rollout_ids.to_pylist()]


def in_test(step: int, group_index: int, fraction: float) -> bool:
    """Whether a prompt group goes to the test split: a stable hash of (step, group_index)
    (BLAKE3 of their decimal text) read as a number in [0, 1), below `fraction`."""
    if fraction <= 0:
        return False
    h = hashing.bytes_digest(f"{step}:{group_index}".encode())
    return int(h[:16], 16) / 2.0 ** 64 < fraction
