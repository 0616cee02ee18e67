"""A SkyRL training batch (its pickled state, as plain data) mapped to slime's sample fields."""
from __future__ import annotations


import numpy as np
import pytest

from conftest import sample_generator
from rollout_cli.inputs.skyrl import mapping

gen = sample_generator("make_skyrl")

EOS = gen.EOS


def state(tensors, meta):
    """The batch as the restricted unpickler hands it on (inputs/pickled: tensors as arrays)."""
    return {"batch_dict": dict(tensors), "batch_size": len(tensors["sequences"]), "device": "cpu", "metadata": meta}


GROUPS = [
    # a prompt that starts with the pad id (= EOS): only the attention mask tells it from padding
    ([EOS, 10, 11], [([20, 21, EOS], [1, 1, 1], [-0.5, -0.25, -0.125]),
                     ([22, EOS], [1, 1], [-1.0, -0.5])]),
    ([12, 13, 14, 15, 16], [([23, 24, 25, 26, EOS], [1, 0, 0, 1, 1], [-0.5, 0.0, 0.0, -0.75, -0.0625])]),
]


def test_rows_are_stripped_by_the_masks_never_by_the_pad_value():
    rows, notes = mapping.samples(state(*gen.layout(GROUPS)))
    assert notes == []
    assert [r["tokens"].tolist() for r in rows] == [[EOS, 10, 11, 20, 21, EOS], [EOS, 10, 11, 22, EOS],
                                                    [12, 13, 14, 15, 16, 23, 24, 25, 26, EOS]]
    assert [r["response_length"] for r in rows] == [3, 2, 5]
    assert [r["loss_mask"].tolist() for r in rows] == [[1, 1, 1], [1, 1], [1, 0, 0, 1, 1]]
    assert [r["rollout_log_probs"].tolist() for r in rows] == [[-0.5, -0.25, -0.125], [-1.0, -0.5],
                                                               [-0.5, 0.0, 0.0, -0.75, -0.0625]]
    assert [r["group_index"] for r in rows] == [0, 0, 1]
    assert [r["rollout_id"] for r in rows] == [0, 1, 2]
    assert all(r["reward"] is None and r["status"] == "completed" for r in rows)


def test_pad_rows_are_left_out_with_a_note():
    tensors, meta = gen.layout(GROUPS, dp_size=4)
    assert meta["pad_size"] == 1 and len(tensors["sequences"]) == 4
    rows, notes = mapping.samples(state(tensors, meta))
    assert len(rows) == 3 and "1 trailing row(s)" in notes[0]


def test_without_rollout_logprobs_the_rows_have_none():
    tensors, meta = gen.layout(GROUPS)
    tensors["rollout_logprobs"] = None
    rows, _ = mapping.samples(state(tensors, meta))
    assert all("rollout_log_probs" not in r for r in rows)


def _broken(kind):
    tensors, meta = gen.layout(GROUPS)
    if kind == "attention":
        tensors["attention_mask"][1, -1] = 0  # a hole at the end
    elif kind == "response":
        tensors["response_mask"][1, :] = [1, 0, 0, 0, 0][: tensors["response_mask"].shape[1]]
    elif kind == "loss":
        tensors["loss_mask"][2, -1] = 0.5
    elif kind == "long_response":
        tensors["attention_mask"][1, :] = 0
        tensors["attention_mask"][1, -1] = 1
    return state(tensors, meta)


@pytest.mark.parametrize("kind, field, words", [
    ("attention", "attention_mask", "expected left padding"),
    ("response", "response_mask", "expected a right-aligned response"),
    ("loss", "loss_mask", "expected 0/1 on the response, got 0.5"),
    ("long_response", "response_mask", "expected a response of 1 to 1 tokens"),
])
def test_a_bad_row_is_that_row_s_problem(kind, field, words):
    rows, _ = mapping.samples(_broken(kind))
    bad = [(i, r) for i, r in enumerate(rows) if isinstance(r, mapping.Bad)]
    assert len(bad) == 1
    i, e = bad[0]
    assert i == e.row and e.field == field and words in e.message, e


@pytest.mark.parametrize("change, field, words", [
    (lambda t, m: m.pop("policy_prompt_boundaries"), "metadata.policy_prompt_boundaries", "missing"),
    (lambda t, m: m.update(policy_prompt_boundaries=[(0, 2)]), "metadata.policy_prompt_boundaries",
     "cover rows 0-1, expected all 3 rows"),
    (lambda t, m: m.update(policy_prompt_boundaries=[(0, 2), (1, 3)]), "metadata.policy_prompt_boundaries",
     "entry 1: expected a range starting at row 2"),
    (lambda t, m: m.update(pad_size=3), "metadata.pad_size", "in [0, 3)"),
    (lambda t, m: t.pop("loss_mask"), "loss_mask", "missing"),
    (lambda t, m: t.update(loss_mask=t["loss_mask"][:, 1:]), "loss_mask", "expected a [3, 5] tensor"),
    (lambda t, m: t.update(sequences=t["sequences"].astype(np.float32)), "sequences", "expected integer token ids"),
])
def test_a_bad_batch_names_its_field(change, field, words):
    tensors, meta = gen.layout(GROUPS)
    change(tensors, meta)
    with pytest.raises(mapping.Bad) as e:
        mapping.samples(state(tensors, meta))
    assert e.value.field == field and words in e.value.message, e.value


def test_a_batch_that_is_not_skyrl_s():
    st = state(*gen.layout(GROUPS))
    st["batch_dict"]["response_mask"] = [[1, 1]]
    with pytest.raises(mapping.Bad, match="response_mask: expected a tensor, got list"):
        mapping.samples(st)
    with pytest.raises(mapping.Bad, match="batch_dict: expected a SkyRL TensorBatch's state"):
        mapping.samples({"rows": []})


def _as_columns(rows, a, b):
    """The reference: rows a..b-1's sample dicts put in columnar form one by one."""
    from rollout_cli.inputs.base import RawChunk
    from rollout_cli.inputs.columns import columnar

    part = [None if isinstance(r, mapping.Bad) else r for r in rows[a:b]]
    return columnar(RawChunk("f", "row", list(range(a, b)), part)).columns


@pytest.mark.parametrize("kind", ["good", "attention", "response", "loss", "long_response"])
@pytest.mark.parametrize("size", [1, 2, 3])
def test_the_reader_s_columns_are_the_sample_dicts_columns(kind, size):
    st = state(*gen.layout(GROUPS)) if kind == "good" else _broken(kind)
    rows, _ = mapping.samples(st)
    plan, _ = mapping.plan(st)
    for a in range(0, len(rows), size):
        b = min(a + size, len(rows))
        want, got = _as_columns(rows, a, b), mapping.columns(plan, a, b)
        assert list(got) == list(want)
        for k in want:
            # the mask comes as uint8 and float32 log-probs stay float32 (narrower, the same values)
            if hasattr(want[k], "equals"):
                assert got[k].cast(want[k].type).equals(want[k]), k
                assert got[k].type == want[k].type or k in ("loss_mask", "rollout_log_probs"), k
            else:
                assert got[k] == want[k], k
