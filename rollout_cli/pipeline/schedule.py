"""slime's optimizer-step schedule for one rollout step (slime-spec section 6): which samples
each data-parallel rank trains on, in which micro-batch of which optimizer step.

1. Group the step's samples by rollout id, rollouts in first-occurrence order; optimizer step s
   takes rollouts [s*gbs, (s+1)*gbs). The trailing #rollouts % gbs rollouts are dropped (slime
   drops them silently; here they are returned, or kept as a final short step).
2. Pack each optimizer step's samples into micro-batches: first fit under
   max_tokens_per_gpu * cp_size (dynamic), or consecutive chunks of micro_batch_size (static).
3. Align the count to a multiple of dp * (microbatch group if vpp > 1): dynamic splits the
   largest multi-sample micro-batch in two, longest sample first; static must already divide.
4. Hand the micro-batches to ranks: strided (rank r gets r, r+dp, ...), or Karmarkar-Karp with
   equal counts under balance_data.

Pure functions on plain lists: no I/O, no Arrow. Positions are indices into the step's rows.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

from ..core.errors import InvalidInputError
from ..core.options import ConvertOptions


class ScheduleError(InvalidInputError):
    """slime's trainer would stop on this step (one of `_split_train_data_by_dp`'s assertions)."""


_D = ConvertOptions()  # the defaults, owned by core/options.py


@dataclass(frozen=True)
class ScheduleConfig:
    """slime's settings that decide the schedule (its argument names)."""

    global_batch_size: int
    dp_size: int = _D.shards
    micro_batch_size: int = _D.micro_batch_size
    use_dynamic_batch_size: bool = _D.use_dynamic_batch_size
    max_tokens_per_gpu: int | None = _D.max_tokens_per_gpu
    balance_data: bool = _D.balance_data
    cp_size: int = _D.cp_size
    vpp_size: int = _D.vpp_size
    microbatch_group_size_per_vp_stage: int | None = _D.microbatch_group_size_per_vp_stage
    keep_trailing: bool = _D.keep_trailing

    @property
    def align(self) -> int:
        """Each optimizer step's micro-batch count is a multiple of this."""
        group = self.microbatch_group_size_per_vp_stage or 1
        return self.dp_size * (group if self.vpp_size > 1 else 1)

    @property
    def token_cap(self) -> int | None:
        """Tokens per micro-batch under dynamic batching (max_tokens_per_gpu x cp_size)."""
        if not self.use_dynamic_batch_size:
            return None
        return (self.max_tokens_per_gpu or 0) * self.cp_size


@dataclass
class Schedule:
    """One rollout step's schedule, per rank (r) and per optimizer step (s)."""

    partitions: list[list[int]]  # [r]: positions in micro-batch order, step after step
    micro_batch_indices: list[list[list[int]]]  # [r]: index lists into partitions[r], one per mb
    num_microbatches: list[int]  # [s]: micro-batches per rank (equal on every rank)
    global_batch_sizes: list[int]  # [s]: rollouts in the optimizer step
    optimizer_step: list[list[int]]  # [r]: per partition entry, its optimizer step
    micro_batch: list[list[int]]  # [r]: per partition entry, its mb index within the rank's step
    dropped: list[dict] = field(default_factory=list)  # trailing rollouts: {"rollout_id", "positions"}
    trailing_kept: bool = False  # the last optimizer step is the short trailing one


def group_rollouts(rollout_ids: Sequence[Hashable]) -> dict:
    """rollout id -> its sample positions, rollouts in first-occurrence order."""
    groups: dict = {}
    for pos, rid in enumerate(rollout_ids):
        groups.setdefault(rid, []).append(pos)
    return groups


def first_fit(lengths: Sequence[int], cap: int) -> list[list[int]]:
    """First-fit packing in sample order: each sample goes to the first micro-batch it fits in
    (sum <= cap), else opens a new one; a sample over the cap sits alone."""
    bins: list[list[int]] = []
    sums: list[int] = []
    for i, n in enumerate(lengths):
        for b, s in enumerate(sums):
            if s + n <= cap:
                bins[b].append(i)
                sums[b] += n
                break
        else:
            bins.append([i])
            sums.append(n)
    return bins


