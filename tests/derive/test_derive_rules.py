"""The selection rules over Arrow tables (rollout_cli/derive/rules.py), as properties: every
selected rollout is a candidate and the best of its group; pairs are strictly ordered and share
a prompt; no group is in two splits; the counts add up."""
from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_cli.derive import rules

STATUSES = ("completed", "completed", "completed", "truncated", "aborted")


@st.composite
def step_rows(draw):
    """One step's rows as the output holds them: rollouts of 1-3 samples in groups, some broken."""
    rows, pos = [], 0
    for rid in range(draw(st.integers(0, 14))):
        group = draw(st.integers(0, 3))
        reward = draw(st.sampled_from([None, -1.0, 0.0, 0.5, 1.0, 2.0]))
        prompt = draw(st.sampled_from([[7, 8], [7, 8, 9]]))
        for _ in range(draw(st.integers(1, 3))):
            rl = draw(st.integers(1, 3))
            other = draw(st.sampled_from([None, None, None, None, 3.0]))  # a sibling that disagrees
            rows.append({
                "step": 4, "rollout_id": rid, "group_index": group, "rollout_position": pos, "sample_index": pos,
                "status": draw(st.sampled_from(STATUSES)), "remove_sample": draw(st.booleans()) and draw(st.booleans()),
                "loss_mask": [draw(st.sampled_from([0, 1, 1])) for _ in range(rl)],
                "raw_reward": reward if other is None or reward is None else other,
                "tokens": prompt + [100 + draw(st.integers(0, 2)) for _ in range(rl)], "response_length": rl,
            })
            pos += 1
    return pa.Table.from_pylist(rows, schema=pa.schema([
        ("step", pa.int64()), ("rollout_id", pa.int64()), ("group_index", pa.int64()),
        ("rollout_position", pa.int64()), ("sample_index", pa.int64()), ("status", pa.string()),
        ("remove_sample", pa.bool_()), ("loss_mask", pa.list_(pa.uint8())), ("raw_reward", pa.float64()),
        ("tokens", pa.list_(pa.int32())), ("response_length", pa.int32())]))


def _is_candidate(samples: list[dict]) -> bool:
    rewards = {s["raw_reward"] for s in samples}
    return (all(s["status"] == "completed" and not s["remove_sample"] for s in samples)
            and sum(sum(s["loss_mask"]) for s in samples) > 0 and None not in rewards and len(rewards) == 1)


def _by_rollout(t: pa.Table) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for r in t.to_pylist():
        out.setdefault(r["rollout_id"], []).append(r)
    return out


@settings(max_examples=150, deadline=None)
@given(step_rows(), st.sampled_from(["best", "all"]), st.sampled_from([None, 0.5, 1.0]))
def test_selected_rollouts_are_candidates_and_the_best_of_their_group(t, select, min_reward):
    counts = rules.Counts()
    cand = rules.ranked(rules.count_skips(rules.rollouts(t), counts))
    chosen = rules.select_rollouts(cand, counts, select=select, min_reward=min_reward)
    by = _by_rollout(t)
    cands = {rid for rid, s in by.items() if _is_candidate(s)}
    assert set(cand["rollout_id"].to_pylist()) == cands
    for rid in chosen["rollout_id"].to_pylist():
        assert rid in cands
        mine = by[rid][0]
        if min_reward is not None:
            assert mine["raw_reward"] >= min_reward
        if select == "best":
            rivals = [by[r] for r in cands if by[r][0]["group_index"] == mine["group_index"]]
            best = max(s[0]["raw_reward"] for s in rivals)
            assert mine["raw_reward"] == best
            first = min(s[0]["rollout_position"] for s in rivals if s[0]["raw_reward"] == best)
            assert by[rid][0]["rollout_position"] == first
    if select == "all":  # every candidate that meets the threshold
        assert set(chosen["rollout_id"].to_pylist()) == {
            r for r in cands if min_reward is None or by[r][0]["raw_reward"] >= min_reward}
    # the counts add up
    assert counts.rollouts == len(by) == counts.candidates + sum(counts.skipped.values())
    assert counts.candidates == counts.selected + sum(counts.not_selected.values())


@settings(max_examples=150, deadline=None)
@given(step_rows(), st.booleans(), st.sampled_from([0.0, 0.5]))
def test_pairs_are_strictly_ordered_and_share_their_prompt(t, every, margin):
    counts = rules.Counts()
    cand = rules.ranked(rules.count_skips(rules.rollouts(t), counts))
    pairs = rules.pairs(t, cand, counts, min_margin=margin, every=every)
    by = _by_rollout(t)
    for step, group, c, r in pairs:
        (cs,), (rs,) = by[c], by[r]  # rollouts of one sample
        assert _is_candidate([cs]) and _is_candidate([rs])
        assert cs["group_index"] == rs["group_index"] == group and step == 4
        assert cs["raw_reward"] - rs["raw_reward"] > margin
        assert cs["tokens"][:-cs["response_length"]] == rs["tokens"][:-rs["response_length"]]
    assert len(set(pairs)) == len(pairs)
    if not every:  # at most one pair per group: the best against the worst
        assert len({p[:2] for p in pairs}) == len(pairs)
    assert counts.candidates == counts.selected + sum(counts.not_selected.values())


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.floats(0, 0.99))
def test_a_group_goes_to_one_split_whatever_else_is_there(step, group, fraction):
    assert rules.in_test(step, group, fraction) == rules.in_test(step, group, fraction)
    assert not rules.in_test(step, group, 0.0)
    # a higher fraction keeps every group a lower one put in test
    if rules.in_test(step, group, fraction):
        assert rules.in_test(step, group, min(0.999, fraction + 0.1))


def test_dedupe_keeps_the_first_ranked_of_equal_responses():
    rows = [{"step": 1, "rollout_id": i, "group_index": 0, "rollout_position": i, "sample_index": i,
             "status": "completed", "remove_sample": False, "loss_mask": [1], "raw_reward": rw,
             "tokens": [5, tok], "response_length": 1} for i, (rw, tok) in enumerate([(0.0, 9), (1.0, 9), (0.5, 8)])]
    t = pa.Table.from_pylist(rows)
    counts = rules.Counts()
    cand = rules.dedupe(t, rules.ranked(rules.count_skips(rules.rollouts(t), counts)), counts)
    assert cand["rollout_id"].to_pylist() == [1, 2]  # rollout 0 repeats rollout 1's response, ranked lower
    assert counts.not_selected == {rules.DUPLICATE: 1}
