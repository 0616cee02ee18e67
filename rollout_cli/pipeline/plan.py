"""Stage 5: split a step's rows into N shards balanced by tokens, never splitting a rollout
(or, with keep_groups, a prompt group). Karmarkar-Karp largest differencing, as slime's
seqlen balancing does; each shard keeps input order."""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np


@dataclass
class ShardPlan:
    rows: list[np.ndarray]  # row positions per shard, ascending
    tokens: list[int]

    @property
    def imbalance(self) -> float:
        """max / mean tokens per shard (1.0 is perfect; 0 tokens gives 1.0)."""
        total = sum(self.tokens)
        if not total:
            return 1.0
        return max(self.tokens) / (total / len(self.tokens))


def karmarkar_karp(weights: list[int], k: int) -> list[list[int]]:
    """Partition item indices into k sets with near-equal weight sums (deterministic)."""
    if k == 1:
        return [list(range(len(weights)))]
    heap: list = []
    for i, w in enumerate(weights):
        parts = [(w, [i])] + [(0, []) for _ in range(k - 1)]
        heapq.heappush(heap, (-w, i, parts))
    counter = len(weights)
    while len(heap) > 1:
        _, _, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        # pair the heaviest of one with the lightest of the other
        a = sorted(a, key=lambda p: -p[0])
        b = sorted(b, key=lambda p: p[0])
        merged = sorted(((pa[0] + pb[0], pa[1] + pb[1]) for pa, pb in zip(a, b)), key=lambda p: -p[0])
        heapq.heappush(heap, (-(merged[0][0] - merged[-1][0]), counter, merged))
        counter += 1
    if not heap:
        return [[] for _ in range(k)]
    parts = heap[0][2]
    # deterministic shard order: by smallest member index
    return sorted((sorted(p[1]) for p in parts), key=lambda m: (not m, m[0] if m else 0))


def group_units(group_index: list, ids: np.ndarray) -> np.ndarray:
    """Labels of the units that keep both prompt groups and rollouts whole (union-find):
    `group_index` per row (None where null), `ids` its rollout ids."""
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for g, r in zip(group_index, ids.tolist()):
        a, b = find(("r", r)), find(("g", g) if g is not None else ("r", r))
        if a != b:
            parent[max(a, b)] = min(a, b)
    labels: dict = {}
    return np.fromiter((labels.setdefault(find(("r", r)), len(labels)) for r in ids.tolist()), dtype=np.int64, count=len(ids))


def plan_shards(unit_of_row: np.ndarray, tokens_per_row: np.ndarray, num_shards: int) -> ShardPlan:
    """Assign whole units (rollouts or groups) to shards; `unit_of_row` labels each row."""
    if num_shards == 1 or not len(unit_of_row):
        rows = [np.arange(len(unit_of_row), dtype=np.int64)] + [np.zeros(0, dtype=np.int64)] * (num_shards - 1)
        return ShardPlan(rows, [int(tokens_per_row.sum())] + [0] * (num_shards - 1))
    # units in order of first appearance
    _, first, inverse = np.unique(unit_of_row, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    unit = rank[inverse]
    weights = np.bincount(unit, weights=tokens_per_row.astype(np.float64), minlength=len(order)).astype(np.int64)
    parts = karmarkar_karp(weights.tolist(), num_shards)
    shard_of_unit = np.empty(len(order), dtype=np.int64)
    for s, members in enumerate(parts):
        shard_of_unit[members] = s
    shard_of_row = shard_of_unit[unit]
    rows = [np.flatnonzero(shard_of_row == s) for s in range(num_shards)]
    toks = [int(tokens_per_row[r].sum()) for r in rows]
    return ShardPlan(rows, toks)