def static_chunks(count: int, size: int) -> list[list[int]]:
    """Consecutive chunks of `size` (the last may be shorter)."""
    return [list(range(a, min(a + size, count))) for a in range(0, count, size)]


def halve(members: list[int], lengths: Sequence[int]) -> tuple[list[int], list[int]]:
    """Split a micro-batch in two by tokens: longest first (a stable sort: ties keep their
    order), each to the lighter half (ties to the first)."""
    halves: tuple[list[int], list[int]] = ([], [])
    sums = [0, 0]
    for i in sorted(members, key=lambda i: -lengths[i]):
        h = 0 if sums[0] <= sums[1] else 1
        halves[h].append(i)
        sums[h] += lengths[i]
    return halves


def split_to(bins: list[list[int]], target: int, lengths: Sequence[int]) -> list[list[int]]:
    """Split the heaviest multi-sample micro-batch (ties: the later one) until there are
    `target`; the second half goes last. Stops early when every micro-batch holds one sample."""
    bins = [list(b) for b in bins]
    while len(bins) < target:
        best = None
        for k, b in enumerate(bins):
            if len(b) > 1:
                key = (sum(lengths[i] for i in b), k)
                if best is None or key > best:
                    best = key
        if best is None:
            break
        k = best[1]
        first, second = halve(bins[k], lengths)
        bins[k] = first
        bins.append(second)
    return bins


class _Set:
    """One side of a partial Karmarkar-Karp solution: its weight sum and (index, weight) items."""

    __slots__ = ("total", "items")

    def __init__(self, items: list[tuple[int, int]]):
        self.items = items
        self.total = sum(w for _, w in items)

    def key(self):
        return (self.total, len(self.items), self.items)


class _State:
    """k sets, kept heaviest first; compared so the widest spread pops first."""

    __slots__ = ("sets",)

    def __init__(self, sets: list[_Set]):
        self.sets = sorted(sets, key=_Set.key, reverse=True)

    def spread(self):
        return self.sets[0].total - self.sets[-1].total

    def __lt__(self, other: "_State") -> bool:
        if self.spread() != other.spread():
            return self.spread() > other.spread()
        return self.sets[0].key() > other.sets[0].key()

    def absorb(self, other: "_State") -> None:
        k = len(self.sets)
        self.sets = sorted((_Set(self.sets[i].items + other.sets[k - 1 - i].items) for i in range(k)),
                           key=_Set.key, reverse=True)


def balanced_equal_parts(weights: Sequence[int], k: int) -> list[list[int]]:
    """Karmarkar-Karp largest differencing into k parts of equal count (len(weights) % k == 0):
    heaviest part first, members ascending. The tie rules are slime's (seqlen_balancing), so
    the same weights give the same ranks."""
    if len(weights) % k:
        raise ValueError(f"{len(weights)} items do not split into {k} equal parts")
    ranked = sorted((w, i) for i, w in enumerate(weights))
    heap = []
    for a in range(0, len(ranked), k):
        heapq.heappush(heap, _State([_Set([(i, w)]) for w, i in ranked[a:a + k]]))
    while len(heap) > 1:
        a = heapq.heappop(heap)
        b = heapq.heappop(heap)
        a.absorb(b)
        heapq.heappush(heap, a)
    return [sorted(i for i, _ in s.items) for s in heap[0].sets]


def pack(lengths: Sequence[int], cfg: ScheduleConfig) -> list[list[int]]:
    """One optimizer step's micro-batches (local indices), before alignment."""
    if cfg.use_dynamic_batch_size:
        return first_fit(lengths, cfg.token_cap)
    return static_chunks(len(lengths), cfg.micro_batch_size)


