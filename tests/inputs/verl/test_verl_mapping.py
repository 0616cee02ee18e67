"""A verl DataProto of the rollout-skip cache (as plain data) mapped to slime's sample fields."""
from __future__ import annotations


import numpy as np
import pytest

from conftest import sample_generator
from rollout_cli.inputs.verl import mapping

gen = sample_generator("make_verl")

GROUPS = [
    # the first prompt starts with the pad id 0: only the attention mask tells it from padding
    ([0, 10, 11], [([20, 21, 2], [1, 1, 1], [-0.5, -0.25, -0.125], 1.0),
                   ([22, 30, 31, 23, 2], [1, 0, 0, 1, 1], [-1.0, 0.0, 0.0, -0.5, -0.25], 0.0)]),
    ([12, 13, 14, 15], [([24, 25, 26, 27, 28, 29], [1] * 6, [-0.5] * 6, 1.0),
                        ([40, 2], [1, 1], [-0.75, -0.0625], 0.5)]),
]
P, R = 5, 6


def test_rows_by_the_masks_and_groups_of_n():
    tensors, non_tensor, _ = gen.layout(GROUPS, P, R, step=3)
    rows = mapping.samples(tensors, non_tensor, 2)
    assert [r["tokens"].tolist() for r in rows] == [[0, 10, 11, 20, 21, 2], [0, 10, 11, 22, 30, 31, 23, 2],
                                                    [12, 13, 14, 15, 24, 25, 26, 27, 28, 29], [12, 13, 14, 15, 40, 2]]
    assert [r["response_length"] for r in rows] == [3, 5, 6, 2]
    assert [r["loss_mask"].tolist() for r in rows] == [[1, 1, 1], [1, 0, 0, 1, 1], [1] * 6, [1, 1]]
    assert rows[1]["rollout_log_probs"].tolist() == [-1.0, 0.0, 0.0, -0.5, -0.25]
    assert [r["group_index"] for r in rows] == [0, 0, 1, 1]
    assert [r["status"] for r in rows] == ["completed", "completed", "truncated", "completed"]  # row 2 fills R
    assert all(r["reward"] is None for r in rows)  # no rm_scores: not recorded
    assert all(r["weight_versions"] == ["2"] for r in rows)  # the weights of step 2 generated step 3


def test_uids_decide_the_groups_and_rm_scores_the_reward():
    tensors, non_tensor, _ = gen.layout(GROUPS, P, R, step=3, uids=True, scores=True)
    rows = mapping.samples(tensors, non_tensor, None)  # no N needed with uids
    assert [r["group_index"] for r in rows] == [0, 0, 1, 1]
    assert [r["reward"] for r in rows] == [1.0, 0.0, 1.0, 0.5]
    non_tensor["uid"][:] = ["b", "a", "b", "a"]
    assert [r["group_index"] for r in mapping.samples(tensors, non_tensor, None)] == [0, 1, 0, 1]


def test_a_version_span_and_no_versions():
    tensors, non_tensor, _ = gen.layout(GROUPS, P, R, step=3)
    non_tensor["max_global_steps"][1] = 4  # a partial rollout resumed under newer weights
    rows = mapping.samples(tensors, non_tensor, 2)
    assert rows[1]["weight_versions"] == ["2", "4"]
    for k in ("global_steps", "min_global_steps", "max_global_steps"):
        non_tensor[k][:] = [None] * 4
    assert all("weight_versions" not in r for r in mapping.samples(tensors, non_tensor, 2))


def test_without_uid_or_n_the_groups_cannot_be_told():
    tensors, non_tensor, _ = gen.layout(GROUPS, P, R, step=3)
    with pytest.raises(mapping.Bad, match="uid: missing, and the file is not in a `GBS"):
        mapping.samples(tensors, non_tensor, None)
    with pytest.raises(mapping.Bad, match="the 4 rows are not whole groups of N=3"):
        mapping.samples(tensors, non_tensor, 3)


