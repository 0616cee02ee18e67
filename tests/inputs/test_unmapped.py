"""inputs/unmapped.py: a row's first failing check is its Bad; Bad carries field, message, row."""
from __future__ import annotations

import numpy as np

from rollout_cli.inputs.unmapped import Bad, first_failures, kind


def test_a_rows_first_failing_check_is_its_bad():
    checks = (
        (np.array([False, True, False, True]), lambda i: Bad("a", "first check", i)),
        (np.array([True, True, False, False]), lambda i: Bad("b", "second check", i)),
    )
    bad = first_failures(np, checks)
    assert sorted(bad) == [0, 1, 3]
    assert (bad[0].field, bad[1].field, bad[3].field) == ("b", "a", "a")
    assert bad[1].row == 1 and bad[1].message == "first check" and str(bad[1]) == "a: first check"
    assert first_failures(np, ((np.zeros(3, bool), lambda i: Bad("x", "never", i)),)) == {}


def test_bad_without_a_row_and_kind():
    e = Bad(None, "not an object")
    assert (e.field, e.message, e.row) == (None, "not an object", None)
    assert kind(None) == "null" and kind([1]) == "list" and kind({}) == "dict"