def build_schedule(
    rollout_ids: Sequence[Hashable],
    total_lengths: Sequence[int],
    cfg: ScheduleConfig,
    *,
    where: str = "step",
    workload: Callable[[int], float] | None = None,
) -> Schedule:
    """The schedule of one rollout step. `rollout_ids` and `total_lengths` are per row (the
    step's rows in order); `where` names the step in errors; `workload` weighs a sample for
    balance_data (slime estimates forward FLOPs from the model's shape; default: its tokens).
    Raises ScheduleError where slime's trainer asserts."""
    dp = cfg.dp_size
    groups = group_rollouts(rollout_ids)
    order = list(groups)
    gbs = cfg.global_batch_size
    full = len(order) // gbs
    if full < 1 and not (cfg.keep_trailing and order):
        raise ScheduleError(f"{where}: {len(order)} rollouts, fewer than the global batch size {gbs}; "
                            "slime needs at least one full optimizer step")
    bounds = [(s * gbs, (s + 1) * gbs) for s in range(full)]
    trailing = order[full * gbs:]
    if trailing and cfg.keep_trailing:
        bounds.append((full * gbs, len(order)))
    weigh = workload or (lambda n: n)
    sched = Schedule([[] for _ in range(dp)], [[] for _ in range(dp)], [], [],
                     [[] for _ in range(dp)], [[] for _ in range(dp)])
    for s, (a, b) in enumerate(bounds):
        positions = [p for rid in order[a:b] for p in groups[rid]]
        label = f"{where}, optimizer step {s}"
        if len(positions) < dp:
            raise ScheduleError(f"{label}: {len(positions)} samples, fewer than the {dp} data-parallel ranks")
        lengths = [total_lengths[p] for p in positions]
        mbs = pack(lengths, cfg)
        target = max(-(-len(mbs) // cfg.align) * cfg.align, cfg.align)
        if len(mbs) != target:
            if not cfg.use_dynamic_batch_size:
                raise ScheduleError(
                    f"{label}: {len(positions)} samples in {len(mbs)} micro-batches of --micro-batch-size "
                    f"{cfg.micro_batch_size}, not a multiple of {cfg.align} (dp {dp}"
                    + (f" x microbatch group {cfg.microbatch_group_size_per_vp_stage}" if cfg.vpp_size > 1 else "")
                    + "); slime's static batching needs the samples of each optimizer step to divide evenly")
            mbs = split_to(mbs, target, lengths)
            if len(mbs) != target:
                raise ScheduleError(f"{label}: {len(positions)} samples make at most {len(mbs)} micro-batches, "
                                    f"{target} needed (a multiple of {cfg.align})")
        if cfg.balance_data:
            weights = [sum(weigh(lengths[i]) for i in mb) for mb in mbs]
            per_rank = balanced_equal_parts(weights, dp)
        else:
            per_rank = [list(range(r, len(mbs), dp)) for r in range(dp)]
        sched.num_microbatches.append(len(mbs) // dp)
        sched.global_batch_sizes.append(b - a)
        for r, ks in enumerate(per_rank):
            for j, k in enumerate(ks):
                start = len(sched.partitions[r])
                sched.partitions[r].extend(positions[i] for i in mbs[k])
                sched.micro_batch_indices[r].append(list(range(start, start + len(mbs[k]))))
                sched.optimizer_step[r].extend([s] * len(mbs[k]))
                sched.micro_batch[r].extend([j] * len(mbs[k]))
    if trailing:
        if cfg.keep_trailing:
            sched.trailing_kept = True
        else:
            sched.dropped = [{"rollout_id": rid, "positions": list(groups[rid])} for rid in trailing]
    return sched


def trailing_warning(step: int, info: dict) -> str:
    """The line `convert` and `inspect` print for the rollouts slime would drop."""
    d = info["dropped"]
    ids = ", ".join(str(x["rollout_id"]) for x in d[:8]) + (", ..." if len(d) > 8 else "")
    return (f"step {step}: slime drops the trailing {len(d)} rollout(s) ({sum(x['samples'] for x in d)} samples; "
            f"ids {ids}): {info['rollouts']} rollouts is not a multiple of the global batch size "
            f"{info['global_batch_size']}; listed in the manifest, --keep-trailing trains them as a short last step")
