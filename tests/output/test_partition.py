"""output/partition.py: the plan of one step's batches: ranks by tokens with whole rollouts
(or prompt groups), first-fit decreasing micro-batches under a budget, equal counts per rank."""
from __future__ import annotations

import numpy as np
import pytest

from rollout_cli.pipeline.schedule import first_fit
from rollout_cli.output.partition import StepColumns, equalise, pack, plan_step, rank_rows, runs


def _cols(rollout_id, tokens, shard=None, group_index=None, position=None, **kw) -> StepColumns:
    n = len(rollout_id)
    return StepColumns(
        shard=np.asarray(shard if shard is not None else [0] * n, np.int64),
        position=np.asarray(position if position is not None else range(n), np.int64),
        rollout_id=np.asarray(rollout_id, np.int64),
        group_index=np.asarray(group_index if group_index is not None else [-1] * n, np.int64),
        tokens=np.asarray(tokens, np.int64), **kw)


def test_pack_is_first_fit_decreasing():
    # longest first: 9 opens mb 0, 7 opens mb 1 (9+7 > 10), 3 joins... 9+3 > 10 -> mb 1 (7+3=10),
    # 1 joins mb 0 (9+1), 2 opens mb 2; members ascending
    lengths = np.array([3, 9, 2, 7, 1])
    assert pack(lengths, 10) == [[1, 4], [0, 3], [2]]
    # in sample order (first fit, not decreasing) it would take 4 micro-batches: 3+2+1 | 9 | 7
    assert all(sum(lengths[b]) <= 10 for b in pack(lengths, 10))


def test_pack_gives_first_fits_bins_over_the_lengths_sorted_longest_first():
    rng = np.random.default_rng(5)
    for _ in range(20):
        lengths = rng.integers(1, 900, int(rng.integers(1, 300)))
        order = sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))
        want = [sorted(order[j] for j in b) for b in first_fit([int(lengths[i]) for i in order], 1000)]
        assert pack(lengths, 1000) == want


def test_a_sample_over_the_budget_sits_alone():
    assert pack(np.array([50, 4, 4]), 10) == [[0], [1, 2]]


def test_equalise_splits_the_heaviest_multi_sample_micro_batch_first():
    lengths = np.array([5, 5, 1, 1, 4])
    bins = [[0, 1], [2, 3, 4]]  # 10 and 6 tokens
    out = equalise(bins, 3, lengths)
    assert sorted(map(sorted, out)) == [[0], [1], [2, 3, 4]]
    assert sorted(i for b in out for i in b) == [0, 1, 2, 3, 4]


def test_equalise_gives_empty_micro_batches_only_past_the_sample_count():
    lengths = np.array([3, 4])
    assert equalise([[0, 1]], 2, lengths) in ([[1], [0]], [[0], [1]])
    out = equalise([[0, 1]], 4, lengths)
    assert [len(b) for b in out] == [1, 1, 0, 0]
    assert equalise([], 2, np.zeros(0)) == [[], []]


def test_at_the_shard_count_rank_r_takes_shard_r():
    cols = _cols([1, 1, 2, 3], [5, 5, 5, 5], shard=[0, 0, 1, 1])
    assert [r.tolist() for r in rank_rows(cols, 2, 2)] == [[0, 1], [2, 3]]


def test_repartition_keeps_rollouts_whole_and_balances_tokens():
    rng = np.random.default_rng(0)
    rid = np.repeat(np.arange(200), rng.integers(1, 4, 200))
    tokens = rng.integers(10, 1000, len(rid))
    cols = _cols(rid, tokens, shard=np.arange(len(rid)) % 4, position=rng.permutation(len(rid)))
    for ws in (1, 3, 5, 8, 16):
        ranks = rank_rows(cols, ws, 4)
        assert sorted(np.concatenate(ranks).tolist()) == list(range(len(rid)))
        owner = {}
        for r, rows in enumerate(ranks):
            assert (np.diff(rows) > 0).all()
            for i in rows:
                assert owner.setdefault(int(rid[i]), r) == r, "a rollout spans two ranks"
        per = np.array([tokens[rows].sum() for rows in ranks])
        largest = max(np.bincount(rid, weights=tokens))
        assert per.max() / per.mean() <= max(1.05, largest / per.mean()), ws


def test_keep_groups_keeps_prompt_groups_whole():
    rid = np.arange(40)
    gi = np.arange(40) // 4
    cols = _cols(rid, np.full(40, 10), shard=np.arange(40) % 2, group_index=gi)
    for rows in rank_rows(cols, 3, 2, keep_groups=True):
        groups = set(gi[rows].tolist())
        assert all(set(np.flatnonzero(np.isin(gi, [g])).tolist()) <= set(rows.tolist()) for g in groups)
    # without keep_groups the groups may split (rollouts are the units)
    split = [set(gi[rows].tolist()) for rows in rank_rows(cols, 3, 2)]
    assert sum(len(s) for s in split) > 10


