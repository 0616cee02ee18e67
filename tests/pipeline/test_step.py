"""pipeline/step.py: the rules of one step on per-record data. A rejected sample rejects its
whole rollout; ids are assigned over all parsed records, so a rejection never shifts a sibling's
id; rewards and mask sums are taken over the surviving rows; eval keeps the selected reward; a
one-sample group's reward is 0.0, never NaN; prompt groups that are unknown are an error
(convert) or NaN rewards (inspect)."""
from __future__ import annotations

import numpy as np
import pytest

from rollout_cli.core.errors import InvalidInputError, Location, Problem, StepProblems
from rollout_cli.core.options import RuleOptions
from rollout_cli.pipeline.step import SIBLING_RULE, compute_step
from rollout_cli.pipeline.validate import ID_EXPLICIT, ID_MISSING

FILE = "s.jsonl"


def where(i: int) -> Location:
    return Location(FILE, "line", i + 1)


def step(records, bad=(), *, split="train", fail=False, unknown_groups_ok=False, **opts):
    """compute_step over `records`, each (rollout_id or None, group_index, reward, mask total);
    `bad` holds the positions of invalid records (they have no row)."""
    problems = [(i, Problem(where(i), "loss_mask", "expected 2 values, got 3", "loss_mask.length")) for i in bad]
    row_pos = np.array([i for i in range(len(records)) if i not in bad], dtype=np.int64)
    return compute_step(
        id_state=np.array([ID_MISSING if r[0] is None else ID_EXPLICIT for r in records], dtype=np.int8),
        explicit=np.array([0 if r[0] is None else r[0] for r in records], dtype=np.int64),
        group_index=[r[1] for r in records],
        problems=problems,
        where=where,
        row_pos=row_pos,
        reward_values=np.array([records[i][2] for i in row_pos], dtype=np.float64),
        mask_totals=np.array([records[i][3] for i in row_pos], dtype=np.int64),
        split=split, step=4, opts=RuleOptions(**opts), fail=fail, unknown_groups_ok=unknown_groups_ok,
    )


# two rollouts of prompt 0 (ids 5: two samples, 6: one), and prompt 1's rollouts 7 and 8
RECORDS = [(5, 0, 1.0, 2), (5, 0, 1.0, 3), (6, 0, 0.0, 4), (7, 1, 1.0, 1), (8, 1, 0.0, 5)]


def test_a_rejected_sample_rejects_its_whole_rollout():
    st = step(RECORDS, bad=[1])
    assert st.rejected.tolist() == [True, True, False, False, False]
    assert st.keep.tolist() == [False, True, True, True]  # over the valid rows 0, 2, 3, 4
    own, sibling = sorted(st.rejects, key=lambda r: r["rule"] == SIBLING_RULE)
    assert (own["file"], own["line"], own["rule"], own["field"]) == (FILE, 2, "loss_mask.length", "loss_mask")
    assert (sibling["file"], sibling["line"]) == (FILE, 1)
    assert sibling["rule"] == SIBLING_RULE and sibling["field"] is None and sibling["rollout_id"] == 5
    assert f"{FILE}:line 2" in sibling["reason"] and "rollout 5" in sibling["reason"]
    assert {r["split"] for r in st.rejects} == {"train"} and {r["step"] for r in st.rejects} == {4}
    assert st.reasons[1].rule == "loss_mask.length" and 0 not in st.reasons


def test_a_rejection_never_shifts_a_siblings_id():
    """Missing ids are filled over every parsed record, the rejected one included."""
    recs = [(None, 0, 1.0, 1), (None, 0, 0.0, 1), (None, 1, 1.0, 1), (None, 1, 0.0, 1)]
    st = step(recs, bad=[1])
    assert st.ids.tolist() == [0, 1, 2, 3]
    kept_ids = st.ids[np.array([0, 2, 3])[st.keep]]
    assert kept_ids.tolist() == [0, 2, 3]  # not 0, 1, 2
    assert st.rejected.tolist() == [False, True, False, False]  # its own rollout only


def test_rewards_are_taken_over_the_surviving_rows():
    st = step(RECORDS, bad=[1], grpo_std_normalization=False)
    # prompt 0 keeps only rollout 6 (reward 0.0): a one-sample group; prompt 1: 1.0 and 0.0
    assert st.rewards.dtype == np.float32
    assert st.rewards.tolist() == [0.0, 0.5, -0.5]
    whole = step(RECORDS, grpo_std_normalization=False)
    assert whole.rewards.tolist() == pytest.approx([1 / 3, 1 / 3, -2 / 3, 0.5, -0.5])


def test_a_one_sample_group_gives_zero_never_nan():
    st = step([(3, 0, 1.0, 2), (4, 1, 0.25, 2), (9, 1, 0.75, 2)])
    assert not np.isnan(st.rewards).any()
    assert st.rewards[0] == 0.0
    assert st.rewards[1] < 0 < st.rewards[2]


def test_mask_sums_are_per_rollout_over_the_surviving_rows():
    st = step(RECORDS)
    assert st.mask_sums.tolist() == [5, 5, 4, 1, 5]
    assert st.mask_sums.dtype == np.int64
    assert step(RECORDS, bad=[1]).mask_sums.tolist() == [4, 1, 5]
    assert step(RECORDS, bad=[1]).step_totals and step(RECORDS, bad=[1]).group_mask_sums.tolist() == [4, 6, 6]


def test_eval_keeps_the_selected_reward():
    st = step(RECORDS, split="eval")
    assert st.rewards.tolist() == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert st.rewards.dtype == np.float32


def test_fail_raises_every_problem():
    with pytest.raises(StepProblems) as e:
        step(RECORDS, bad=[1, 3], fail=True)
    assert [str(p.location) for p in e.value.args[0]] == [f"{FILE}:line 2", f"{FILE}:line 4"]


def test_unknown_groups_are_an_error_or_nan_rewards():
    recs = [(1, 0, 1.0, 1), (2, None, 0.0, 1)]
    with pytest.raises(InvalidInputError, match=rf"{FILE}:line 2: group_index: missing.*--n-samples-per-prompt"):
        step(recs)
    st = step(recs, unknown_groups_ok=True)
    assert not st.groups_known and np.isnan(st.rewards).all()
    # with n, consecutive samples form the groups
    st = step([(1, None, 1.0, 1), (2, None, 0.0, 1)], n_samples_per_prompt=2, grpo_std_normalization=False)
    assert st.groups_known and st.rewards.tolist() == [0.5, -0.5]


def test_strict_scope_rejects_an_id_shared_by_two_prompts():
    recs = [(5, 0, 1.0, 1), (5, 1, 0.0, 1), (6, 1, 1.0, 1)]
    st = step(recs)
    assert st.rejected.tolist() == [True, True, False]
    assert {r["rule"] for r in st.rejects} == {"rollout_id.reused"}
    assert step(recs, rollout_id_scope="step").rejected.tolist() == [False, False, False]


def test_rollout_baseline_sibling_conflict():
    recs = [(5, 0, 1.0, 1), (5, 0, 0.0, 1), (6, 0, 1.0, 1)]
    with pytest.raises(InvalidInputError, match=r"train step 4: rollout 5: its samples carry different rewards"):
        step(recs, reward_baseline="rollout")
    st = step(recs, reward_baseline="rollout", unknown_groups_ok=True)
    assert np.isnan(st.rewards).all()
    assert [a["kind"] for a in st.anomalies] == ["sibling_reward_mismatch"] and st.anomalies[0]["step"] == 4
