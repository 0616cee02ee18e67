"""The library side of `rollout-cli inspect`, as plain data: `inspect_paths` (summary, groups,
anomalies), `show_rollout` (one rollout's samples), `iter_steps` (per-step sample rows, e.g.
to compare with a conversion)."""
from __future__ import annotations

from typing import Any, Callable, Iterator

from ..output import manifest as manifest_mod
from .aggregate import Totals, check_group_args, groups, summary
from .anomalies import Anomalies
from .loss_weight import from_rows
from .options import InspectOptions
from .rows import StepData
from .show import show_rollout, show_rollouts
from .sources import Sources, iter_step_data, resolve

__all__ = ["InspectOptions", "StepData", "inspect_paths", "iter_steps", "show_rollout", "show_rollouts"]


def inspect_paths(
    paths: list[str],
    group_by: str | None = None,
    options: InspectOptions | None = None,
    *,
    sort: str | None = None,
    limit: int | None = None,
    each_step: Callable[[StepData], None] | None = None,
) -> dict:
    """`{"summary": {...}, "groups": [...], "anomalies": [...], "removed": [...], "loss_weight": [...]}`
    for dumps or converted output (anomalies most severe first, then by step; `removed`: the
    samples remove_sample left out, as many as anomalies of a kind are kept; `loss_weight`: per
    step, inspect.loss_weight's modes and movers).
    `each_step`, when given, sees every step's rows as they are aggregated (one read of the input
    for callers that need the rows too).

    Raises RolloutCliError (UsageError for bad arguments, InvalidInputError for unreadable input).
    """
    opts = options or InspectOptions()
    opts.check()
    check_group_args(group_by, sort, limit)  # before reading anything
    src = resolve(list(paths), opts)
    anomalies = Anomalies(opts.max_anomalies)
    notes = list(src.notes) + _other_split_notes(src, opts)
    pending = _pending(src, opts)
    notes += [manifest_mod.pending_message(p) for p in pending]
    totals = Totals()
    weights = []
    for sd in iter_step_data(src, opts, anomalies, notes):
        totals.add(sd)
        weights.append({"split": sd.split, "step": sd.step, **_rounded(from_rows(sd.rows))})
        if each_step is not None:
            each_step(sd)
    template = None
    if opts.check_template:
        from .template_check import check_template

        template = check_template(src, opts, anomalies)
    table = totals.table()
    s = summary(totals, table, kind=src.kind, split=opts.split, files=_files(src, totals, opts.split),
                anomaly_counts=anomalies.count_dict(), anomaly_levels=anomalies.level_dict(), options=_options(src, opts, notes), group_by=group_by, notes=notes)
    if src.kind == "converted":
        s["pending"] = pending
    if template is not None:
        s["template"] = template
    rows: list[dict] = []
    if group_by:
        rows, s["groups_total"] = groups(table, group_by, sort, limit)
    return {"summary": s, "groups": rows, "anomalies": anomalies.sorted_items(), "removed": anomalies.removed,
            "loss_weight": weights}


def _pending(src: Sources, opts: InspectOptions) -> list[dict]:
    """Converted outputs: the steps of the split looked at that were left out while their input
    was being written (the manifest's `pending`), each with the output it belongs to."""
    return [dict(p.as_dict(), out=o.root) for o in src.outputs for p in o.pending_of(opts.split)]


def _rounded(v: Any) -> Any:
    """Floats to 6 decimals, as the rest of inspect's JSON."""
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_rounded(x) for x in v]
    return v


def _other_split_notes(src: Sources, opts: InspectOptions) -> list[str]:
    if not src.other_split:
        return []
    other = "eval" if opts.split == "train" else "train"
    what = "step(s)" if src.kind == "converted" else "input file(s)"
    return [f"{src.other_split} {other} {what} not shown (--split {other} shows them)"]


def _files(src: Sources, totals: Totals, split: str) -> int:
    """Dumps: the steps read (one file each); converted: the shards of the steps shown."""
    if src.kind != "converted":
        return len(totals.per_step)
    shown = {p["step"] for p in totals.per_step}
    return sum(len(s.shards) for o in src.outputs for s in o.steps if s.split == split and s.step in shown)


def _options(src: Sources, opts: InspectOptions, notes: list[str]) -> Any:
    """`summary.options`: the id/reward options used (dumps), or each manifest's options."""
    if src.kind != "converted":
        return opts.id_reward_options()
    ms = [o.options for o in src.outputs]
    if opts.id_reward_options() != InspectOptions().id_reward_options():
        notes.append("id and reward options apply to dumps only; converted output has the ids and rewards of its manifest's options")
    return ms[0] if len(ms) == 1 else ms


def iter_steps(paths: list[str], options: InspectOptions | None = None) -> Iterator[StepData]:
    """Per-step sample summaries (ROW_SCHEMA), in convert's order: what convert writes, without tokens."""
    opts = options or InspectOptions()
    opts.check()
    src = resolve(list(paths), opts)
    yield from iter_step_data(src, opts, Anomalies(opts.max_anomalies), [])
