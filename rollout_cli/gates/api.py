"""A command's gates as plain data: `plan` gathers the checks of a checks file and the flags
(before any input is read), `evaluate` turns each into a `checks[]` entry of the command's
--json, `line` into its line of the human output."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.errors import UsageError
from . import checkfile
from .expressions import Check, closest, crosses, hint, known, parse, split
from .figures import COMMANDS, catalogue

LISTED = 10  # crossing steps a human line names (--json and the JUnit report name all)


@dataclass
class Plan:
    """The checks of one command, in order (the file's, then the flags'), and the file's
    top-level entries it skips because it has no figure of that name."""

    command: str
    checks: list[Check] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)  # {"expr", "note"}

    def notes(self) -> list[str]:
        return [s["note"] for s in self.skipped]


def plan(command: str, fail_on: list[str] | None = None, checks_file: str | None = None) -> Plan:
    """The checks of `command`: the checks file's top-level `fail_on` (those whose name the
    command has; the others are skipped with a note), its `[command]` table, then `fail_on`
    (the --fail-on flags). UsageError (exit 2) for a malformed expression, a name the command
    does not have (a top-level one: that no command has), or a bad file."""
    figs = catalogue(command)
    out = Plan(command)
    if checks_file is not None:
        f = checkfile.load(checks_file)
        for text in f.top:
            _top_level(out, figs, f.path, text)
        for text in f.tables.get(command, []):
            out.checks.append(_parse(text, figs, command, f"--checks {f.path}: {command} table fail_on"))
    for text in fail_on or []:
        out.checks.append(_parse(text, figs, command, "--fail-on"))
    seen: set[str] = set()
    out.checks = [c for c in out.checks if not (c.expr in seen or seen.add(c.expr))]  # first of repeats
    return out


def _parse(text: str, figs: dict, command: str, where: str) -> Check:
    parts = split(text)
    elsewhere = [c for c in COMMANDS if c != command and parts and parts[0] in catalogue(c)]
    return parse(text, figs, command, where, elsewhere)


def _top_level(out: Plan, figs: dict, path: str, text: str) -> None:
    """A top-level entry: a check of this command, or skipped with a note when only another
    command has its name; an error when none has it."""
    where = f"--checks {path}: fail_on"
    parts = split(text)
    if parts is None or parts[0] in figs:
        out.checks.append(parse(text, figs, out.command, where))
        return
    name = parts[0]
    others = [c for c in COMMANDS if c != out.command and name in catalogue(c)]
    if not others:
        every = sorted({n for c in COMMANDS for n in catalogue(c)})
        raise UsageError(f"{where} {text!r}: no command has a figure {name!r}; {hint(every, closest(name, every))}")
    out.skipped.append({"expr": text.strip(), "note": f"{path}: fail_on {text.strip()!r} skipped: {out.command} has no figure "
                        f"{name!r} (it gates {' and '.join(others)})"})


def evaluate(p: Plan, result: dict) -> list[dict]:
    """One `{"expr", "name", "op", "threshold", "value", "passed", "checked", "steps"}` per check
    on the command's result. A run-wide check: its figure's value. A per-step check: `steps`
    lists each step (rules: each finding) that crosses with its value, `value` is the worst
    (the largest for > and >=, the smallest for < and <=, else the first crossing) and
    `checked` how many steps it saw; with no step at all it fails, having nothing to check.
    A null or NaN figure crosses. `worst_at`: the step (or finding) of the worst value, None
    for a run-wide figure."""
    return [_evaluate(c, result) for c in p.checks]


def _evaluate(c: Check, result: dict) -> dict:
    pairs = c.figure.values(result)
    crossing = [(label, v) for label, v in pairs if crosses(v, c.op, c.threshold)]
    value = _worst([v for _, v in pairs], [v for _, v in crossing], c.op)
    at = next((label for label, v in pairs if not known(value) and not known(v) or known(value) and v == value), None)
    return {
        "expr": c.expr, "name": c.name, "op": c.op, "threshold": c.threshold,
        "value": _json(value),
        "passed": bool(pairs) and not crossing,
        "checked": len(pairs),
        "steps": [{**label, "value": _json(v)} for label, v in crossing if label is not None],
        "worst_at": at,
    }


def _worst(values: list, crossing: list, op: str) -> Any:
    if not values:
        return None
    if not all(known(v) for v in values):
        return None
    if op in (">", ">="):
        return max(values)
    if op in ("<", "<="):
        return min(values)
    return crossing[0] if crossing else values[0]


def _json(v: Any) -> Any:
    """The value as JSON holds it: NaN as null."""
    return v if known(v) else None


def _label(step: dict) -> str:
    return " ".join(f"{k} {v}" if k == "step" else str(v) for k, v in step.items() if k != "value")


def crossing_text(c: dict, limit: int | None = LISTED) -> str:
    """'step 3 (0.31), step 5 (0.25)': the crossing steps with their values."""
    shown = c["steps"] if limit is None else c["steps"][:limit]
    text = ", ".join(f"{_label(s)} ({_fmt(s['value'])})" for s in shown)
    more = len(c["steps"]) - len(shown)
    return text + (f" and {more} more" if more > 0 else "")


def line(c: dict) -> str:
    """The check's line of the human output: passed or failed, its value, the threshold and
    the steps that crossed."""
    state = "passed" if c["passed"] else "FAILED"
    value = _fmt(c["value"])
    if c["value"] is None:
        value += " (null or NaN fails)" if c["checked"] else " (no step to check)"
    elif c["checked"] > 1 or c["steps"]:
        which = {">": "largest", ">=": "largest", "<": "smallest", "<=": "smallest"}.get(
            c["op"], "first crossing" if c["steps"] else "first")
        value += f" ({which} of {c['checked']})"
    out = f"check {state}: {c['expr']}: value {value}, threshold {c['threshold']}"
    return out + (f"; crossed at {crossing_text(c)}" if c["steps"] else "")


def brief(c: dict) -> str:
    """The check in one short line (inspect -q): verdict, expression, worst value and where."""
    state = "passed" if c["passed"] else "FAILED"
    where = f" at {_label(c['worst_at'])}" if c.get("worst_at") else ""
    return f"{state} {c['expr']}: worst {_fmt(c['value'])}{where}"


def _fmt(v: Any) -> str:
    if v is None:
        return "null"
    return f"{v:.6g}" if isinstance(v, float) else str(v)
