"""core/errors.py: a Problem carries the id of the rule it breaks, everywhere one is made."""
from __future__ import annotations

import ast
from pathlib import Path

from rollout_cli.core.errors import InvalidInputError, Location, Problem

PKG = Path(__file__).resolve().parents[2] / "rollout_cli"


def test_a_problem_reports_its_rule():
    p = Problem(Location("a.jsonl", "line", 3), "loss_mask", "expected length 2 (response_length), got 3",
                "loss_mask.length")
    assert p.to_dict() == {"file": "a.jsonl", "line": 3, "field": "loss_mask",
                           "reason": "expected length 2 (response_length), got 3", "rule": "loss_mask.length"}
    assert str(p) == "a.jsonl:line 3: loss_mask: expected length 2 (response_length), got 3"
    assert InvalidInputError("bad", [p]).to_dict()["problems"][0]["rule"] == "loss_mask.length"


def _problems_made(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Problem":
            yield node


def test_every_problem_is_made_with_a_rule_id():
    """Each place that makes a Problem gives it a rule (the fourth argument, or rule=), so the
    rejects report and inspect never classify one by its wording."""
    made, bad = 0, []
    for path in sorted(PKG.rglob("*.py")):
        for call in _problems_made(path):
            made += 1
            if len(call.args) < 4 and not any(k.arg == "rule" for k in call.keywords):
                bad.append(f"{path.relative_to(PKG)}:{call.lineno}")
    assert made >= 10  # the check sees the package's problems
    assert not bad, f"Problem made without a rule id: {bad}"
