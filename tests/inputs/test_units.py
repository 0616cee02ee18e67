"""rollout_cli.inputs.units: the step rules convert and inspect share (--steps, duplicate steps,
a read unit's step, the record step check)."""
from __future__ import annotations

import pytest

from rollout_cli.core.errors import InvalidInputError, UsageError
from rollout_cli.inputs.discover import InputFile
from rollout_cli.inputs.units import Unit, claim_step, in_steps, record_step, train_dump_note, unit_step


@pytest.mark.parametrize("step,spec,selected", [
    (3, None, True), (3, "3", True), (3, "4", False), (3, "2:3", True), (4, "2:3", False), (0, ":0", True), (9, "5:", True),
    (4, "5:", False),
])
def test_in_steps(step, spec, selected):
    assert in_steps(step, spec) is selected


def test_in_steps_bad_spec():
    with pytest.raises(UsageError):
        in_steps(1, "a:b")


def test_claim_step_names_both_inputs():
    seen: dict = {}
    claim_step(seen, "train", 2, "a.jsonl")
    claim_step(seen, "eval", 2, "eval_2.jsonl")  # another split: not a duplicate
    with pytest.raises(InvalidInputError, match="two inputs give train step 2: a.jsonl and b.pt"):
        claim_step(seen, "train", 2, "b.pt")


def _unit(fmt: str, step, step_from="name") -> Unit:
    return Unit(InputFile(f"x.{fmt}", f"x.{fmt}", fmt, step, "train", step_from), step)


def test_unit_step_payload_wins():
    assert unit_step(_unit("pt", 12), 7) == 7
    assert unit_step(_unit("jsonl", 3, "field"), None) == 3
    with pytest.raises(UsageError, match="cannot tell its step"):
        unit_step(_unit("pt", None), None)


def test_record_step_not_checked_for_pt():
    assert record_step(_unit("jsonl", 4).input) == 4
    assert record_step(_unit("pt", 4).input) is None
    assert "train-side" in train_dump_note(_unit("pt", 2))
