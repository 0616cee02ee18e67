"""The step assembler (assemble.py): chunks taken in order finish the step that compute_step
gives for the whole step at once; content-keyed groups renumbered; rows held or handed in."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from conftest import make_sample
from rollout_cli.core.errors import StepProblems
from rollout_cli.core.options import RuleOptions
from rollout_cli.inputs.base import RawChunk
from rollout_cli.pipeline.assemble import STEP_COLUMNS, StepAssembler
from rollout_cli.pipeline.records import id_inputs, locator
from rollout_cli.pipeline.step import compute_step
from rollout_cli.pipeline.validate import normalize_chunk, pre_schema

FILE = "f.jsonl"


def _samples(groups=(7, 7, 9, 9, 9, 4), rewards=(1.0, 0.0, 1.0, 1.0, 0.0, 0.5)):
    return [make_sample(index=i, group_index=g, reward=r) for i, (g, r) in enumerate(zip(groups, rewards))]


def _chunks(samples, cut):
    """The samples validated as chunks of `cut` records (lines numbered from 1)."""
    out = []
    for a in range(0, len(samples), cut):
        part = samples[a:a + cut]
        out.append(normalize_chunk(RawChunk(FILE, "line", list(range(a + 1, a + 1 + len(part))), part), a,
                                   reward_key=None, keep_text=False))
    return out


@pytest.mark.parametrize("cut", [1, 2, 4, 6])
def test_chunks_in_order_give_compute_steps_step(cut):
    samples = _samples()
    opts = RuleOptions(n_samples_per_prompt=2)
    asm = StepAssembler(opts)
    bases = [asm.add(nc) for nc in _chunks(samples, cut)]
    assert bases == list(range(0, len(samples), cut))
    st = asm.finish(3, fail=True)
    whole = _chunks(samples, len(samples))
    pre = pa.Table.from_batches(whole[0].batches, schema=pre_schema(False))
    id_state, explicit, group_index = id_inputs(whole)
    want = compute_step(id_state=id_state, explicit=explicit, group_index=group_index, problems=[],
                        where=locator(whole), row_pos=pre.column("_pos").to_numpy(),
                        reward_values=pre.column("_reward_value").to_numpy(),
                        mask_totals=pre.column("_mask_total").to_numpy(), split="train", step=3, opts=opts, fail=True)
    assert st.records == len(samples) and st.step == 3 and st.split == "train"
    assert st.fields.ids.tolist() == want.ids.tolist()
    assert st.fields.rewards.tolist() == want.rewards.tolist()
    assert st.fields.step_totals == want.step_totals
    assert st.rows.column("_pos").to_pylist() == list(range(len(samples)))
    assert str(st.where(4)) == f"{FILE}:line 5"


def test_problems_are_placed_by_step_position_and_reject_the_rollout():
    samples = _samples()
    samples[3]["response_length"] = 99  # invalid: line 4, record 3
    samples[4]["rollout_id"] = samples[3]["rollout_id"] = 5  # its sibling goes with it
    asm = StepAssembler(RuleOptions())
    for nc in _chunks(samples, 2):
        asm.add(nc)
    assert [i for i, _ in asm.problems] == [3]
    assert str(asm.problems[0][1].location) == f"{FILE}:line 4"
    with pytest.raises(StepProblems):
        _fail_step(samples)
    asm2 = StepAssembler(RuleOptions())
    for nc in _chunks(samples, 2):
        asm2.add(nc)
    st = asm2.finish(0, fail=False)
    assert st.fields.rejected.tolist() == [False, False, False, True, True, False]
    assert st.kept().column("_pos").to_pylist() == [0, 1, 2, 5]
    assert len(st.fields.rewards) == 4


def _fail_step(samples):
    asm = StepAssembler(RuleOptions())
    for nc in _chunks(samples, 2):
        asm.add(nc)
    asm.finish(0, fail=True)


def test_content_keyed_groups_are_renumbered_for_their_format_only():
    keys = (2**61 + 5, 2**61 + 5, 17, 17, 2**60, 2**60)
    samples = _samples(groups=keys)
    got = {}
    for fmt in ("nemo_rl", "jsonl"):
        asm = StepAssembler(RuleOptions(), input_format=fmt)
        for nc in _chunks(samples, 4):
            asm.add(nc)
        st = asm.finish(0, fail=True)
        got[fmt] = (st.group_index, st.rows.column("group_index").to_pylist(), st.fields.rewards.tolist())
    assert got["nemo_rl"][0] == got["nemo_rl"][1] == [0, 0, 1, 1, 2, 2]
    assert got["jsonl"][0] == got["jsonl"][1] == list(keys)
    assert got["nemo_rl"][2] == got["jsonl"][2]  # the same groups, only renamed


def test_held_columns_and_rows_handed_in():
    samples = _samples()
    asm = StepAssembler(RuleOptions(), columns=["raw_reward"])
    for nc in _chunks(samples, 4):
        asm.add(nc)
    st = asm.finish(0, fail=True)
    assert st.rows.column_names == [*STEP_COLUMNS, "raw_reward"]
    # a caller that stages its rows elsewhere adds summaries only and hands the rows to finish
    staged = StepAssembler(RuleOptions())
    batches = []
    for nc in _chunks(samples, 4):
        batches += nc.batches
        nc.batches = []
        staged.add(nc)
    assert staged.held_rows().num_rows == 0
    rows = pa.Table.from_batches(batches, schema=pre_schema(False))
    st2 = staged.finish(0, rows=rows, fail=True)
    assert st2.rows.num_rows == len(samples)
    assert np.array_equal(st2.fields.rewards, st.fields.rewards)
