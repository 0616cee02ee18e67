"""Stage 1 (planning): discovered input files grouped into units, one per (split, step), and
the step rules a unit is held to once read. `convert` and `inspect` both plan and check their
inputs here, so they always read the same steps of the same files.

A unit's step comes from the file (its name, a `step` field, or `--step`), except for a file of
a format whose payload names its own step (a `.pt` dump's `rollout_id` key) when only its name
gave a number: the payload decides, so such a unit is checked for
`--steps` and duplicates only once it is read (`unit_step`, `claim_step`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import InvalidInputError, UsageError
from .discover import InputFile, discover, parse_steps
from .registry import format_of


@dataclass
class Unit:
    """One step of one split, from one input file."""

    input: InputFile
    step: int | None


def in_steps(step: int, spec: str | None) -> bool:
    """Whether `step` is selected by `--steps` (None selects every step)."""
    lo, hi = parse_steps(spec)
    return (lo is None or step >= lo) and (hi is None or step <= hi)


def _step_known(f: InputFile) -> bool:
    """The file's step is known before it is read (a payload's own step, as a .pt dump's
    rollout_id, wins over its name)."""
    return f.step is not None and not (format_of(f.format).payload_step and f.step_from == "name")


def plan_units(inputs: list[str], opts, out: str | None = None) -> tuple[list[Unit], list[str], list[str]]:
    """Discover inputs, select `--steps`, order by (split, step), refuse duplicate steps.
    `opts` is any RuleOptions (its `step` and `steps`); `out`, the output being written, is not
    searched. Returns (units, skipped non-input files, notes)."""
    files, skipped, notes = discover(inputs, opts.step, exclude=out, options=opts)
    parse_steps(opts.steps)  # a bad --steps is a usage error even when no file has a known step
    if getattr(opts, "max_staleness", None) is not None:
        blind = sorted({f.format for f in files if format_of(f.format).version_lag is None})
        if blind:
            raise UsageError(f"--max-staleness: the weight versions of {', '.join(blind)} inputs are not comparable "
                             f"with their steps (docs/rules.md#staleness); leave the option out for them")
    units = []
    seen: dict[tuple, str] = {}
    for f in files:
        if _step_known(f):
            if not in_steps(f.step, opts.steps):
                continue
            claim_step(seen, f.split, f.step, f.display)
        units.append(Unit(f, f.step))
    units.sort(key=lambda u: (u.input.split != "train", u.step if u.step is not None else -1, u.input.display))
    return units, skipped, notes


def claim_step(seen: dict[tuple, str], split: str, step: int, display: str) -> None:
    """Record that `display` gives (split, step); a second input of the same step is an error."""
    key = (split, step)
    if key in seen:
        raise InvalidInputError(f"two inputs give {split} step {step}: {seen[key]} and {display}")
    seen[key] = display


def record_step(inp: InputFile) -> int | None:
    """The step a record's own `step` field must equal (None: not checked). A payload that
    names its own step (a `.pt` dump's) is known only once read, and its samples carry none."""
    return inp.step if not format_of(inp.format).payload_step else None


def unit_step(unit: Unit, payload_step: int | None) -> int:
    """The step of a read unit: the dump's own step key wins over the file's."""
    step = payload_step if payload_step is not None else unit.step
    if step is None:
        raise UsageError(f"{unit.input.display}: cannot tell its step: no rollout_id key in the dump and no number in its name")
    return step


def train_dump_note(unit: Unit) -> str:
    """The note for a unit whose payload is a slime train-side dump (not rollout data): skipped."""
    return f"{unit.input.display}: slime train-side dump (format_version key), skipped"