@pytest.mark.parametrize("kind, field, words", [
    ("prompt_hole", "attention_mask", "expected a left-padded prompt"),
    ("response_hole", "attention_mask", "expected a right-padded response"),
    ("empty", "attention_mask", "expected a response of at least one token"),
    ("mask", "response_mask", "expected 0/1, got 2"),
    ("version", "min_global_steps", "expected a weight version"),
])
def test_a_bad_row_is_that_row_s_problem(kind, field, words):
    tensors, non_tensor, _ = gen.layout(GROUPS, P, R, step=3)
    am = tensors["attention_mask"]
    if kind == "prompt_hole":
        am[1, P - 2] = 0
    elif kind == "response_hole":
        am[1, P] = 0
    elif kind == "empty":
        am[1, P:] = 0
    elif kind == "mask":
        tensors["response_mask"][1, 0] = 2
    else:
        non_tensor["min_global_steps"][1] = "two"
    rows = mapping.samples(tensors, non_tensor, 2)
    bad = [(i, r) for i, r in enumerate(rows) if isinstance(r, mapping.Bad)]
    assert [i for i, _ in bad] == [1]
    e = bad[0][1]
    assert e.row == 1 and e.field == field and words in e.message, e


@pytest.mark.parametrize("change, field, words", [
    (lambda t, n: t.pop("responses"), "responses", "missing"),
    (lambda t, n: t.update(response_mask=t["response_mask"][:, 1:]), "response_mask", "expected shape (4, 6)"),
    (lambda t, n: t.update(rollout_log_probs=t["rollout_log_probs"][:2]), "rollout_log_probs", "expected shape (4, 6)"),
    (lambda t, n: t.update(prompts=t["prompts"].astype(np.float32)), "prompts", "expected integer token ids"),
    (lambda t, n: n.update(global_steps=n["global_steps"][:3]), "global_steps", "expected one value per row (4), got 3"),
])
def test_a_bad_batch_names_its_field(change, field, words):
    tensors, non_tensor, _ = gen.layout(GROUPS, P, R, step=3)
    change(tensors, non_tensor)
    with pytest.raises(mapping.Bad) as e:
        mapping.samples(tensors, non_tensor, 2)
    assert e.value.field == field and words in e.value.message, e.value


@pytest.mark.parametrize("kind", ["good", "prompt_hole", "mask", "version", "no_versions"])
@pytest.mark.parametrize("size", [1, 2, 3])
def test_the_reader_s_columns_are_the_sample_dicts_columns(kind, size):
    from rollout_cli.inputs.base import RawChunk
    from rollout_cli.inputs.columns import columnar

    tensors, non_tensor, _ = gen.layout(GROUPS, P, R, step=3)
    if kind == "prompt_hole":
        tensors["attention_mask"][1, P - 2] = 0
    elif kind == "mask":
        tensors["response_mask"][3, 0] = 2
    elif kind == "version":
        non_tensor["min_global_steps"][0] = "two"
    elif kind == "no_versions":
        for k in ("global_steps", "min_global_steps", "max_global_steps"):
            non_tensor.pop(k, None)
    rows = mapping.samples(tensors, non_tensor, 2)
    assert any(r["status"] == "truncated" for r in rows if isinstance(r, dict))  # a response filling the width
    plan = mapping.plan(tensors, non_tensor, 2)
    for a in range(0, len(rows), size):
        b = min(a + size, len(rows))
        part = [None if isinstance(r, mapping.Bad) else r for r in rows[a:b]]
        want, got = columnar(RawChunk("f", "row", list(range(a, b)), part)).columns, mapping.columns(plan, a, b)
        assert list(got) == list(want)
        for k in want:
            # the mask comes as uint8 and float32 log-probs stay float32 (narrower, the same values)
            if hasattr(want[k], "equals"):
                assert got[k].cast(want[k].type).equals(want[k]), k
                assert got[k].type == want[k].type or k in ("loss_mask", "rollout_log_probs"), k
            else:
                assert got[k] == want[k], k
