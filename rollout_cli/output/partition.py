"""The trainer's batches of one step, planned: which of the step's rows each data-parallel rank
gets, and how a rank's rows split into micro-batches. Pure functions on the planning columns
(no I/O); output/batches.py reads the columns and gathers the rows.

Ranks. At the output's own shard count, rank r takes shard r as converted. At any other world
size the step's rows, in step order (rollout_position), are repartitioned over the ranks by
tokens with `lpt` (longest processing time first: units heaviest first, ties in step order,
each to the rank with the fewest tokens so far, ties to the lowest rank, kept in a heap): whole
rollouts (or, for an output converted with --keep-groups, whole prompt groups:
pipeline/plan.group_units) are the units, so a rollout never spans two ranks. Not
pipeline/plan.py's Karmarkar-Karp that `convert` balances shards with (that one stays as it
is: the shards' bytes depend on it): its Python merges of k-way partial solutions cost tens of
milliseconds a step, LPT well under one, and over a step's hundreds of units it balances as
well (bench/loader.py's balance table: within max(1.05 x slime's partitioner, the largest
unit's bound) on every step). The same rows give the same ranks on every machine.

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

import heapq

from ..pipeline.plan import group_units
from ..pipeline.schedule import split_to

__all__ = ["StepColumns", "lpt", "rank_rows", "pack", "equalise", "runs", "plan_step"]


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


def lpt(weights: np.ndarray, k: int) -> list[np.ndarray]:
    """Unit indices per part (each ascending) of `weights` split into k parts by longest
    processing time first: heaviest unit first (ties: lower index first), each to the part
    with the least weight so far (ties: lower part). Parts are then ordered by their smallest
    member (empty ones last), so the result depends on the weights only."""
    w = np.asarray(weights, dtype=np.int64)
    order = np.lexsort((np.arange(len(w)), -w))
    part = np.empty(len(w), dtype=np.int64)
    heap = [(0, j) for j in range(k)]
    for i, n in zip(order.tolist(), w[order].tolist()):
        load, j = heap[0]
        part[i] = j
        heapq.heapreplace(heap, (load + n, j))
    members = [np.flatnonzero(part == j) for j in range(k)]
    return sorted(members, key=lambda m: (not len(m), int(m[0]) if len(m) else 0))


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
    if world_size == 1 or not len(ids):
        return [np.sort(order)] + [np.zeros(0, np.int64) for _ in range(world_size - 1)]
    # units numbered in order of first appearance (step order)
    _, first, inverse = np.unique(units, return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")
    number = np.empty_like(by_first)
    number[by_first] = np.arange(len(by_first))
    unit = number[inverse.reshape(-1)]
    weights = np.bincount(unit, weights=cols.tokens[order].astype(np.float64), minlength=len(by_first)).astype(np.int64)
    rank_of_unit = np.empty(len(by_first), dtype=np.int64)
    for r, members in enumerate(lpt(weights, world_size)):
        rank_of_unit[members] = r
    rank_of_row = np.empty(len(order), dtype=np.int64)
    rank_of_row[order] = rank_of_unit[unit]
    return [np.flatnonzero(rank_of_row == r) for r in range(world_size)]


def pack(lengths: np.ndarray, max_tokens: int) -> list[list[int]]:
    """First-fit decreasing: local indices per micro-batch, each ascending; micro-batches in
    the order they were opened (the first holds the longest sample). The same bins as
    pipeline/schedule.first_fit over the lengths sorted longest first (ties in row order)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.lexsort((np.arange(len(lengths)), -lengths))
    room: list[int] = []  # tokens left per micro-batch
    bins: list[list[int]] = []
    shortest = int(lengths.min()) if len(lengths) else 0
    live = 0  # micro-batches before this one have no room for the shortest sample: never scanned
    for i, n in zip(order.tolist(), lengths[order].tolist()):
        for j in range(live, len(room)):
            if room[j] >= n:
                bins[j].append(i)
                room[j] -= n
                if j == live:
                    while live < len(room) and room[live] < shortest:
                        live += 1
                break
        else:
            room.append(max_tokens - n)
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
