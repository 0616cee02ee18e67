"""--on-error fail over a whole run: the invalid samples of every step, collected as the steps
come back (in whatever order the engine finishes them), reported in input order (step order,
then line, row or sample) up to the problem budget (--max-errors, default 20), with the total
found. Nothing is committed; the scheduler stops once the budget's worth of problems at the
front of the input is known."""
from __future__ import annotations

from ..core.errors import InvalidInputError, Location, Problem

DEFAULT_BUDGET = 20  # problems reported under --on-error fail without --max-errors


def fail_budget(on_error: str, max_errors: int | None) -> int | None:
    """How many problems a step (and the run) reports under --on-error fail; None under skip."""
    if on_error != "fail":
        return None
    return max(1, max_errors if max_errors is not None else DEFAULT_BUDGET)


def error_problems(e: InvalidInputError, display: str) -> list[Problem]:
    """A step's invalid-input error as problems: its own, or one naming the file."""
    if e.problems:
        return list(e.problems)
    msg = str(e)
    prefix = f"{display}: "
    return [Problem(Location(display), None, msg[len(prefix):] if msg.startswith(prefix) else msg, "input.invalid")]


class RunFailures:
    """The failed steps of a run under --on-error fail, by unit index (= input order)."""

    def __init__(self, budget: int):
        self.budget = budget
        self.problems: dict[int, list[Problem]] = {}
        self.errors: dict[int, InvalidInputError] = {}  # a step that failed as a whole
        self.cut = False  # some step stopped at the budget, or the run stopped before its end

    def __bool__(self) -> bool:
        return bool(self.problems)

    def add(self, unit: int, problems: list[Problem], *, stopped: bool = False,
            error: InvalidInputError | None = None) -> None:
        self.problems[unit] = list(problems)
        if error is not None:
            self.errors[unit] = error
        self.cut |= stopped

    def enough(self, settled, units: int) -> bool:
        """Whether the first `budget` problems in input order are known: the units before them
        are all settled (done or failed). `settled`: a container of unit indices."""
        count = 0
        for u in range(units):
            if u not in settled:
                return False
            count += len(self.problems.get(u, ()))
            if count >= self.budget:
                return True
        return False

    def error(self, stopped_early: bool) -> InvalidInputError:
        """The run's error: a single step's own error as it was raised, else every problem
        found, in input order, the first `budget` listed."""
        if len(self.problems) == 1 and self.errors and not stopped_early:
            return next(iter(self.errors.values()))
        found = [p for u in sorted(self.problems) for p in self.problems[u]]
        shown = found[: self.budget]
        files = len(dict.fromkeys(p.location.file for p in found))
        what = "invalid sample" if all(p.location.number is not None for p in found) else "problem"
        total = len(found)
        count = f"{'at least ' if self.cut or stopped_early else ''}{total} {what}{'s' if total != 1 else ''}"
        where = f"in {files} file{'s' if files != 1 else ''}"
        listed = ""
        if len(shown) < total or self.cut or stopped_early:
            listed = f" (the first {len(shown)} listed; stopped at --max-errors {self.budget})" if self.cut or stopped_early \
                else f" (the first {len(shown)} listed, --max-errors {self.budget})"
        return InvalidInputError(f"{count} {where}{listed}: {shown[0]}", shown)


class FailedPart:
    """A part of a step whose parse raised an invalid input (its problems, the error)."""

    def __init__(self, problems: list[Problem], error: InvalidInputError | None):
        self.problems, self.error = problems, error


def shifted(p: Problem, offset: int) -> Problem:
    """A problem of a later part of a JSONL file, numbered from the file's first line."""
    if not offset or p.location.kind != "line" or p.location.number is None:
        return p
    return Problem(Location(p.location.file, "line", p.location.number + offset), p.field, p.message, p.rule)


def parts_problems(got: list) -> tuple[list[Problem], bool, InvalidInputError | None]:
    """The problems of a step read in parts (PartResults and FailedParts) of which some failed or
    stopped at the budget: in line order, up to the first part that stopped (the lines after it
    are not counted, so later parts cannot be numbered). Returns (problems, stopped, the error
    to raise as it is when it is the step's only problem)."""
    parsed = sorted((p for p in got if not isinstance(p, FailedPart)), key=lambda r: (r.start, r.part))
    failed = [p for p in got if isinstance(p, FailedPart)]
    problems: list[Problem] = []
    offset = 0
    for r in parsed:
        if r.kind == "line":
            problems += [shifted(p, offset) for _, p in r.problems]
            offset += r.lines
        else:
            problems += [p for _, p in r.problems]
        if r.stopped:
            break
    else:
        problems += [p for f in failed for p in f.problems]
    error = failed[0].error if len(failed) == 1 and not any(r.problems for r in parsed) else None
    return problems, any(r.stopped for r in parsed), error
