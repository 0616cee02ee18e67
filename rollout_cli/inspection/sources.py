"""What the paths given to `inspect` are: dumps (planned into units exactly as convert plans
them) or converted outputs (read through their manifests), one kind at a time."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterator

from ..core import layout, storage
from ..core.errors import UsageError
from ..inputs.registry import extensions, format_of
from ..inputs.units import Unit, plan_units
from .anomalies import Anomalies
from .dumps import dump_steps
from .options import InspectOptions
from ..output.model import Output
from .outputs import is_output, output_steps, read_output
from .rows import StepData


@dataclass
class Sources:
    kind: str  # "dumps" | "converted"
    outputs: list[Output] = field(default_factory=list)  # converted: each output's model, as given
    units: list[Unit] = field(default_factory=list)  # dumps: the units of the split looked at
    notes: list[str] = field(default_factory=list)
    other_split: int = 0  # inputs (dumps) or steps (converted) of the other split


def resolve(paths: list[str], opts: InspectOptions) -> Sources:
    """Tell dumps from converted outputs; plan the dump units of `opts.split`."""
    if not paths:
        raise UsageError("no input given")
    outs = []
    for p in paths:
        if p.rstrip("/").rsplit("/", 1)[-1] == layout.MANIFEST and storage.is_file(p):
            outs.append(p.rstrip("/")[: -len(layout.MANIFEST) - 1] if storage.is_uri(p) else os.path.dirname(p) or ".")
        elif is_output(p):
            outs.append(p)
    if outs:
        if len(outs) != len(paths):
            raise UsageError("give either converted outputs (folders with manifest.json) or dumps, not both")
        src = Sources("converted", outputs=[read_output(o) for o in outs])
        src.other_split = sum(s.split != opts.split for o in src.outputs for s in o.steps)
        return src
    units, _, notes = plan_units(list(paths), opts)
    for u in units:
        if u.input.path != "-" and format_of(u.input.format).is_output_shard(u.input.path):
            raise UsageError(f"{u.input.display}: a shard of converted output; inspect its output folder (the one with manifest.json)")
    src = Sources("dumps", units=[u for u in units if u.input.split == opts.split], notes=notes)
    src.other_split = len(units) - len(src.units)
    if not units:
        for p in paths:
            if _interrupted(p):
                raise UsageError(
                    f"{p}: an unfinished conversion (no {layout.MANIFEST} yet: interrupted, or still running), so nothing "
                    f"to inspect; finish it with `rollout-cli convert INPUT... {p} --resume` (the same inputs and options), "
                    f"or start over with `--overwrite`; inspect the dumps themselves meanwhile")
        raise UsageError(f"no input files found (expected {', '.join(sorted(extensions()))}, or a converted output folder)")
    return src


def _interrupted(path: str) -> bool:
    """An output folder of a conversion that has not committed (its staging area, no manifest)."""
    if path == "-":
        return False
    if storage.is_uri(path):
        from ..output.commit import state

        return state(path) == "interrupted"
    return os.path.isdir(os.path.join(path, layout.STAGING)) and not layout.is_output(path)


def iter_step_data(src: Sources, opts: InspectOptions, anomalies: Anomalies, notes: list) -> Iterator[StepData]:
    """Every selected step of the sources, in convert's order."""
    if src.kind == "dumps":
        yield from dump_steps(src.units, opts, anomalies, notes)
        return
    seen: set = set()
    for o in src.outputs:
        yield from output_steps(o, opts, anomalies, seen)
