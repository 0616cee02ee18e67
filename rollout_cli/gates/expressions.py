"""A gate's expression, `NAME OP NUMBER`: parsed and checked against the command's figures
before any input is read; an unknown name or a malformed expression is a usage error naming it
and the closest valid names."""
from __future__ import annotations

import difflib
import math
import operator
import re
from dataclasses import dataclass
from typing import Any

from ..core.errors import UsageError
from .figures import Figure

OPS = {"<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "<": operator.lt, ">": operator.gt}
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_EXPR = re.compile(r"\s*(?P<name>[A-Za-z_][\w.]*)\s*(?P<op><=|>=|==|!=|<|>)\s*(?P<num>" + _NUMBER + r")\s*")
_LEADING = re.compile(r"\s*([A-Za-z_][\w.]*)")
SYNTAX = "NAME OP NUMBER, OP one of < <= > >= == !="


@dataclass(frozen=True)
class Check:
    """One gate: it fails when `figure OP threshold` holds (or the figure is null or NaN)."""

    expr: str  # "NAME OP NUMBER", spaced as --json and the JUnit report show it
    figure: Figure
    op: str
    threshold: int | float

    @property
    def name(self) -> str:
        return self.figure.name


def split(text: str) -> tuple[str, str, str] | None:
    """(name, op, number) of a well-formed expression, None otherwise."""
    m = _EXPR.fullmatch(text)
    return (m.group("name"), m.group("op"), m.group("num")) if m else None


def closest(name: str, names: list[str], n: int = 3) -> list[str]:
    """The valid names nearest to `name` (difflib); also those ending like it ('truncation_rate'
    is close to 'step.truncation_rate')."""
    near = difflib.get_close_matches(name, names, n=n, cutoff=0.6)
    tail = name.rsplit(".", 1)[-1]
    near += [x for x in names if x.rsplit(".", 1)[-1] == tail and x not in near]
    return near[: n + 2]


def hint(names: list[str], near: list[str]) -> str:
    return (f"closest: {', '.join(near)}" if near else "no name is close") + " (--fail-on help lists them all)"


def parse(text: str, figures: dict[str, Figure], command: str, where: str, elsewhere: list[str] = ()) -> Check:
    """The Check of `text` for `command`; UsageError (exit 2) naming `where` (the flag or the
    file and table), the expression and the closest valid names (and `elsewhere`, the other
    commands that have the name, when some do)."""
    names = list(figures)
    parts = split(text)
    if parts is None:
        lead = _LEADING.match(text)
        near = closest(lead.group(1), names) if lead else []
        raise UsageError(f"{where} {text!r}: expected {SYNTAX}, as 'step.truncation_rate > 0.2'; {hint(names, near)}")
    name, op, num = parts
    fig = figures.get(name)
    if fig is None:
        other = f" (only {' and '.join(elsewhere)} {'has' if len(elsewhere) == 1 else 'have'} it)" if elsewhere else ""
        raise UsageError(f"{where} {text!r}: {command} has no figure {name!r}{other}; {hint(names, closest(name, names))}")
    try:
        threshold = number(num)
    except ValueError:
        raise UsageError(f"{where} {text!r}: the threshold {num} is not a finite number") from None
    return Check(f"{name} {op} {num}", fig, op, threshold)


def number(text: str) -> int | float:
    """The threshold: an int when written as one, a finite float otherwise (ValueError for 1e999)."""
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(text)
    return x


def known(value: Any) -> bool:
    """A number a check can compare: not null, not NaN, not a bool or a string."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return not (isinstance(value, float) and math.isnan(value))


def crosses(value: Any, op: str, threshold: int | float) -> bool:
    """Whether `value` fails the check: `value OP threshold` holds, or the value is unknown."""
    return True if not known(value) else bool(OPS[op](value, threshold))
