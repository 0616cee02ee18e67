"""The trainer's batches of one step, planned: which of the step's rows each data-parallel rank
gets, and how a rank's rows split into micro-batches. Pure functions on the planning columns
(no I/O); output/batches.py reads the columns and gathers the rows.

Ranks. At the output's own shard count, rank r takes shard r as converted. At any other world
size the step's rows, in step order (rollout_position), are repartitioned over the ranks by
tokens with pipeline/plan.py's `plan_shards`, the Karmarkar-Karp largest differencing that
`convert` balances shards with: whole rollouts (or, for an output converted with
--keep-groups, whole prompt groups: pipeline/plan.group_units) are the units, so a rollout
never spans two ranks. The same rows give the same ranks on every machine.

Micro-batches. Without a token budget a rank's rows are one micro-batch, except that an
output converted with `--schedule slime` is served at its own shard count exactly as converted
(the runs of its optimizer_step / micro_batch columns). With `max_tokens` a rank's samples are
packed first-fit decreasing (longest first, ties in row order; each into the first
micro-batch it fits, else a new one), so each micro-batch holds at most `max_tokens` tokens
and a longer sample sits alone. The counts are then equalised across the ranks of the step,
as gradient accumulation under data parallelism needs: a rank with fewer micro-batches splits
its heaviest multi-sample micro-batch in two (pipeline/schedule.py's `split_to`, longest
sample first into the lighter half) until it has as many; only a rank with fewer samples than
the count gets empty micro-batches (zero samples, zero tokens: a loss summed over one is 0).
A sample's rollout may be spread over micro-batches: its denominators (rollout_mask_sum,
group_mask_sum, the step's) are columns of its row, whole wherever it lands.

Rows are named by their index in the step's rows taken shard after shard (shard 0's rows,
then shard 1's, ...); a micro-batch's rows are ascending, so they come shard by shard, each
shard's in its order (which is step order).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..pipeline.plan import group_units, plan_shards
from ..pipeline.schedule import split_to

__all__ = ["StepColumns", "rank_rows", "pack", "equalise", "runs", "plan_step"]


@dataclass(frozen=True)
class StepColumns:
    """The planning columns of one step's rows, shard after shard (numpy arrays [rows])."""

    shard: np.ndarray  # int64: the shard each row is in
    position: np.ndarray  # int64: rollout_position, the row's place in the step
    rollout_id: np.ndarray  # int64
    group_index: np.ndarray  # int64, -1 where null
    tokens: np.ndarray  # int64: total_length
    optimizer_step: np.ndarray | None = None  # --schedule slime columns, None where not set
    micro_batch: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.shard)


def rank_rows(cols: StepColumns, world_size: int, num_shards: int, keep_groups: bool = False) -> list[np.ndarray]:
    """Each rank's rows (ascending indices into the step's rows). At `num_shards` ranks, shard r's
    rows; else whole rollouts (keep_groups: whole prompt groups) balanced by tokens."""
    if world_size == num_shards:
        return [np.flatnonzero(cols.shard == r) for r in range(world_size)]
    order = np.argsort(cols.position, kind="stable")
    ids = cols.rollout_id[order]
    if keep_groups:
        gi = cols.group_index[order]
        units = group_units([None if g < 0 else int(g) for g in gi.tolist()], ids)
    else:
        units = ids
    plan = plan_shards(units, cols.tokens[order], world_size)
    return [np.sort(order[rows]) for rows in plan.rows]


def pack(lengths: np.ndarray, max_tokens: int) -> list[list[int]]:
    """First-fit decreasing: local indices per micro-batch, each ascending; micro-batches in
    the order they were opened (the first holds the longest sample). The same bins as
    pipeline/schedule.first_fit over the lengths sorted longest first (ties in row order);
    the first micro-batch with room is found in numpy, not by a Python scan of the bins."""
    order = np.lexsort((np.arange(len(lengths)), -np.asarray(lengths, dtype=np.int64)))
    room = np.empty(len(lengths), dtype=np.int64)  # tokens left per micro-batch (at most one per sample)
    bins: list[list[int]] = []
    for i in order.tolist():
        n = int(lengths[i])
        if bins:
            fits = room[:len(bins)] >= n
            j = int(fits.argmax())
            if fits[j]:
                bins[j].append(i)
                room[j] -= n
                continue
        room[len(bins)] = max_tokens - n
        bins.append([i])
    return [sorted(b) for b in bins]


def equalise(bins: list[list[int]], count: int, lengths: np.ndarray) -> list[list[int]]:
    """`count` micro-batches from `bins` (at most `count`): the heaviest multi-sample one split
    first; empty ones at the end only when there are fewer samples than `count`."""
    out = split_to(bins, count, [int(x) for x in lengths]) if len(bins) < count else [list(b) for b in bins]
    out = [sorted(b) for b in out]
    return out + [[] for _ in range(count - len(out))]


def runs(optimizer_step: np.ndarray, micro_batch: np.ndarray) -> list[list[int]]:
    """The micro-batches of a --schedule slime shard: runs of equal (optimizer_step, micro_batch)."""
    n = len(optimizer_step)
    if not n:
        return []
    key = optimizer_step.astype(np.int64) * (1 << 32) + micro_batch.astype(np.int64)
    cuts = [0, *(np.flatnonzero(key[1:] != key[:-1]) + 1).tolist(), n]
    return [list(range(a, b)) for a, b in zip(cuts[:-1], cuts[1:])]


def plan_step(cols: StepColumns, world_size: int, num_shards: int, max_tokens: int | None = None,
              keep_groups: bool = False) -> list[list[np.ndarray]]:
    """[rank][micro-batch] -> ascending row indices into the step's rows; every rank has the
    same number of micro-batches (at least one)."""
    per_rank = rank_rows(cols, world_size, num_shards, keep_groups)
    mbs: list[list[list[int]]] = []
    for rows in per_rank:
        if max_tokens is not None:
            mbs.append(pack(cols.tokens[rows], max_tokens))
        elif world_size == num_shards and cols.micro_batch is not None:
            mbs.append(runs(cols.optimizer_step[rows], cols.micro_batch[rows]))
        else:
            mbs.append([list(range(len(rows)))])
    count = max(1, *(len(b) for b in mbs))
    return [[rows[np.asarray(b, dtype=np.int64)] for b in equalise(bins, count, cols.tokens[rows])]
            for rows, bins in zip(per_rank, mbs)]
