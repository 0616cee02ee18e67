"""The library side of `rollout-cli audit`, as plain data: `audit_paths` pairs the rollout
dumps' steps with the train dumps' (by the payloads' step numbers) and audits each pair."""
from __future__ import annotations

from typing import Callable

from ..core.errors import InvalidInputError
from ..inputs import limits
from ..inputs.discover import discover_train
from ..inputs.registry import read_input
from ..inputs.units import claim_step, in_steps, plan_units, train_dump_note, unit_step
from . import diff
from .options import AuditOptions
from .step import CHUNK_RECORDS, StepAudit, audit_step
from .train_side import TrainSide


def audit_paths(rollout_paths: list[str], train_paths: list[str], options: AuditOptions | None = None, *,
                each_step: Callable[[StepAudit], None] | None = None) -> dict:
    """`{"summary": {...}, "rules": [...], "steps": [...], "divergences": [...]}` (docs/audit.md):
    `rules` lists, per step and derived field, a trainer rule that is not the expected one
    (auditing/rules.py). `each_step`
    sees every step's StepAudit (with its per-token data under keep_tokens) before it is dropped.

    Raises UsageError for bad arguments, InvalidInputError for unreadable or invalid input and
    for inputs that share no step."""
    opts = options or AuditOptions()
    opts.check()
    if not train_paths:
        from ..core.errors import UsageError

        raise UsageError("--train: give the train-side dumps (files or folders) to audit against")
    units, _, notes = plan_units(list(rollout_paths), opts)
    limits.use(opts.max_line_bytes, opts.max_storage_bytes)  # the train side's reads, too
    notes.extend(text_dump_notes([u.input for u in units]))
    train = TrainSide(discover_train(list(train_paths)), opts.trust_pickle, opts.steps, explicit=set(train_paths))
    notes.extend(train.notes)
    steps: list[StepAudit] = []
    seen: dict = {}
    for unit in units:
        sa = _unit(unit, opts, train, seen, notes)
        if sa is None:
            continue
        if each_step is not None:
            each_step(sa)
        sa.tokens = {}
        steps.append(sa)
    rollout_steps = [s.step for s in steps]
    for step, files in train.rest().items():
        sa = StepAudit(step, None, " + ".join(files), cap=opts.max_divergences)
        sa.add(diff.record(step, None, "extra", None, sa.train_file, {"expected": None, "got": f"step {step}"}))
        if each_step is not None:
            each_step(sa)
        steps.append(sa)
    steps.sort(key=lambda s: s.step)
    paired = [s for s in steps if s.rollout_file and s.train_file]
    if steps and not paired:
        train_steps = [s.step for s in steps if s.train_file]
        if not train_steps:
            raise InvalidInputError(_no_train_dumps(train_paths, units, rollout_steps))
        raise InvalidInputError(f"no step is in both inputs: rollout steps {rollout_steps or 'none'}, train steps "
                                f"{train_steps or 'none'} (a train dump's rollout_id is the step it trained on)")
    if not steps:
        raise InvalidInputError("nothing to audit: no train-split rollout dump and no train dump"
                                + (f" in steps {opts.steps}" if opts.steps else ""))
    total = sum(s.divergence_count for s in steps)
    by_field: dict[str, int] = {}
    for s in steps:
        for k, v in s.by_field.items():
            by_field[k] = by_field.get(k, 0) + v
    summary = {
        "steps": len(steps), "paired_steps": len(paired),
        "rollout_only_steps": [s.step for s in steps if not s.train_file],
        "train_only_steps": [s.step for s in steps if not s.rollout_file],
        "samples": sum(s.paired for s in steps), "divergences": total,
        "divergences_by_field": dict(sorted(by_field.items())),
        "rule_differences": sum(len(s.rule_findings) for s in steps),
        "options": opts.rule_options(), "notes": notes + [n for s in steps for n in s.notes],
    }
    return {"summary": summary, "rules": [e for s in steps for e in s.rule_findings], "steps": [s.to_dict() for s in steps],
            "divergences": [r for s in steps for r in s.divergences]}


def _no_train_dumps(train_paths: list[str], units, rollout_steps: list[int]) -> str:
    """The message when --train holds no train dump at all: what audit reads there, and for a
    framework that writes none, what auditing its runs would take."""
    from ..inputs.registry import format_of, train_formats

    why = [w for f in sorted({u.input.format for u in units}) if (w := format_of(f).no_train_side)]
    return (f"no train dump under --train {' '.join(train_paths)} (rollout steps {rollout_steps or 'none'}): audit reads "
            f"the trainer's side from {', '.join(train_formats())} files (slime's --save-debug-train-data or "
            f"--dump-details .pt dumps, NeMo-RL's step logs)" + "".join(f"; {w}" for w in why))


def text_dump_notes(inputs) -> list[str]:
    """What auditing rows tokenized from a text dump means (inputs/textdump.py): they are not the
    ids the policy sampled, so a token that differs may be the tokenizing, not the trainer."""
    from ..inputs.registry import format_of

    return [f"{i.display}: {format_of(i.format).text_dump} tokenized by --tokenizer: its rows are not token-exact, "
            "so a token or length divergence may come from tokenizing the text, not from the trainer"
            for i in inputs if format_of(i.format).text_dump]


def _unit(unit, opts: AuditOptions, train: TrainSide, seen: dict, notes: list) -> StepAudit | None:
    """One rollout unit: its step read from the dump, paired, audited (None: not audited)."""
    inp = unit.input
    reading = read_input(inp, trust_pickle=opts.trust_pickle, chunk_records=CHUNK_RECORDS, tokenizer=opts.tokenizer,
                         max_line_bytes=opts.max_line_bytes, max_storage_bytes=opts.max_storage_bytes)
    chunks = iter(reading)
    first = next(chunks, None)  # the payload is open now: its step and kind are known
    if reading.info.train_dump:
        notes.append(train_dump_note(unit) + " (a train dump goes after --train)")
        return None
    step = unit_step(unit, reading.info.step)
    if not in_steps(step, opts.steps):
        return None
    claim_step(seen, inp.split, step, inp.display)
    if inp.split != "train":
        notes.append(f"{inp.display}: eval step {step}: the trainer does not train on it, not audited")
        return None
    td = train.take(step)
    if td is None:
        sa = StepAudit(step, inp.display, None, cap=opts.max_divergences)
        sa.add(diff.record(step, None, "missing", inp.display, None, {"expected": f"step {step}", "got": None}))
        return sa
    return audit_step(unit, first, chunks, step, td, opts)
