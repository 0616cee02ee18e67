"""api/results.py: a result is frozen, its to_dict() follows the fields' order and leaves an
optional key out only while it is None, and from_dict refuses a key the result has no field for."""
from __future__ import annotations

import dataclasses

import pytest

from rollout_cli import AuditResult, ConvertResult, InspectResult, ReportResult


def _convert(**kw) -> ConvertResult:
    d = dict(out="o", counts={}, steps=[], rejects=None, skipped=[], notes=[], warnings=[], anomalies=[], elapsed_seconds=0.5)
    return ConvertResult.from_dict({**d, **kw})


def test_to_dict_keeps_the_fields_order_and_a_none_that_is_not_optional():
    r = _convert()
    assert list(r.to_dict()) == ["out", "counts", "steps", "rejects", "skipped", "notes", "warnings", "anomalies",
                                 "elapsed_seconds"]
    assert r.to_dict()["rejects"] is None
    assert list(_convert(pending=[]).to_dict())[-1] == "pending"


def test_results_are_frozen():
    r = _convert()
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.out = "x"  # type: ignore[misc]


def test_from_dict_refuses_unknown_keys():
    with pytest.raises(TypeError, match="unexpected keys"):
        _convert(extra=1)


def test_gate_and_divergence_verdicts():
    i = InspectResult(summary={"notes": []}, groups=[], anomalies=[], removed=[], loss_weight=[])
    assert i.checks_passed and "checks" not in i.to_dict()
    failed = dataclasses.replace(i, checks=[{"passed": True}, {"passed": False}])
    assert not failed.checks_passed and list(failed.to_dict())[-1] == "checks"
    a = AuditResult(summary={"divergences": 2}, rules=[], steps=[], divergences=[])
    assert a.diverged and not dataclasses.replace(a, summary={"divergences": 0}).diverged
    assert "trainer" not in ReportResult(path="p", bytes=1, counts={}).to_dict()
