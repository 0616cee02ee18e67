"""slime's DP / micro-batch schedule (slime-spec section 6), re-derived from the spec's text for
tests: the oracle `rollout_cli.pipeline.schedule` is compared against. Written for clarity, not
speed, and on purpose in a different shape (whole-step arithmetic, explicit loops, no shared
helpers). Karmarkar-Karp follows the largest-differencing method with slime's tie rules.

`reference_schedule(rollout_ids, total_lengths, ...)` returns a dict with slime's names:
partitions, micro_batch_indices, num_microbatches, global_batch_sizes, plus `kept` (positions
trained) and `trailing` (rollout id -> positions slime drops).
"""
from __future__ import annotations

import heapq


class SlimeAssertion(AssertionError):
    pass


def _first_fit(lengths, cap):
    bins = []
    for i, n in enumerate(lengths):
        placed = False
        for b in bins:
            if sum(lengths[j] for j in b) + n <= cap:
                b.append(i)
                placed = True
                break
        if not placed:
            bins.append([i])
    return bins


def _split_largest(bins, lengths):
    """Split the largest (token sum, then index) multi-sample bin in two by longest-first."""
    best_k, best_key = None, None
    for k, b in enumerate(bins):
        if len(b) < 2:
            continue
        key = (sum(lengths[j] for j in b), k)
        if best_key is None or key > best_key:
            best_k, best_key = k, key
    if best_k is None:
        return False
    left, right, ls, rs = [], [], 0, 0
    for j in sorted(bins[best_k], key=lambda j: -lengths[j]):
        if ls <= rs:
            left.append(j)
            ls += lengths[j]
        else:
            right.append(j)
            rs += lengths[j]
    bins[best_k] = left
    bins.append(right)
    return True


def _kk_equal(weights, k):
    """Largest differencing into k equal-count parts; parts heaviest first, members sorted."""

    def set_key(st):
        return (sum(w for _, w in st), len(st), st)

    def spread(state):
        return sum(w for _, w in state[0]) - sum(w for _, w in state[-1])

    class Node:
        def __init__(self, sets):
            self.sets = sorted(sets, key=set_key, reverse=True)

        def __lt__(self, other):
            a, b = spread(self.sets), spread(other.sets)
            if a != b:
                return a > b
            return set_key(self.sets[0]) > set_key(other.sets[0])

    order = sorted((w, i) for i, w in enumerate(weights))
    heap = [Node([[(i, w)] for w, i in order[a:a + k]]) for a in range(0, len(order), k)]
    pq: list = []
    for node in heap:
        heapq.heappush(pq, node)
    while len(pq) > 1:
        x = heapq.heappop(pq)
        y = heapq.heappop(pq)
        merged = [x.sets[i] + y.sets[k - 1 - i] for i in range(k)]
        heapq.heappush(pq, Node(merged))
    return [sorted(i for i, _ in st) for st in pq[0].sets]


def reference_schedule(rollout_ids, total_lengths, *, gbs, dp=1, mbs=1, dynamic=False, max_tokens=None,
                       balance=False, cp=1, vpp=1, mb_group=1, keep_trailing=False):
    by_rollout: dict = {}
    for pos, rid in enumerate(rollout_ids):
        by_rollout.setdefault(rid, []).append(pos)
    rollouts = list(by_rollout)
    n_steps = len(rollouts) // gbs
    spans = [rollouts[s * gbs:(s + 1) * gbs] for s in range(n_steps)]
    trailing = rollouts[n_steps * gbs:]
    if keep_trailing and trailing:
        spans.append(trailing)
    if not spans:
        raise SlimeAssertion(f"num_rollouts ({len(rollouts)}) < global_batch_size ({gbs})")
    align = dp * (mb_group if vpp > 1 else 1)
    partitions = [[] for _ in range(dp)]
    mb_indices = [[] for _ in range(dp)]
    num_mb, gbss = [], []
    for span in spans:
        samples = [p for rid in span for p in by_rollout[rid]]
        if len(samples) < dp:
            raise SlimeAssertion(f"{len(samples)} samples < dp_size {dp}")
        lengths = [total_lengths[p] for p in samples]
        if dynamic:
            bins = _first_fit(lengths, max_tokens * cp)
        else:
            bins = [list(range(a, min(a + mbs, len(samples)))) for a in range(0, len(samples), mbs)]
        target = align * max(1, (len(bins) + align - 1) // align)
        if len(bins) != target:
            if not dynamic:
                raise SlimeAssertion(f"static path: num_mbs ({len(bins)}) not a multiple of {align}")
            while len(bins) < target and _split_largest(bins, lengths):
                pass
            if len(bins) != target:
                raise SlimeAssertion(f"could only produce {len(bins)} mbs, need {target}")
        if balance:
            ranks = _kk_equal([sum(lengths[j] for j in b) for b in bins], dp)
        else:
            ranks = [[k for k in range(len(bins)) if k % dp == r] for r in range(dp)]
        num_mb.append(len(bins) // dp)
        gbss.append(len(span))
        for r in range(dp):
            for k in ranks[r]:
                start = len(partitions[r])
                partitions[r] += [samples[j] for j in bins[k]]
                mb_indices[r].append(list(range(start, start + len(bins[k]))))
    kept = sorted(p for part in partitions for p in part)
    dropped = {} if keep_trailing else {rid: by_rollout[rid] for rid in trailing}
    return {"partitions": partitions, "micro_batch_indices": mb_indices, "num_microbatches": num_mb,
            "global_batch_sizes": gbss, "kept": kept, "trailing": dropped}
