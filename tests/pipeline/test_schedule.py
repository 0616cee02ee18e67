"""slime's optimizer-step schedule (pipeline/schedule.py) against the reference written from the
spec (tests/helpers/slime_schedule_reference.py), on hand-picked and generated steps."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_cli.pipeline.schedule import ScheduleConfig, ScheduleError, balanced_equal_parts, build_schedule
from slime_schedule_reference import SlimeAssertion, reference_schedule

# mixed_ids (slime_cases): filled ids and tokens (prompt 3 + response)
MIXED_IDS = [1, 2, 2, 3, 0, 0, 4, 7]
MIXED_LEN = [7, 6, 5, 6, 8, 5, 5, 6]


def _cfg(**kw) -> ScheduleConfig:
    return ScheduleConfig(**kw)


def _ref_kw(cfg: ScheduleConfig) -> dict:
    return dict(gbs=cfg.global_batch_size, dp=cfg.dp_size, mbs=cfg.micro_batch_size, dynamic=cfg.use_dynamic_batch_size,
                max_tokens=cfg.max_tokens_per_gpu, balance=cfg.balance_data, cp=cfg.cp_size, vpp=cfg.vpp_size,
                mb_group=cfg.microbatch_group_size_per_vp_stage or 1, keep_trailing=cfg.keep_trailing)


def _same(ids, lengths, cfg):
    try:
        want = reference_schedule(ids, lengths, **_ref_kw(cfg))
    except SlimeAssertion:
        with pytest.raises(ScheduleError):
            build_schedule(ids, lengths, cfg)
        return None
    got = build_schedule(ids, lengths, cfg)
    assert got.partitions == want["partitions"]
    assert got.micro_batch_indices == want["micro_batch_indices"]
    assert got.num_microbatches == want["num_microbatches"]
    assert got.global_batch_sizes == want["global_batch_sizes"]
    assert {d["rollout_id"]: d["positions"] for d in got.dropped} == want["trailing"]
    return got


def dropped_positions(schedule) -> list[int]:
    """The positions of the samples the schedule drops (trailing rollouts), ascending."""
    return sorted(p for d in schedule.dropped for p in d["positions"])


def test_mixed_ids_gbs4_keeps_six_of_eight():
    got = _same(MIXED_IDS, MIXED_LEN, _cfg(global_batch_size=4, dp_size=1, micro_batch_size=2))
    assert sorted(got.partitions[0]) == [0, 1, 2, 3, 4, 5]
    assert [d["rollout_id"] for d in got.dropped] == [4, 7] and dropped_positions(got) == [6, 7]
    assert got.global_batch_sizes == [4]


def test_mixed_ids_static_dp2_gbs2_mbs1_hits_a_step_of_three():
    with pytest.raises(ScheduleError, match=r"step 1, optimizer step 0: 3 samples in 3 micro-batches.*multiple of 2"):
        build_schedule(MIXED_IDS, MIXED_LEN, _cfg(global_batch_size=2, dp_size=2, micro_batch_size=1), where="step 1")


def test_fewer_rollouts_than_gbs_and_fewer_samples_than_ranks():
    with pytest.raises(ScheduleError, match=r"6 rollouts, fewer than the global batch size 7"):
        build_schedule(MIXED_IDS, MIXED_LEN, _cfg(global_batch_size=7))
    with pytest.raises(ScheduleError, match=r"optimizer step 0: 1 samples, fewer than the 2 data-parallel ranks"):
        build_schedule([0, 1], [4, 4], _cfg(global_batch_size=1, dp_size=2, use_dynamic_batch_size=True,
                                           max_tokens_per_gpu=100))


def test_keep_trailing_adds_a_short_step():
    got = _same(MIXED_IDS, MIXED_LEN, _cfg(global_batch_size=4, keep_trailing=True, use_dynamic_batch_size=True,
                                           max_tokens_per_gpu=16))
    assert got.global_batch_sizes == [4, 2] and not got.dropped and got.trailing_kept
    assert sorted(got.partitions[0]) == list(range(8))


def test_compact_siblings_can_land_on_two_ranks():
    # two rollouts of two siblings each, dp 2, one sample per micro-batch: siblings split
    got = _same([1, 1, 2, 2], [5, 5, 5, 5], _cfg(global_batch_size=2, dp_size=2, micro_batch_size=1))
    assert got.partitions == [[0, 2], [1, 3]]


@pytest.mark.parametrize("dp", [1, 2, 4])
@pytest.mark.parametrize("balance", [False, True])
def test_dynamic_split_of_the_largest(dp, balance):
    lengths = [30, 2, 3, 4, 25, 1, 1, 9]
    got = _same(list(range(8)), lengths, _cfg(global_batch_size=8, dp_size=dp, use_dynamic_batch_size=True,
                                               max_tokens_per_gpu=40, balance_data=balance))
    assert got.num_microbatches == [max(1, 2 // dp) if dp < 4 else 1]


def test_cp_multiplies_the_cap_and_vpp_the_alignment():
    lengths = [10] * 8
    one = _same(list(range(8)), lengths, _cfg(global_batch_size=8, use_dynamic_batch_size=True, max_tokens_per_gpu=20))
    two = _same(list(range(8)), lengths, _cfg(global_batch_size=8, use_dynamic_batch_size=True, max_tokens_per_gpu=20,
                                              cp_size=2))
    assert one.num_microbatches == [4] and two.num_microbatches == [2]
    vpp = _same(list(range(8)), lengths, _cfg(global_batch_size=8, dp_size=2, use_dynamic_batch_size=True,
                                              max_tokens_per_gpu=80, vpp_size=2, microbatch_group_size_per_vp_stage=2))
    assert vpp.num_microbatches == [2]


def test_kk_equal_parts_balances():
    parts = balanced_equal_parts([10, 1, 9, 2, 8, 3], 2)
    assert sorted(len(p) for p in parts) == [3, 3]
    sums = [sum([10, 1, 9, 2, 8, 3][i] for i in p) for p in parts]
    assert max(sums) - min(sums) <= 3


# ----------------------------------------------------------------------------- properties

@st.composite
def _steps(draw):
    n_rollouts = draw(st.integers(1, 14))
    fan = [draw(st.integers(1, 3)) for _ in range(n_rollouts)]
    ids = [r for r, k in enumerate(fan) for _ in range(k)]
    if draw(st.booleans()):  # interleave siblings (compact rollouts written out of order)
        ids = draw(st.permutations(ids))
    lengths = [draw(st.integers(1, 60)) for _ in ids]
    dynamic = draw(st.booleans())
    vpp = draw(st.sampled_from([1, 2]))
    cfg = ScheduleConfig(
        global_batch_size=draw(st.integers(1, max(1, n_rollouts))), dp_size=draw(st.sampled_from([1, 2, 4])),
        micro_batch_size=draw(st.integers(1, 4)), use_dynamic_batch_size=dynamic,
        max_tokens_per_gpu=draw(st.integers(20, 120)) if dynamic else None, balance_data=draw(st.booleans()),
        cp_size=draw(st.sampled_from([1, 2])), vpp_size=vpp,
        microbatch_group_size_per_vp_stage=draw(st.sampled_from([1, 2])) if vpp > 1 else None,
        keep_trailing=draw(st.booleans()),
    )
    return ids, lengths, cfg


@settings(max_examples=300, deadline=None)
@given(_steps())
def test_schedule_equals_reference_and_keeps_its_invariants(case):
    ids, lengths, cfg = case
    got = _same(ids, lengths, cfg)
    if got is None:
        return
    placed = [p for part in got.partitions for p in part]
    # every kept sample on exactly one rank; dropped ones listed, never lost
    assert len(placed) == len(set(placed))
    assert sorted(placed + dropped_positions(got)) == list(range(len(ids)))
    # every rank runs the same number of micro-batches
    counts = {len(m) for m in got.micro_batch_indices}
    assert len(counts) == 1 and sum(got.num_microbatches) == counts.pop()
    # no micro-batch over the token cap unless it holds one sample
    for part, mbs in zip(got.partitions, got.micro_batch_indices):
        assert [i for mb in mbs for i in mb] == list(range(len(part)))
        if cfg.use_dynamic_batch_size:
            for mb in mbs:
                assert len(mb) == 1 or sum(lengths[part[i]] for i in mb) <= cfg.token_cap
    # a rollout never spans two optimizer steps
    step_of: dict = {}
    for part, steps in zip(got.partitions, got.optimizer_step):
        for p, s in zip(part, steps):
            assert step_of.setdefault(ids[p], s) == s
    assert sum(got.global_batch_sizes) + len(got.dropped) == len(set(ids))