def test_the_plan_is_deterministic():
    rng = np.random.default_rng(1)
    rid = np.repeat(np.arange(60), 2)
    cols = _cols(rid, rng.integers(1, 500, 120), shard=np.arange(120) % 3, position=rng.permutation(120))
    a = plan_step(cols, 5, 3, 700)
    b = plan_step(cols, 5, 3, 700)
    assert [[m.tolist() for m in r] for r in a] == [[m.tolist() for m in r] for r in b]


@pytest.mark.parametrize("ws", [1, 2, 3, 4, 7, 16])
def test_every_rank_gets_the_same_micro_batch_count_under_the_budget(ws):
    rng = np.random.default_rng(ws)
    rid = np.repeat(np.arange(30), rng.integers(1, 3, 30))
    tokens = rng.integers(1, 300, len(rid))
    cols = _cols(rid, tokens, shard=np.arange(len(rid)) % 4)
    plan = plan_step(cols, ws, 4, 400)
    assert len({len(mbs) for mbs in plan}) == 1
    rows = [i for mbs in plan for mb in mbs for i in mb.tolist()]
    assert sorted(rows) == list(range(len(rid)))
    for mbs in plan:
        for mb in mbs:
            assert tokens[mb].sum() <= 400 or len(mb) == 1
            assert (np.diff(mb) > 0).all()


def test_without_a_budget_a_rank_has_one_micro_batch_and_a_slime_schedule_is_kept():
    cols = _cols([1, 2, 3, 4], [5, 5, 5, 5], shard=[0, 0, 1, 1])
    assert [[m.tolist() for m in r] for r in plan_step(cols, 2, 2)] == [[[0, 1]], [[2, 3]]]
    sched = _cols([1, 2, 3, 4], [5, 5, 5, 5], shard=[0, 0, 1, 1], optimizer_step=np.array([0, 0, 0, 0]),
                  micro_batch=np.array([0, 1, 0, 1]))
    assert [[m.tolist() for m in r] for r in plan_step(sched, 2, 2)] == [[[0], [1]], [[2], [3]]]
    # at another world size the schedule does not apply
    assert [[m.tolist() for m in r] for r in plan_step(sched, 1, 2)] == [[[0, 1, 2, 3]]]
    assert runs(np.array([0, 0, 1, 1, 1]), np.array([0, 1, 0, 0, 1])) == [[0], [1], [2, 3], [4]]


@pytest.mark.parametrize("ws", [2, 3, 8, 16])
def test_ranks_are_balanced_about_as_well_as_slimes_partitioner(ws):
    """max/mean tokens per rank against slime's seqlen balancing (pipeline/schedule.py's
    balanced_equal_parts, its equal-count Karmarkar-Karp) on the same step's samples: within
    5% of its figure, or the bound the largest rollout sets."""
    from rollout_cli.pipeline.schedule import balanced_equal_parts

    rng = np.random.default_rng(ws)
    rid = np.arange(320 - 320 % ws)  # one sample per rollout, a multiple of ws (slime needs equal counts)
    tokens = rng.integers(100, 4000, len(rid))
    cols = _cols(rid, tokens, shard=np.arange(len(rid)) % 4)
    per = np.array([tokens[rows].sum() for rows in rank_rows(cols, ws, 4)])
    slime = np.array([tokens[p].sum() for p in balanced_equal_parts(tokens.tolist(), ws)])
    ours, theirs = per.max() / per.mean(), slime.max() / slime.mean()
    assert ours <= max(1.05 * theirs, tokens.max() / per.mean()), (ours, theirs)
    assert ours < 1.01


def test_lpt_is_longest_processing_time_first_with_ties_to_the_lower_index_and_part():
    from rollout_cli.output.partition import lpt

    w = np.array([5, 9, 5, 7, 6, 1])
    # heaviest first: 9 (i1) -> p0, 7 (i3) -> p1, 6 (i4) -> p2, 5 (i0) -> p2 (6 < 7 < 9), 5 (i2) -> p1 (7 < 9 < 11),
    # 1 (i5) -> p0 (9 < 11 < 12); parts ordered by their smallest member
    assert [m.tolist() for m in lpt(w, 3)] == [[0, 4], [1, 5], [2, 3]]
    assert [m.tolist() for m in lpt(np.array([4, 4]), 3)] == [[0], [1], []]
    rng = np.random.default_rng(2)
    w = rng.integers(1, 5000, 700)
    parts = lpt(w, 6)
    assert sorted(np.concatenate(parts).tolist()) == list(range(700))
    loads = [int(w[p].sum()) for p in parts]
    assert max(loads) - min(loads) <= w.max()  # LPT's bound: no part exceeds another by more than one unit
    assert [p.tolist() for p in lpt(w, 6)] == [p.tolist() for p in parts]
